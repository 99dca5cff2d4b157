#include "olliesrv/profile.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "backend/config.hpp"
#include "backend/json.hpp"
#include "olliesrv/settings.hpp"
#include "olliesrv/sysprompt.hpp"
#include "toolsrv/meta.hpp"

extern char** environ;

namespace ollie {

p9::Error bad_profile(const std::string& name, const std::string& what) {
  return p9::error("agent profile " + name + ": " + what);
}

namespace {

using nlohmann::json;

constexpr std::size_t kMaxProfileBytes = 1 << 20;
constexpr std::size_t kMaxPromptFileBytes = 1 << 20;
/// The text of one agent's entries, all together: a 1 MiB profile can name one 1 MiB file a
/// quarter of a million times.
constexpr std::size_t kMaxResolvedBytes = 4 << 20;
/// Warnings of one resolution (each becomes an info block), then one saying how many more.
constexpr std::size_t kMaxWarnings = 16;


/// nlohmann's message without its "[json.exception.parse_error.101] " and without the bytes it
/// last read (agent/new agent=<p> reaches agents/<p>.json, which may be a link to any file).
std::string json_message(const std::exception& e) { return toolsrv::parse_error_text(e.what()); }


/// A string field; null and absent leave `out` unchanged.
bool get_string(const json& j, const char* field, std::string& out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  out = it->get<std::string>();
  return true;
}

bool get_strings(const json& j, const char* field, std::vector<std::string>& out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_array()) return false;
  for (const auto& e : *it)
    if (!e.is_string()) return false;
  for (const auto& e : *it) out.push_back(e.get<std::string>());
  return true;
}

/// A generation parameter from the profile, type-checked, then validated as a cfg value.
p9::Result<std::string> profile_param(const std::string& key, const json& v) {
  std::string cfg_value;
  const char* want = nullptr;
  if (key == "maxTokens" || key == "maxCompletionTokens" || key == "reasoning" || key == "topK") {
    if (!v.is_number_integer()) want = "an integer";
    else cfg_value = v.dump();
  } else if (key == "includeReasoning") {
    if (!v.is_boolean()) want = "a boolean";
    else cfg_value = v.dump();
  } else if (key == "reasoningEffort" || key == "responseFormat" || key == "verbosity") {
    if (!v.is_string()) want = "a string";
    else cfg_value = v.get<std::string>();
  } else if (key == "stop") {
    if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); }))
      want = "an array of strings";
    else cfg_value = v.dump();
  } else {
    if (!v.is_number()) want = "a number";
    else cfg_value = v.dump();
  }
  if (want) return p9::error(key + " must be " + want);
  return parse_param(key, cfg_value);
}

}  // namespace

bool valid_profile_name(const std::string& n) {
  if (n.empty() || n.size() > 255 || n[0] == '.') return false;
  for (unsigned char c : n)
    if (c == '/' || c < 0x20 || c == 0x7f) return false;
  return true;
}

p9::Result<Profile> load_profile(const std::string& config_root, const std::string& name) {
  if (!valid_profile_name(name)) return p9::error("unknown agent profile: " + name);
  Profile p;
  p.name = name;
  std::string text, err;
  switch (backend::read_config_file(config_root + "/agents/" + name + ".json", kMaxProfileBytes, text, err)) {
    case backend::ReadStatus::ok: break;
    case backend::ReadStatus::missing:
      if (name == "default") return p;
      return p9::error("unknown agent profile: " + name);
    case backend::ReadStatus::too_large: return bad_profile(name, "file larger than 1 MiB");
    case backend::ReadStatus::failed: return bad_profile(name, err);
  }
  if (backend::too_deep(text)) return bad_profile(name, "nested deeper than 128 levels");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return bad_profile(name, json_message(e));
  }
  if (!j.is_object()) return bad_profile(name, "not a JSON object");

  if (!get_strings(j, "prompt", p.prompt)) return bad_profile(name, "prompt must be an array of strings");
  if (!get_strings(j, "userPrompts", p.user_prompts)) return bad_profile(name, "userPrompts must be an array of strings");
  if (!get_strings(j, "autoLoad", p.auto_load)) return bad_profile(name, "autoLoad must be an array of strings");
  if (!get_string(j, "systemPrompt", p.system_prompt)) return bad_profile(name, "systemPrompt must be a string");
  if (!get_string(j, "backend", p.backend)) return bad_profile(name, "backend must be a string");
  if (!get_string(j, "model", p.model)) return bad_profile(name, "model must be a string");
  if (auto st = check_model(p.model); !st) return bad_profile(name, st.ename());

  if (auto it = j.find("compactAt"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || *it < 1 || *it > 100) return bad_profile(name, "compactAt must be an integer from 1 to 100");
    p.compact_at = it->get<int>();
  }

  static const std::set<std::string> structural{"prompt", "userPrompts", "autoLoad", "systemPrompt", "backend", "model", "compactAt"};
  const auto& keys = param_keys();
  json params = json::object();
  for (const auto& [field, value] : j.items()) {
    if (structural.count(field)) continue;
    if (std::find(keys.begin(), keys.end(), field) == keys.end()) {
      p.warnings.push_back("agent profile " + name + ": unknown field " + field);
      continue;
    }
    // null, and "" for the string parameters, mean "provider default", like an absent field.
    if (value.is_null() || (value.is_string() && value.get_ref<const std::string&>().empty())) continue;
    auto v = profile_param(field, value);
    if (!v) return bad_profile(name, v.ename());
    params[field] = json::parse(*v);
  }
  p.params = params.dump();
  for (const auto& w : p.warnings) spdlog::warn("{}", w);
  return p;
}

std::string checked_params(const std::string& params, const std::function<void(const std::string&)>& dropped) {
  const json j = json::parse(params, nullptr, false);
  json out = json::object();
  if (!j.is_object()) {
    if (!params.empty() && params != "{}") dropped("params are not a JSON object");
    return out.dump();
  }
  const auto& keys = param_keys();
  for (const auto& [key, value] : j.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      dropped("unknown key " + key);
      continue;
    }
    if (auto v = profile_param(key, value)) out[key] = json::parse(*v);
    else dropped(v.ename());
  }
  return out.dump();
}

std::vector<std::string> profile_names(const std::string& config_root) {
  std::vector<std::string> names;
  const std::string dir = config_root + "/agents";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() <= 5 || n.compare(n.size() - 5, 5, ".json") != 0) continue;
    n.resize(n.size() - 5);
    if (!valid_profile_name(n)) continue;
    struct stat st {};
    if (::stat((dir + "/" + e->d_name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    names.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// ---- prompt entries (§7.5.1) ----

namespace {

bool var_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool var_char(char c) { return var_start(c) || (c >= '0' && c <= '9'); }

std::string lookup(const std::string& var, const PromptContext& ctx) {
  if (var == "OLLIE_SESSION_ID") return ctx.session_id;
  if (var == "OLLIE_AGENT_ID") return ctx.agent_id;
  if (ctx.secrets.contains(var)) return "";  // a system prompt is served and sent to the model
  return ctx.env ? ctx.env(var).value_or("") : "";
}

/// $VAR and ${VAR}; an unset variable expands to nothing; a `$` not followed by a name stays.
std::string expand_vars(const std::string& s, const PromptContext& ctx) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] != '$' || i + 1 == s.size()) {
      out += s[i++];
      continue;
    }
    if (s[i + 1] == '{') {
      const auto close = s.find('}', i + 2);
      const std::string var = close == std::string::npos ? "" : s.substr(i + 2, close - i - 2);
      if (!var.empty() && var_start(var[0]) && std::all_of(var.begin(), var.end(), var_char)) {
        out += lookup(var, ctx);
        i = close + 1;
      } else {
        out += s[i++];
      }
      continue;
    }
    if (!var_start(s[i + 1])) {
      out += s[i++];
      continue;
    }
    std::size_t j = i + 1;
    while (j < s.size() && var_char(s[j])) j++;
    out += lookup(s.substr(i + 1, j - i - 1), ctx);
    i = j;
  }
  return out;
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return !p.empty() && ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

struct CommandResult {
  std::string out;
  std::string failure;  ///< "" = success
  bool ended = false;   ///< killed by olliesrv's stop or the asker's cancel: no further entry runs
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

/// Runs `/bin/sh -c cmd` in its own process group; kills the group on timeout, overflow, stop or
/// cancel.
CommandResult run_command(const std::string& cmd, const PromptContext& ctx, std::chrono::milliseconds timeout,
                          std::size_t cap) {
  CommandResult r;
  // Everything the child needs is built before the spawn (olliesrv is multi-threaded).
  std::vector<std::string> env_strings;
  // Without the backend secrets: a command that reads the project (whose files the model
  // writes) must not find them to pass on.
  for (char** e = environ; e && *e; e++) {
    const std::string_view v(*e);
    const auto name = v.substr(0, v.find('='));
    if (name == "OLLIE_SESSION_ID" || name == "OLLIE_AGENT_ID" || ctx.secrets.contains(std::string(name))) continue;
    env_strings.emplace_back(v);
  }
  env_strings.push_back("OLLIE_SESSION_ID=" + ctx.session_id);
  env_strings.push_back("OLLIE_AGENT_ID=" + ctx.agent_id);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c", command = cmd;
  char* argv[] = {sh.data(), dash_c.data(), command.data(), nullptr};
  const std::string dir = is_dir(ctx.cwd) ? ctx.cwd : p9::home_dir(ctx.env ? ctx.env : p9::process_env());

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    r.failure = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close_fd(pipefd[1]);
  int out = pipefd[0];
  if (rc != 0) {
    close_fd(out);
    r.failure = std::string("cannot run /bin/sh: ") + std::strerror(rc);
    return r;
  }
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool exited = false;
  while (out >= 0 || !exited) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.failure = fmt::format("timed out after {:g}s", static_cast<double>(timeout.count()) / 1000.0);
      break;
    }
    pollfd fds[4];
    nfds_t n = 0;
    if (out >= 0) fds[n++] = {out, POLLIN, 0};
    if (!exited && pidfd >= 0) fds[n++] = {pidfd, POLLIN, 0};
    if (ctx.stop_fd >= 0) fds[n++] = {ctx.stop_fd, POLLIN, 0};
    if (ctx.cancel_fd >= 0) fds[n++] = {ctx.cancel_fd, POLLIN, 0};
    // Without a pidfd, the exit is seen by polling waitpid every 10 ms once stdout is closed.
    const int wait_ms = (pidfd < 0 && out < 0) ? 10 : static_cast<int>(std::min<long>(left.count(), 60'000));
    const int pr = n ? ::poll(fds, n, wait_ms) : (::usleep(10'000), 0);
    if (pr < 0 && errno != EINTR) {
      r.failure = std::string("poll: ") + std::strerror(errno);
      break;
    }
    for (nfds_t i = 0; pr > 0 && i < n; i++) {
      if (!fds[i].revents) continue;
      if (fds[i].fd == ctx.stop_fd || fds[i].fd == ctx.cancel_fd) {
        r.failure = fds[i].fd == ctx.stop_fd ? "olliesrv is stopping" : "interrupted";
        r.ended = true;
      } else if (fds[i].fd == out) {
        char buf[16384];
        const ssize_t got = ::read(out, buf, sizeof buf);
        if (got > 0) {
          r.out.append(buf, static_cast<std::size_t>(got));
          if (r.out.size() > cap) r.failure = "output larger than " + std::to_string(cap / 1024) + " KiB";
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
          close_fd(out);
        }
      } else {
        exited = true;  // the pidfd is readable: the child is a zombie, its group id still reserved
      }
    }
    if (!r.failure.empty()) break;
    if (exited && out >= 0) {
      // The command has ended; a background child may keep stdout open: take what is there.
      pollfd p{out, POLLIN, 0};
      while (r.out.size() <= cap && ::poll(&p, 1, 0) > 0) {
        char buf[16384];
        const ssize_t got = ::read(out, buf, sizeof buf);
        if (got <= 0) break;
        r.out.append(buf, static_cast<std::size_t>(got));
      }
      if (r.out.size() > cap) r.failure = "output larger than " + std::to_string(cap / 1024) + " KiB";
      close_fd(out);
      break;
    }
    if (pidfd < 0 && out < 0) {
      // No pidfd (old kernel): poll waitpid without reaping.
      siginfo_t si{};
      if (::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
        exited = true;
    }
  }
  // The leader is not reaped yet, so the group id cannot have been reused: kill what is left of
  // the group (after a timeout, or background children of a finished command).
  ::kill(-pid, SIGKILL);
  close_fd(out);
  if (pidfd >= 0) ::close(pidfd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (r.failure.empty()) {
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) r.failure = "exit status " + std::to_string(WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) r.failure = std::string("killed by signal ") + std::to_string(WTERMSIG(status));
  }
  r.out = trim_trailing_newlines(std::move(r.out));
  return r;
}

/// An expanded file entry `e` (written `entry`): `~` expanded, relative under <config root>/prompts/.
bool read_prompt_file(const std::string& entry, const std::string& e, const PromptContext& ctx, std::string& text,
                      std::vector<std::string>& warnings) {
  std::string path = e;
  if (path.empty()) {  // e.g. an entry that is only an unset variable
    warnings.push_back("prompt entry not found: " + entry);
    return false;
  }
  path = p9::expand_home(path, ctx.env ? ctx.env : p9::process_env());
  if (path[0] != '/') path = ctx.config_root + "/prompts/" + path;
  std::string err;
  switch (backend::read_config_file(path, kMaxPromptFileBytes, text, err)) {
    case backend::ReadStatus::ok: text = trim_trailing_newlines(std::move(text)); return true;
    case backend::ReadStatus::missing: warnings.push_back("prompt entry not found: " + entry); break;
    case backend::ReadStatus::too_large: warnings.push_back("prompt entry " + entry + ": file larger than 1 MiB"); break;
    case backend::ReadStatus::failed: warnings.push_back("prompt entry " + entry + ": " + err); break;
  }
  return false;
}

}  // namespace

ResolvedText resolve_system_prompt(const std::string& system_prompt, const PromptContext& ctx) {
  ResolvedText rt;
  if (!system_prompt.empty() && read_prompt_file(system_prompt, expand_vars(system_prompt, ctx), ctx, rt.text, rt.warnings))
    return rt;
  rt.text = default_system_prompt();
  return rt;
}

bool runs_commands(const std::vector<std::string>& entries, const PromptContext& ctx) {
  return std::any_of(entries.begin(), entries.end(), [&](const std::string& e) {
    const auto x = expand_vars(e, ctx);
    return !x.empty() && x[0] == '!';
  });
}

namespace detail {

ResolvedText resolve_entries(const std::vector<std::string>& entries, const PromptContext& ctx,
                             std::chrono::milliseconds command_timeout, std::size_t output_cap) {
  ResolvedText rt;
  auto add = [&](std::string text) {
    if (text.empty()) return;
    if (!rt.text.empty()) rt.text += "\n\n";
    rt.text += text;
  };
  for (const auto& entry : entries) {
    if (rt.text.size() > kMaxResolvedBytes) {
      rt.warnings.push_back("prompt entries past " + std::to_string(kMaxResolvedBytes >> 20) +
                            " MiB of text left out, from " + entry);
      break;
    }
    const std::string e = expand_vars(entry, ctx);
    if (!e.empty() && e[0] == '!') {
      auto r = run_command(e.substr(1), ctx, command_timeout, output_cap);
      if (r.ended) {
        rt.ended = true;
        break;
      }
      if (!r.failure.empty()) {
        rt.warnings.push_back("prompt entry failed: " + entry + ": " + r.failure);
        continue;
      }
      add(std::move(r.out));
      continue;
    }
    std::string text;
    if (read_prompt_file(entry, e, ctx, text, rt.warnings)) add(std::move(text));
  }
  if (rt.warnings.size() > kMaxWarnings) {
    const auto more = rt.warnings.size() - kMaxWarnings;
    rt.warnings.resize(kMaxWarnings);
    rt.warnings.push_back(std::to_string(more) + " more prompt entry warnings left out");
  }
  return rt;
}

}  // namespace detail

ResolvedText resolve_entries(const std::vector<std::string>& entries, const PromptContext& ctx) {
  return detail::resolve_entries(entries, ctx, std::chrono::seconds(30), 256 * 1024);
}

}  // namespace ollie
