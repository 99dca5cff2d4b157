#include "dirs.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace p9 {
namespace {

// A directory variable (an XDG base directory, HOME): an absolute path, or none. A relative one is
// ignored, as the XDG Base Directory spec says: it would be taken against whatever cwd reads it (a
// session's, where the model writes, so a tool directory there could hold a planted `shell`).
std::optional<std::string> absolute_var(const Env& env, std::string_view name) {
  auto v = env(name);
  if (v && (v->empty() || v->front() != '/')) return std::nullopt;
  return v;
}

std::string absolute_var_or(const Env& env, std::string_view name, const std::string& fallback) {
  auto v = absolute_var(env, name);
  return v ? *v : fallback;
}

std::string var_or(const Env& env, std::string_view name, const std::string& fallback) {
  auto v = env(name);
  return v ? *v : fallback;
}

std::string uid_text() { return std::to_string(::getuid()); }

std::string octal(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

bool is_within(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

}  // namespace

Env process_env() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (!v || !*v) return std::nullopt;
    return std::string(v);
  };
}

std::string login_name() {
  if (passwd* pw = ::getpwuid(::getuid())) return pw->pw_name;
  return uid_text();
}

std::string home_dir(const Env& env) {
  if (auto h = absolute_var(env, "HOME")) return *h;
  if (passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir && *pw->pw_dir) return pw->pw_dir;
  return "/";
}

std::string expand_home(const std::string& path, const Env& env) {
  if (path == "~" || path.rfind("~/", 0) == 0) return home_dir(env) + path.substr(1);
  return path;
}

std::string config_home(const Env& env) { return absolute_var_or(env, "XDG_CONFIG_HOME", home_dir(env) + "/.config"); }
std::string data_home(const Env& env) { return absolute_var_or(env, "XDG_DATA_HOME", home_dir(env) + "/.local/share"); }
std::string cache_home(const Env& env) { return absolute_var_or(env, "XDG_CACHE_HOME", home_dir(env) + "/.cache"); }
std::string state_home(const Env& env) {
  return absolute_var_or(env, "XDG_STATE_HOME", home_dir(env) + "/.local/state");
}
std::string runtime_home(const Env& env) { return absolute_var_or(env, "XDG_RUNTIME_DIR", "/run/user/" + uid_text()); }

std::string config_root(const Env& env) { return config_home(env) + "/ollie"; }
std::string data_root(const Env& env) { return data_home(env) + "/ollie"; }

std::string runtime_root(const Env& env) {
  if (auto r = absolute_var(env, "XDG_RUNTIME_DIR")) return *r + "/ollie";
  return "/tmp/ollie-" + uid_text();
}

std::string namespace_dir(const Env& env) {
  if (auto ns = env("NAMESPACE")) return *ns;
  std::string disp = var_or(env, "DISPLAY", ":0");
  if (disp.size() > 2 && disp.ends_with(".0")) disp.resize(disp.size() - 2);
  for (char& c : disp)
    if (c == '/') c = '_';
  return "/tmp/ns." + login_name() + "." + disp;
}

std::string socket_dir(const std::string& socket_path) {
  const auto slash = socket_path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : socket_path.substr(0, slash);
}

Status check_private_dir(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return error(dir + ": " + std::strerror(errno));
  if (S_ISLNK(st.st_mode)) return error(dir + ": a symbolic link, not a private directory: remove it");
  if (!S_ISDIR(st.st_mode)) return error(dir + ": not a directory: remove it");
  // A sticky directory (/tmp) is everyone's: the fix is a directory of one's own, never a chmod.
  if (st.st_mode & S_ISVTX)
    return error(dir + ": mode " + octal(st.st_mode) + ", a shared directory: use a directory of your own (mode 0700)");
  if (st.st_uid != ::getuid())
    return error(dir + ": owned by uid " + std::to_string(st.st_uid) + ", not " + uid_text() +
                 ": another user made it; have it removed, or use a directory of your own");
  if ((st.st_mode & 07777) != 0700)
    return error(dir + ": mode " + octal(st.st_mode) + ", not 0700: chmod 700 " + dir);
  return {};
}

Status ensure_private_dir(const std::string& dir) {
  const auto parent = std::filesystem::path(dir).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return error(dir + ": " + std::strerror(errno));
  return check_private_dir(dir);
}

Status ensure_runtime_dir(const std::string& dir, const Env& env) {
  if (!absolute_var(env, "XDG_RUNTIME_DIR")) {
    const auto root = runtime_root(env);
    if (is_within(dir, root))
      if (auto st = ensure_private_dir(root); !st) return st;
  }
  return ensure_private_dir(dir);
}

}  // namespace p9
