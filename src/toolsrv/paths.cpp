#include "toolsrv/paths.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

namespace toolsrv {
namespace {

// realpath(3) of an existing path. realpath reads every component as a link, a system call each
// (two dozen for the paths of one sandboxed call, a fifth of toolsrv's time preparing it); the
// kernel resolves the whole path in one open, and /proc/self/fd names what it opened. realpath
// itself answers when that name is not a plain path (no /proc, a path outside our root).
std::optional<std::string> real_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char link[32], buf[PATH_MAX];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, buf, sizeof buf);
  ::close(fd);
  const std::string_view name(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  if (n > 0 && n < static_cast<ssize_t>(sizeof buf) && name.front() == '/' && !name.ends_with(" (deleted)"))
    return std::string(name);
  std::unique_ptr<char, decltype(&std::free)> real(realpath(path.c_str(), nullptr), &std::free);
  if (!real) return std::nullopt;
  return std::string(real.get());
}

}  // namespace

std::string clean_path(std::string_view path) {
  const bool rooted = !path.empty() && path.front() == '/';
  std::vector<std::string_view> parts;
  std::size_t i = 0;
  while (i < path.size()) {
    std::size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view part = path.substr(i, j - i);
    i = j + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!rooted) {
        parts.push_back(part);
      }
      continue;
    }
    parts.push_back(part);
  }
  std::string out = rooted ? "/" : "";
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (k > 0) out += '/';
    out += parts[k];
  }
  return out.empty() ? "." : out;
}

std::string absolute_path(std::string_view path, std::string_view base) {
  if (!path.empty() && path.front() == '/') return clean_path(path);
  std::string joined(base);
  joined += '/';
  joined += path;
  return clean_path(joined);
}

std::string resolve_existing(std::string_view path) {
  std::string prefix(path);
  std::string rest;
  while (true) {
    if (auto real = real_path(prefix)) return rest.empty() ? *real : clean_path(*real + "/" + rest);
    if (prefix == "/" || prefix.empty()) return clean_path(path);
    const auto slash = prefix.rfind('/');
    std::string last = prefix.substr(slash + 1);
    rest = rest.empty() ? last : last + "/" + rest;
    prefix = slash == 0 ? "/" : prefix.substr(0, slash);
  }
}

bool is_within(std::string_view path, std::string_view dir) {
  if (dir == "/") return !path.empty() && path.front() == '/';
  if (path.size() < dir.size() || path.substr(0, dir.size()) != dir) return false;
  return path.size() == dir.size() || path[dir.size()] == '/';
}

}  // namespace toolsrv
