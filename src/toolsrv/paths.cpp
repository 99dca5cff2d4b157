#include "toolsrv/paths.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "toolsrv/fd.hpp"

namespace toolsrv {

namespace {

// No empty, `.` or `..` component and no trailing slash: most paths a call meets (every policy
// path, each time) are already clean, and cleaning them allocates.
bool is_clean(std::string_view path) {
  if (path.empty() || (path.size() > 1 && path.back() == '/')) return false;
  for (std::size_t i = 0; i < path.size();) {
    std::size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    const auto part = path.substr(i, j - i);
    if ((part.empty() && i != 0) || part == "." || part == "..") return false;
    i = j + 1;
  }
  return true;
}

}  // namespace

std::string clean_path(std::string_view path) {
  if (is_clean(path)) return std::string(path);
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

namespace {

// The real path of `path` when it exists. One walk by the kernel: an absolute path with no
// symlink on it is its own real path once cleaned; one with a symlink is named by the descriptor
// the walk ends at. realpath(3) instead reads every component as a link, a walk from / for each.
std::optional<std::string> real_path(const std::string& path) {
  if (path.starts_with('/')) {
    if (no_link_on(path)) return clean_path(path);
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;  // the walk's own answer
  }
  if (UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC)); fd) {
    if (auto named = fd_path(fd.get()); !named.empty() && named.front() == '/' && !named.ends_with(" (deleted)")) return named;
  }
  std::unique_ptr<char, decltype(&std::free)> real(realpath(path.c_str(), nullptr), &std::free);
  if (!real) return std::nullopt;
  return std::string(real.get());
}

std::string resolve(std::string_view path, int links_left) {
  std::string prefix(path);
  std::string rest;
  while (true) {
    if (auto real = real_path(prefix)) {
      if (!rest.empty()) return clean_path(*real + "/" + rest);
      return *real;
    }
    if (prefix == "/" || prefix.empty()) return clean_path(path);
    char target[PATH_MAX];
    const auto n = links_left > 0 ? ::readlink(prefix.c_str(), target, sizeof target) : -1;
    if (n > 0 && static_cast<std::size_t>(n) < sizeof target) {  // a dangling symlink (its parent exists)
      std::string to(target, static_cast<std::size_t>(n));
      if (to.front() != '/') to = prefix.substr(0, prefix.rfind('/') + 1) + to;
      return resolve(rest.empty() ? to : to + "/" + rest, links_left - 1);
    }
    const auto slash = prefix.rfind('/');
    std::string last = prefix.substr(slash + 1);
    rest = rest.empty() ? last : last + "/" + rest;
    prefix = slash == 0 ? "/" : prefix.substr(0, slash);
  }
}

}  // namespace

std::string resolve_existing(std::string_view path) { return resolve(path, 0); }

bool no_link_on(const std::string& path) { return static_cast<bool>(open_following_no_link(path)); }

UniqueFd open_following_no_link(const std::string& path, int flags) {
  open_how how{.flags = static_cast<std::uint64_t>(O_PATH | O_CLOEXEC | flags), .mode = 0, .resolve = RESOLVE_NO_SYMLINKS};
  return UniqueFd(static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how)));
}

std::string resolve_write_target(std::string_view path) { return resolve(path, 40); }

std::string fd_path(int fd) {
  char buf[4096];
  const auto n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf, sizeof buf);
  return n > 0 && static_cast<std::size_t>(n) < sizeof buf ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::string unix_entry_path(std::string_view allowed) {
  const auto slash = allowed.rfind('/');
  if (slash == std::string_view::npos) return {};
  const std::string parent = resolve_existing(slash == 0 ? std::string_view("/") : allowed.substr(0, slash));
  const std::string_view name = allowed.substr(slash + 1);
  return name.empty() ? parent : parent == "/" ? "/" + std::string(name) : parent + "/" + std::string(name);
}

std::optional<struct stat> unix_entry(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::lstat(path.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) return std::nullopt;
  return st;
}

bool is_within(std::string_view path, std::string_view dir) {
  if (dir == "/") return !path.empty() && path.front() == '/';
  if (path.size() < dir.size() || path.substr(0, dir.size()) != dir) return false;
  return path.size() == dir.size() || path[dir.size()] == '/';
}

}  // namespace toolsrv
