#include "toolsrv/elf.hpp"

#include <fcntl.h>
#include <gelf.h>
#include <glob.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <deque>
#include <fstream>
#include <optional>
#include <set>

#include "toolsrv/fd.hpp"
#include "toolsrv/sandbox.hpp"

namespace toolsrv {
namespace {

constexpr std::size_t max_headers = 4096;  // program headers or dynamic entries of one file
constexpr std::size_t max_strtab = 1u << 20;
constexpr std::size_t max_objects = 512;   // shared objects of one executable

struct Dynamic {
  std::string interp;
  std::vector<std::string> needed;
  std::vector<std::string> rpath, runpath;
};

bool regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

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
    for (const std::string o : {"${ORIGIN}", "$ORIGIN"})
      for (auto k = d.find(o); k != std::string::npos; k = d.find(o)) d.replace(k, o.size(), origin);
    if (!d.empty()) out.push_back(d);
    i = j + 1;
  }
  return out;
}

// One ELF file opened with libelf; every read is bounds-checked by elf_getdata_rawchunk.
class ElfFile {
 public:
  explicit ElfFile(const std::string& path) {
    static const bool ready = elf_version(EV_CURRENT) != EV_NONE;
    fd_.reset(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (!ready || !fd_ || ::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    elf_ = elf_begin(fd_.get(), ELF_C_READ, nullptr);
    if (elf_ && elf_kind(elf_) != ELF_K_ELF) {
      elf_end(elf_);
      elf_ = nullptr;
    }
  }
  ~ElfFile() {
    if (elf_) elf_end(elf_);
  }
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  Elf* get() const { return elf_; }

  std::string string_at(std::uint64_t off, std::uint64_t max) const {
    if (max == 0) return {};
    Elf_Data* d = elf_getdata_rawchunk(elf_, static_cast<int64_t>(off), max, ELF_T_BYTE);
    if (!d || !d->d_buf) return {};
    const auto* p = static_cast<const char*>(d->d_buf);
    std::size_t n = 0;
    while (n < d->d_size && p[n] != '\0') ++n;
    return n < d->d_size ? std::string(p, n) : std::string();
  }

 private:
  UniqueFd fd_;
  Elf* elf_ = nullptr;
};

std::optional<Dynamic> read_dynamic(const std::string& path) {
  ElfFile f(path);
  Elf* e = f.get();
  std::size_t phnum = 0;
  if (!e || elf_getphdrnum(e, &phnum) != 0 || phnum > max_headers) return std::nullopt;
  std::vector<GElf_Phdr> ph;
  for (std::size_t i = 0; i < phnum; ++i) {
    GElf_Phdr p;
    if (!gelf_getphdr(e, static_cast<int>(i), &p)) return std::nullopt;
    ph.push_back(p);
  }
  Dynamic d;
  const GElf_Phdr* dyn = nullptr;
  for (const auto& p : ph) {
    if (p.p_type == PT_INTERP) d.interp = f.string_at(p.p_offset, std::min<std::uint64_t>(p.p_filesz, PATH_MAX));
    if (p.p_type == PT_DYNAMIC) dyn = &p;
  }
  if (!dyn) return d;  // static
  const std::size_t entsize = gelf_fsize(e, ELF_T_DYN, 1, EV_CURRENT);
  if (entsize == 0) return d;
  const std::uint64_t count = std::min<std::uint64_t>(dyn->p_filesz / entsize, max_headers);
  Elf_Data* data = count ? elf_getdata_rawchunk(e, static_cast<int64_t>(dyn->p_offset), count * entsize, ELF_T_DYN) : nullptr;
  if (!data) return d;

  std::uint64_t strtab = 0, strsz = 0;
  std::vector<std::uint64_t> needed, rpath, runpath;
  for (int i = 0; static_cast<std::uint64_t>(i) < count; ++i) {
    GElf_Dyn entry;
    if (!gelf_getdyn(data, i, &entry) || entry.d_tag == DT_NULL) break;
    switch (entry.d_tag) {
      case DT_STRTAB: strtab = entry.d_un.d_ptr; break;
      case DT_STRSZ: strsz = entry.d_un.d_val; break;
      case DT_NEEDED: needed.push_back(entry.d_un.d_val); break;
      case DT_RPATH: rpath.push_back(entry.d_un.d_val); break;
      case DT_RUNPATH: runpath.push_back(entry.d_un.d_val); break;
      default: break;
    }
  }
  // DT_STRTAB is an address: the loadable segment that holds it gives its place in the file.
  std::optional<std::uint64_t> str_off;
  for (const auto& p : ph)
    if (p.p_type == PT_LOAD && strtab >= p.p_vaddr && strtab - p.p_vaddr < p.p_filesz)
      str_off = p.p_offset + (strtab - p.p_vaddr);
  if (!str_off || strsz > max_strtab) return d;
  auto str = [&](std::uint64_t at) { return at < strsz ? f.string_at(*str_off + at, strsz - at) : std::string(); };
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

// The file the loader would map for `name` needed by `by`: a name with a slash as written (only
// an absolute one: a relative one resolves in the tool's cwd), else the first regular file in
// the search directories.
std::optional<std::string> find(const std::string& name, const Dynamic& by) {
  if (name.find('/') != std::string::npos) {
    if (name.front() == '/' && regular_file(name)) return name;
    return std::nullopt;
  }
  auto look = [&](const std::vector<std::string>& dirs) -> std::optional<std::string> {
    for (const auto& dir : dirs) {
      if (dir.front() != '/') continue;
      if (std::string p = dir + "/" + name; regular_file(p)) return p;
    }
    return std::nullopt;
  };
  if (by.runpath.empty())
    if (auto p = look(by.rpath)) return p;
  if (auto p = look(by.runpath)) return p;
  return look(system_dirs());
}

}  // namespace

std::vector<std::string> linked_libraries(const std::string& exe, const std::vector<std::string>& writable) {
  if (inside_writable(exe, writable)) return {};
  auto top = read_dynamic(exe);
  if (!top) return {};
  std::vector<std::string> out;
  std::set<std::string> seen;
  const auto& interp = top->interp;
  if (!interp.empty() && interp.front() == '/' && regular_file(interp) && !inside_writable(interp, writable)) {
    out.push_back(interp);
    seen.insert(interp);
  }
  std::deque<Dynamic> todo{std::move(*top)};
  while (!todo.empty() && out.size() < max_objects) {
    Dynamic dyn = std::move(todo.front());
    todo.pop_front();
    for (const auto& name : dyn.needed) {
      auto lib = find(name, dyn);
      if (!lib || inside_writable(*lib, writable) || !seen.insert(*lib).second) continue;
      out.push_back(*lib);
      if (auto d = read_dynamic(*lib)) todo.push_back(std::move(*d));
    }
  }
  return out;
}

}  // namespace toolsrv
