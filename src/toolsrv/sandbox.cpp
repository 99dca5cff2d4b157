#include "toolsrv/sandbox.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "lib9p/dirs.hpp"
#include "toolsrv/elf.hpp"
#include "toolsrv/paths.hpp"

namespace toolsrv {

TemplateVars TemplateVars::for_call(const std::string& cwd, const std::string& tmpdir, const std::string& config_root,
                                    const std::string& data_root, const std::string& bin_path) {
  TemplateVars t;
  const auto env = p9::process_env();
  t.vars = {
      {"CWD", cwd},
      {"HOME", p9::home_dir(env)},
      {"TMPDIR", tmpdir},
      {"XDG_CONFIG_HOME", p9::config_home(env)},
      {"XDG_DATA_HOME", p9::data_home(env)},
      {"XDG_CACHE_HOME", p9::cache_home(env)},
      {"XDG_STATE_HOME", p9::state_home(env)},
      {"XDG_RUNTIME_DIR", p9::runtime_home(env)},
      {"OLLIE_CFG_PATH", config_root},
      {"OLLIE_DATA_PATH", data_root},
      {"OLLIE_BIN_PATH", bin_path},
  };
  return t;
}

std::string TemplateVars::expand(std::string_view text) const {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const auto open = text.find('{', i);
    if (open == std::string_view::npos) break;
    const auto close = text.find('}', open + 1);
    if (close == std::string_view::npos) break;
    out.append(text.substr(i, open - i));
    const std::string name(text.substr(open + 1, close - open - 1));
    if (const auto it = vars.find(name); it != vars.end()) {
      out += it->second;
    } else if (const char* v = name.empty() ? nullptr : std::getenv(name.c_str())) {
      out += v;
    } else {
      out.append(text.substr(open, close - open + 1));
    }
    i = close + 1;
  }
  out.append(text.substr(std::min(i, text.size())));
  return out;
}

namespace {

// A tool that is a link in a tool directory (`ln -s ~/src/x/x tools/`) runs the file it names.
// The hostowner's link grants that one file; one in a directory the model can write (a tool
// directory inside the session cwd) grants nothing, or a planted link would open any file.
bool trusted_link(const std::string& exe, const std::vector<std::string>& writable) {
  struct stat st {};
  if (::lstat(exe.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return false;
  return !inside_writable(exe.substr(0, exe.rfind('/')), writable);
}

// Makes the missing directories of `path` (absolute) one at a time, each in the one before it,
// following no link: a link a background process puts in the way meanwhile stops it, rather than
// having toolsrv make directories wherever it points.
bool make_dirs_following_no_link(const std::string& path) {
  std::string have = path;
  std::vector<std::string> missing;  // the names to make, the first one last
  UniqueFd dir;
  while (!(dir = open_following_no_link(have, O_DIRECTORY))) {
    const auto slash = have.rfind('/');
    if (errno != ENOENT || slash == std::string::npos || have == "/") return false;
    missing.push_back(have.substr(slash + 1));
    have = slash == 0 ? "/" : have.substr(0, slash);
  }
  for (auto name = missing.rbegin(); name != missing.rend(); ++name) {
    if (::mkdirat(dir.get(), name->c_str(), 0700) != 0 && errno != EEXIST) return false;
    UniqueFd next(::openat(dir.get(), name->c_str(), O_PATH | O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW));
    if (!next) return false;
    dir = std::move(next);
  }
  return true;
}

enum class Reach { ok, missing, placed };

// A descriptor on what `path` names, reached with no link the model could have placed: one walk
// of the kernel that follows no link when there is none on the way; else where the links lead
// (resolve_unplaced: none of them in a writable directory), walked again without following any,
// so a directory swapped for a link meanwhile fails the walk rather than redirects it. A rule
// built from the descriptor grants what was checked (`ln -s / .local/share/ollie/optmem` planted
// by a background process between a check and a later open by name granted `/`).
Reach reach(const std::string& path, const std::vector<std::string>& writable, UniqueFd& out) {
  out = open_following_no_link(path);
  if (out) return Reach::ok;
  if (errno != ELOOP) return Reach::missing;  // the walk stopped at a name that is not there, before any link
  const auto to = resolve_unplaced(path, writable);
  if (!to) return Reach::placed;
  out = open_following_no_link(*to);
  if (out) return Reach::ok;
  return errno == ELOOP ? Reach::placed : Reach::missing;
}

}  // namespace

SandboxPlan plan_sandbox(const Policy& policy, const TemplateVars& vars, const std::vector<std::string>& writable,
                         const std::vector<std::string>& tool_dirs, const std::string& data_root,
                         const std::string& exe, const std::string& ollie_socket) {
  SandboxPlan plan;
  plan.network = policy.network;
  plan.best_effort = policy.best_effort;
  const auto held_cwd = vars.expand("{CWD}");  // granted through the held descriptor
  auto add = [&](const std::string& templ, Access access) {
    const auto expanded = vars.expand(templ);
    if (expanded.empty() || expanded.front() != '/') {
      plan.skipped.push_back(templ + ": not absolute (" + expanded + ")");
      return;
    }
    const auto path = clean_path(expanded);
    struct stat st {};
    if (vars.cwd_fd >= 0 && path == held_cwd) {
      if (::fstat(vars.cwd_fd, &st) != 0) {
        plan.skipped.push_back(path + ": does not exist");
        return;
      }
      plan.rules.push_back({path, access, st.st_dev, st.st_ino, vars.cwd_fd});
      return;
    }
    UniqueFd fd;
    auto reached = reach(path, writable, fd);
    if (reached == Reach::missing && (access == Access::rw || access == Access::rwx) && !data_root.empty() &&
        is_within(path, clean_path(data_root))) {
      if (make_dirs_following_no_link(path)) {
        reached = reach(path, writable, fd);
        // Made private through the descriptor, not the path: what was checked is what changes.
        if (reached == Reach::ok && ::chmod(("/proc/self/fd/" + std::to_string(fd.get())).c_str(), 0700) != 0)
          reached = Reach::missing;
      }
    }
    if (reached == Reach::placed) {
      plan.skipped.push_back(path + ": a link the sandbox can write is on the way");
      plan.redirectable.push_back(path);
      return;
    }
    if (reached == Reach::missing || ::fstat(fd.get(), &st) != 0) {
      plan.skipped.push_back(path + ": does not exist");
      return;
    }
    plan.rules.push_back({path, access, st.st_dev, st.st_ino, fd.get()});
    plan.held.push_back(std::move(fd));
  };
  for (const auto& p : policy.ro) add(p, Access::ro);
  for (const auto& p : policy.rox) add(p, Access::rox);
  for (const auto& p : policy.rw) add(p, Access::rw);
  for (const auto& p : policy.rwx) add(p, Access::rwx);
  for (const auto& d : tool_dirs) add(d, Access::rox);
  if (!exe.empty() && (policy.add_exec || trusted_link(exe, writable))) add(exe, Access::rox);
  // Sockets (and directories of them) may appear after the call started: a missing one is kept
  // for the check at connect time and is not logged as skipped.
  auto add_socket = [&](const std::string& templ) {
    const auto expanded = vars.expand(templ);
    if (expanded.empty() || expanded.front() != '/') {
      plan.skipped.push_back(templ + ": not absolute (" + expanded + ")");
      return;
    }
    const auto written = clean_path(expanded);
    // As the file lists: a link the model can write on the way would let it choose the socket.
    if (UniqueFd unused; reach(written, writable, unused) == Reach::placed) {
      plan.skipped.push_back(written + ": a link the sandbox can write is on the way");
      return;
    }
    const auto path = unix_entry_path(written);  // where it leads now: the guard holds the call to it
    if (std::find(plan.unix_sockets.begin(), plan.unix_sockets.end(), path) != plan.unix_sockets.end()) return;
    plan.unix_sockets.push_back(path);
    if (const auto st = unix_entry(path)) plan.rules.push_back({path, Access::sock, st->st_dev, st->st_ino});
  };
  if (!ollie_socket.empty()) add_socket(ollie_socket);
  for (const auto& p : policy.unix_sockets) add_socket(p);
  plan.unix_listed = !policy.unix_sockets.empty();
  if (policy.ldd && !exe.empty()) {
    for (const auto& lib : linked_libraries(exe, writable)) {
      UniqueFd fd;
      struct stat st {};
      if (reach(lib, writable, fd) != Reach::ok || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      plan.rules.push_back({lib, Access::rox, st.st_dev, st.st_ino, fd.get()});
      plan.held.push_back(std::move(fd));
    }
  }
  return plan;
}

std::vector<std::string> writable_paths(const Policy& policy, const TemplateVars& vars) {
  std::vector<std::string> out;
  for (const auto* list : {&policy.rw, &policy.rwx}) {
    for (const auto& templ : *list) {
      const auto expanded = vars.expand(templ);
      if (expanded.empty() || expanded.front() != '/') continue;
      out.push_back(resolve_existing(clean_path(expanded)));
    }
  }
  return out;
}

bool model_placed(const std::string& path, const std::vector<std::string>& writable) {
  const auto in_writable = [&](const std::string& p) {
    return std::any_of(writable.begin(), writable.end(), [&](const std::string& w) { return is_within(p, w); });
  };
  const auto written = clean_path(path);
  if (written.empty() || written.front() != '/' || in_writable(written)) return true;
  const auto to = resolve_unplaced(written, writable);
  return !to || in_writable(*to);
}

std::optional<std::string> resolve_unplaced(const std::string& path, const std::vector<std::string>& writable) {
  const auto in_writable = [&](const std::string& p) {
    return std::any_of(writable.begin(), writable.end(), [&](const std::string& w) { return is_within(p, w); });
  };
  // Walked as the kernel walks it: `done` holds no link; a link's target is walked next.
  std::string done = "/";
  std::vector<std::string> rest;  // the names still to walk, the next one last
  const auto push = [&rest](std::string_view p) {
    std::vector<std::string> names;
    for (std::size_t at = 0; at < p.size();) {
      const auto slash = p.find('/', at);
      const auto end = slash == std::string_view::npos ? p.size() : slash;
      if (end > at) names.emplace_back(p.substr(at, end - at));
      at = end + 1;
    }
    rest.insert(rest.end(), names.rbegin(), names.rend());
  };
  push(path);
  for (int links = 0; !rest.empty();) {
    const std::string name = std::move(rest.back());
    rest.pop_back();
    if (name == ".") continue;
    if (name == "..") {
      done = done == "/" ? done : done.substr(0, std::max<std::size_t>(done.rfind('/'), 1));
      continue;
    }
    const std::string next = done == "/" ? "/" + name : done + "/" + name;
    struct stat st {};
    if (::lstat(next.c_str(), &st) != 0) {  // nothing further exists: where it would be counts
      done = next;
      for (; !rest.empty(); rest.pop_back()) done += "/" + rest.back();
      break;
    }
    if (!S_ISLNK(st.st_mode)) {
      done = next;
      continue;
    }
    if (in_writable(done) || ++links > 40) return std::nullopt;
    char target[4096];
    const auto n = ::readlink(next.c_str(), target, sizeof target);
    if (n <= 0 || static_cast<std::size_t>(n) >= sizeof target) return std::nullopt;
    const std::string_view t(target, static_cast<std::size_t>(n));
    if (t.front() == '/') done = "/";
    push(t);
  }
  return clean_path(done);
}

bool inside_writable(const std::string& path, const std::vector<std::string>& writable) {
  const auto resolved = resolve_existing(clean_path(path));
  for (const auto& w : writable) {
    if (is_within(resolved, w)) return true;
  }
  return false;
}

}  // namespace toolsrv
