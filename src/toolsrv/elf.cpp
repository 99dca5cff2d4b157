#include "toolsrv/elf.hpp"

#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <fstream>
#include <optional>
#include <set>

namespace toolsrv {

namespace {

constexpr std::size_t MAX_HEADERS = 4096;    // program headers or dynamic entries of one file
constexpr std::size_t MAX_STRTAB = 1u << 20;
constexpr std::size_t MAX_OBJECTS = 512;     // shared objects of one executable

// One file opened for bounded reads: a header that points outside the file reads as nothing.
class File {
 public:
  explicit File(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    struct stat st {};
    if (fd_ >= 0 && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  bool read(std::uint64_t off, void* buf, std::size_t n) const {
    if (off > size_ || n > size_ - off) return false;
    return ::pread(fd_, buf, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
  }
  std::string read_string(std::uint64_t off, std::size_t max) const {
    if (off >= size_) return {};
    std::string s(std::min<std::uint64_t>(max, size_ - off), '\0');
    if (!read(off, s.data(), s.size())) return {};
    return s.substr(0, s.find('\0'));
  }

 private:
  int fd_;
  std::uint64_t size_ = 0;
};

struct Dynamic {
  std::string interp;
  std::vector<std::string> needed;
  std::vector<std::string> rpath, runpath;
};

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::vector<std::string> search_list(const std::string& text, const std::string& origin) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i <= text.size()) {
    auto j = text.find(':', i);
    if (j == std::string::npos) j = text.size();
    std::string d = text.substr(i, j - i);
    for (const char* o : {"${ORIGIN}", "$ORIGIN"})
      for (auto k = d.find(o); k != std::string::npos; k = d.find(o)) d.replace(k, std::string(o).size(), origin);
    if (!d.empty()) out.push_back(d);
    i = j + 1;
  }
  return out;
}

std::optional<Dynamic> read_dynamic(const std::string& path) {
  File f(path);
  Elf64_Ehdr eh{};
  if (!f.read(0, &eh, sizeof eh) || std::equal(eh.e_ident, eh.e_ident + SELFMAG, ELFMAG) == false ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > MAX_HEADERS)
    return std::nullopt;
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!ph.empty() && !f.read(eh.e_phoff, ph.data(), ph.size() * sizeof(Elf64_Phdr))) return std::nullopt;

  Dynamic d;
  const Elf64_Phdr* dyn = nullptr;
  for (const auto& p : ph) {
    if (p.p_type == PT_INTERP) d.interp = f.read_string(p.p_offset, std::min<std::uint64_t>(p.p_filesz, PATH_MAX));
    if (p.p_type == PT_DYNAMIC) dyn = &p;
  }
  if (!dyn) return d;  // static
  std::vector<Elf64_Dyn> entries(std::min<std::uint64_t>(dyn->p_filesz / sizeof(Elf64_Dyn), MAX_HEADERS));
  if (!f.read(dyn->p_offset, entries.data(), entries.size() * sizeof(Elf64_Dyn))) return d;

  std::uint64_t strtab = 0, strsz = 0;
  std::vector<std::uint64_t> needed, rpath, runpath;
  for (const auto& e : entries) {
    if (e.d_tag == DT_NULL) break;
    if (e.d_tag == DT_STRTAB) strtab = e.d_un.d_ptr;
    if (e.d_tag == DT_STRSZ) strsz = e.d_un.d_val;
    if (e.d_tag == DT_NEEDED) needed.push_back(e.d_un.d_val);
    if (e.d_tag == DT_RPATH) rpath.push_back(e.d_un.d_val);
    if (e.d_tag == DT_RUNPATH) runpath.push_back(e.d_un.d_val);
  }
  // DT_STRTAB is an address: the loadable segment that holds it gives its place in the file.
  std::optional<std::uint64_t> str_off;
  for (const auto& p : ph)
    if (p.p_type == PT_LOAD && strtab >= p.p_vaddr && strtab - p.p_vaddr < p.p_filesz)
      str_off = p.p_offset + (strtab - p.p_vaddr);
  if (!str_off || strsz > MAX_STRTAB) return d;
  auto str = [&](std::uint64_t at) { return at < strsz ? f.read_string(*str_off + at, strsz - at) : std::string(); };
  const std::string origin = dir_of(path);
  for (auto n : needed)
    if (auto s = str(n); !s.empty()) d.needed.push_back(s);
  for (auto r : rpath)
    for (auto& dir : search_list(str(r), origin)) d.rpath.push_back(dir);
  for (auto r : runpath)
    for (auto& dir : search_list(str(r), origin)) d.runpath.push_back(dir);
  return d;
}

void read_ld_so_conf(const std::string& file, std::vector<std::string>& dirs, int depth) {
  if (depth > 8) return;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    const auto b = line.find_first_not_of(" \t"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) continue;
    line = line.substr(b, e - b + 1);
    if (line.rfind("include", 0) == 0 && line.size() > 7 && (line[7] == ' ' || line[7] == '\t')) {
      std::string pattern = line.substr(line.find_first_not_of(" \t", 7));
      if (pattern.front() != '/') pattern = dir_of(file) + "/" + pattern;
      glob_t g{};
      if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (std::size_t i = 0; i < g.gl_pathc; i++) read_ld_so_conf(g.gl_pathv[i], dirs, depth + 1);
      ::globfree(&g);
    } else if (line.front() == '/') {
      dirs.push_back(line);
    }
  }
}

// What ld.so.cache is built from, then the loader's built-in defaults.
const std::vector<std::string>& system_dirs() {
  static const std::vector<std::string> dirs = [] {
    std::vector<std::string> d;
    read_ld_so_conf("/etc/ld.so.conf", d, 0);
    for (const char* def : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"}) d.push_back(def);
    return d;
  }();
  return dirs;
}

std::optional<std::string> find(const std::string& name, const Dynamic& by) {
  if (name.find('/') != std::string::npos) return name;
  auto look = [&](const std::vector<std::string>& dirs) -> std::optional<std::string> {
    for (const auto& dir : dirs) {
      std::string p = dir + "/" + name;
      struct stat st {};
      if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return p;
    }
    return std::nullopt;
  };
  if (by.runpath.empty())
    if (auto p = look(by.rpath)) return p;
  if (auto p = look(by.runpath)) return p;
  return look(system_dirs());
}

}  // namespace

std::vector<std::string> linked_libraries(const std::string& exe) {
  auto top = read_dynamic(exe);
  if (!top) return {};
  std::vector<std::string> out;
  std::set<std::string> seen;
  if (!top->interp.empty() && top->interp.front() == '/') {
    out.push_back(top->interp);
    seen.insert(top->interp);
  }
  std::deque<Dynamic> todo{std::move(*top)};
  while (!todo.empty() && out.size() < MAX_OBJECTS) {
    Dynamic dyn = std::move(todo.front());
    todo.pop_front();
    for (const auto& name : dyn.needed) {
      auto lib = find(name, dyn);
      if (!lib || !seen.insert(*lib).second) continue;
      out.push_back(*lib);
      if (auto d = read_dynamic(*lib)) todo.push_back(std::move(*d));
    }
  }
  return out;
}

}  // namespace toolsrv
