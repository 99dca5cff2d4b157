// file_read: a text file with line numbers (cat -n), by line range. See file_read.meta.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "fsutil.hpp"
#include "magic.hpp"
#include "tool.hpp"

using namespace filetool;

namespace {

constexpr long long default_limit = 2000;
constexpr std::size_t max_line = 2000;           // bytes of one line shown
// Bytes of the whole result, its last line included: under the 8192 bytes the engine keeps of a
// result (§8.3.4, the rest of a longer one cut from its middle), so "continue with offset=" names
// the first line the model has not seen.
constexpr std::size_t max_output = 7 * 1024;
constexpr std::size_t chunk = 1 << 20;

std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); i++) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); j++) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (std::tolower(a[i - 1]) != std::tolower(b[j - 1]))});
      diag = up;
    }
  }
  return row[b.size()];
}

// Up to three names in the directory of `abs` close to its name: "; did you mean: a, b?".
std::string suggestions(const std::string& abs) {
  const auto slash = abs.rfind('/');
  const std::string dir = slash == 0 ? "/" : abs.substr(0, slash), name = abs.substr(slash + 1);
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return errno == ENOENT ? "; its directory " + shown(dir) + " does not exist either" : "";
  const std::string stem = name.substr(0, name.find('.'));
  std::vector<std::pair<std::size_t, std::string>> near;
  int seen = 0;
  while (const dirent* e = ::readdir(d.get())) {
    if (++seen > 5000) break;
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::size_t dist = distance(n, name);
    if (!stem.empty() && n.substr(0, n.find('.')) == stem) dist = std::min<std::size_t>(dist, 1);
    if (dist <= std::max<std::size_t>(2, name.size() / 4)) near.emplace_back(dist, n);
  }
  if (near.empty()) return "";
  std::sort(near.begin(), near.end());
  std::string out = "; did you mean: ";
  for (std::size_t i = 0; i < near.size() && i < 3; i++) {
    if (i) out += ", ";
    out += shown(dir == "/" ? "/" + near[i].second : dir + "/" + near[i].second);
  }
  return out + "?";
}

// `line` cut to max_line bytes at a character boundary, with the mark.
void append_line(std::string& out, std::size_t number, std::string_view line, std::size_t full) {
  if (!line.empty() && line.back() == '\r' && full == line.size()) line.remove_suffix(1), full--;
  char num[24];
  std::snprintf(num, sizeof num, "%6zu\t", number);
  out += num;
  if (full <= max_line) {
    out += line;
  } else {
    std::size_t cut = max_line;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) cut--;
    out += line.substr(0, cut);
    out += " … [line cut: " + std::to_string(full - cut) + " more bytes]";
  }
  out += '\n';
}

std::string call(const tool::Args& args) {
  const std::string abs = tool::absolute(args.string("path"));
  const long long offset = args.opt_int("offset", 1, 1LL << 40).value_or(1);
  const long long limit = args.opt_int("limit", 1, 1LL << 40).value_or(default_limit);

  const int fd = ::open(abs.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) throw tool::Error("file not found: " + shown(abs) + suggestions(abs));
    fail(err, abs);
  }
  std::unique_ptr<int, void (*)(int*)> guard(new int(fd), [](int* p) { ::close(*p); delete p; });
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(errno, abs);
  if (S_ISDIR(st.st_mode)) throw tool::Error("is a directory: " + shown(abs) + "; use file_glob to list its files");
  if (!S_ISREG(st.st_mode)) throw tool::Error("not a regular file: " + shown(abs));

  std::string buf(chunk, '\0');
  auto fill = [&]() -> std::size_t {
    for (;;) {
      const ssize_t r = ::read(fd, buf.data(), buf.size());
      if (r >= 0) return static_cast<std::size_t>(r);
      if (errno != EINTR) fail(errno, abs, "cannot read");
    }
  };
  // Read, not stat'ed: /proc and /sys files say size 0 and have text.
  std::size_t got = fill();
  if (got == 0) return "(" + shown(abs) + " is an empty file)";
  const std::string_view head(buf.data(), std::min<std::size_t>(got, 64 * 1024));
  if (auto kind = media_kind(head))
    throw tool::Error(shown(abs) + ": " + *kind + " (" + human_size(st.st_size) + "); file_read shows text files only");
  if (binary_block(head, got > head.size() || static_cast<long long>(got) < st.st_size))
    throw tool::Error("binary file (" + human_size(st.st_size) + "): " + shown(abs) + "; file_read shows text files only");

  const long long last = offset + limit - 1;
  std::string out, line;
  std::size_t line_len = 0;
  long long number = 1, shown_to = 0;
  bool capped = false;
  auto finish = [&]() {
    if (number >= offset && number <= last && !capped) {
      const std::size_t before = out.size();
      append_line(out, static_cast<std::size_t>(number), line, line_len);
      if (out.size() > max_output) out.resize(before), capped = true;
      else shown_to = number;
    }
    line.clear();
    line_len = 0;
    number++;
  };
  bool partial = false;
  while (got > 0) {
    const char* p = buf.data();
    const char* end = p + got;
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
      const char* seg_end = nl ? nl : end;
      if (number >= offset && number <= last && !capped) {
        const std::size_t n = static_cast<std::size_t>(seg_end - p);
        if (line.size() < max_line + 4) line.append(p, std::min(n, max_line + 4 - line.size()));
        line_len += n;
      }
      if (!nl) {
        partial = true;
        break;
      }
      partial = false;
      finish();
      p = nl + 1;
    }
    got = fill();
  }
  if (partial) finish();
  const long long total = number - 1;
  if (offset > total)
    throw tool::Error("offset " + std::to_string(offset) + " is past the end of " + shown(abs) + " (" +
                      std::to_string(total) + " lines)");
  if (capped)
    out += "[output limit of " + human_size(max_output) + " reached: lines " + std::to_string(offset) + "-" +
           std::to_string(shown_to) + " of " + std::to_string(total) + " shown; continue with offset=" +
           std::to_string(shown_to + 1) + "]\n";
  else if (shown_to < total)
    out += "[lines " + std::to_string(offset) + "-" + std::to_string(shown_to) + " of " + std::to_string(total) + "; " +
           std::to_string(total - shown_to) + (total - shown_to == 1 ? " more line" : " more lines") + ": continue with offset=" + std::to_string(shown_to + 1) + "]\n";
  return out;
}

}  // namespace

int main() { return tool::run(call); }
