#include "toolsrv/session.hpp"

#include <fcntl.h>

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <string_view>

#include "lib9p/dirs.hpp"
#include "toolsrv/json.hpp"
#include "toolsrv/landlock.hpp"
#include "toolsrv/paths.hpp"

extern char** environ;

namespace toolsrv {
namespace {

// The session cwd comes resolved (olliesrv resolves it when the session is made, a remote
// bootstrap at each start), and is sent again at every start: one that resolves elsewhere now
// had a component replaced by a symlink since (by a tool of another session that can write
// where it lies), and this session's tools would run there.
p9::Result<HeldCwd> session_cwd(const std::string& dir) {
  auto d = HeldCwd::open(dir);
  if (d && d->resolved != d->path) return p9::error("cwd changed since it was set: " + d->path);
  return d;
}

// PATH entries that are absolute, so no command resolves in the model-writable cwd; with
// `writable`, also none inside those paths.
std::string clean_search_path(std::string_view path, const std::vector<std::string>* writable = nullptr) {
  std::string out;
  while (!path.empty()) {
    const auto colon = path.find(':');
    const auto entry = path.substr(0, colon);
    path.remove_prefix(colon == std::string_view::npos ? path.size() : colon + 1);
    if (entry.empty() || entry.front() != '/') continue;
    if (writable && inside_writable(std::string(entry), *writable)) continue;
    if (!out.empty()) out += ':';
    out += entry;
  }
  return out;
}

// The socket path of OLLIE_ADDR (`unix!<path>`) in a tool's environment, "" for none.
std::string ollie_socket(const std::vector<std::string>& env) {
  static const std::string key = "OLLIE_ADDR=unix!";
  for (const auto& kv : env) {
    if (kv.rfind(key, 0) == 0) return kv.substr(key.size());
  }
  return "";
}

std::string join(const std::vector<std::string>& v, char sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

/// The PATH of a sandboxed call (§6.6): the tool directories kept, then the PATH of `env` without
/// empty and relative entries, else /usr/local/bin:/usr/bin:/bin.
std::string sandboxed_path(const std::map<std::string, std::string>& env, const std::vector<std::string>& trusted) {
  const auto it = env.find("PATH");
  std::string path = clean_search_path(it != env.end() ? it->second : "");
  if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
  return trusted.empty() ? path : join(trusted, ':') + ":" + path;
}

}  // namespace

SessionConfig SessionConfig::from_environment(const std::string& config_root, const std::string& cwd,
                                              const std::string& bin_path) {
  SessionConfig c;
  c.config_root = config_root;
  c.cwd = cwd;
  c.bin_path = bin_path;
  const auto env = p9::process_env();
  c.session_id = env("OLLIE_SESSION_ID").value_or("pid-" + std::to_string(::getpid()));
  c.data_root = p9::data_root(env);
  c.tmpdir = p9::runtime_root(env) + "/tmp/" + c.session_id;
  c.tools_path = env("OLLIE_TOOLS_PATH").value_or("");
  // Tests shorten the bypass timeout of §6.9.1 (whole seconds, at least 1).
  if (auto t = env("OLLIE_TEST_BYPASS_TIMEOUT")) {
    const long n = std::strtol(t->c_str(), nullptr, 10);
    c.bypass_timeout = std::chrono::seconds(n > 0 ? n : 1);
  }
  return c;
}

// ---- Call ----

void Call::cancel() {
  std::function<void()> fn;
  {
    std::lock_guard lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
    if (cancel_process_) fn = cancel_process_;
    else if (cancel_lock_) fn = cancel_lock_;
    else if (cancel_bypass_) fn = cancel_bypass_;
  }
  if (fn) fn();
}

int Call::pid() const {
  std::lock_guard lock(mu_);
  return pid_;
}

// ---- Session ----

/// Everything about a call that is decided before it waits for anything.
struct Session::Prepared {
  CallRequest request;
  bool background = false;
  Tool tool;
  std::string cwd;  // as set (held.path)
  HeldCwd held;     // the cwd, resolved when it was set: the {CWD} rule and the fchdir
  std::chrono::seconds timeout{0};
  std::vector<std::string> headers;
  std::string fail;  // non-empty: the call ends failed with this reason
  Policy policy;
  TemplateVars vars;
  std::vector<std::string> tool_dirs;  // every absolute tool directory (rox)
  std::vector<std::string> trusted;    // those outside every writable path (PATH); set at the spawn
  std::vector<std::string> writable;   // the rw and rwx paths, resolved at the spawn
  std::map<std::string, std::string> session_env;
};

Session::Session(SessionConfig config)
    : config_(std::move(config)),
      cwd_(session_cwd(config_.cwd)),
      bypass_(config_.bypass_timeout),
      locks_(LockTable::create()),
      unix_guard_(unix_notify_available() ? std::make_unique<UnixGuard>() : nullptr),
      procs_(std::make_unique<ProcessTable>(config_.proc_keep)) {
  // Without XDG_RUNTIME_DIR the root is /tmp/ollie-<uid>, in the shared /tmp: checked as §6.1 says.
  if (auto r = p9::ensure_runtime_dir(config_.tmpdir); !r) tmpdir_error_ = r.ename();
  if (!tmpdir_error_.empty()) spdlog::error("toolsrv: private TMPDIR: {}", tmpdir_error_);
}

// The table is stopped before anything goes: the callbacks its thread still runs (a finish
// releasing a path lock, which starts the next call) reach the table through procs_, which a
// reset would have nulled first.
Session::~Session() { procs_->stop(); }

void Session::warn_once(const std::string& text, spdlog::level::level_enum level) {
  if (!spdlog::should_log(level)) return;
  once(text, level, *spdlog::default_logger());
}

void Session::sandbox_note(const std::string& log_level, const std::string& text, spdlog::level::level_enum level) {
  if (log_level.empty()) return warn_once(text, level);
  if (level < spdlog::level::from_str(log_level)) return;
  // The default logger's twin (same name, sink and format: olliesrv relays its lines) that
  // filters nothing: the policy's level, not OLLIE_LOG's, decides.
  static const auto unfiltered = [] {
    auto l = spdlog::default_logger()->clone("toolsrv");
    l->set_level(spdlog::level::trace);
    return l;
  }();
  once(text, level, *unfiltered);
}

void Session::once(const std::string& text, spdlog::level::level_enum level, spdlog::logger& to) {
  {
    std::lock_guard lock(mu_);
    // Bounded: a project override in the cwd is the model's to write, a new path every call.
    if (warned_.size() > warned_max || warned_.contains(text)) return;
    warned_.insert(text);
    if (warned_.size() > warned_max) {
      spdlog::warn("toolsrv: {} distinct warnings logged; no more are", warned_max);
      return;
    }
  }
  to.log(level, "toolsrv: {}", text);
}

std::string Session::agent_cwd(const std::string& agent) const {
  std::lock_guard lock(mu_);
  const auto it = agent_cwd_.find(agent);
  return it != agent_cwd_.end() ? it->second.path : config_.cwd;
}

p9::Result<HeldCwd> Session::held_cwd(const std::string& agent) const {
  std::lock_guard lock(mu_);
  const auto it = agent_cwd_.find(agent);
  return it != agent_cwd_.end() ? p9::Result<HeldCwd>(it->second) : cwd_;
}

std::map<std::string, std::string> Session::sandbox_env(const Policy& policy) const {
  std::map<std::string, std::string> env;
  for (const auto& name : policy.env) {
    if (const char* v = std::getenv(name.c_str())) env[name] = v;
  }
  std::lock_guard lock(mu_);
  for (const auto& [k, v] : env_) env[k] = v;
  return env;
}

std::shared_ptr<const std::vector<CatalogEntry>> Session::scan() {
  std::vector<std::string> warnings;
  const auto dirs = tool_dirs(config_.tools_path, config_.config_root, &warnings);
  for (const auto& w : warnings) warn_once(w);
  auto global = global_policy_.load(config_.config_root + "/sandbox.yaml");
  const Policy policy = global ? effective_policy(**global, nullptr) : Policy{};
  std::string cwd;
  {
    std::lock_guard lock(mu_);
    cwd = config_.cwd;
  }
  const auto vars = TemplateVars::for_call(cwd, config_.tmpdir, config_.config_root, config_.data_root, config_.bin_path);
  const auto writable = writable_paths(policy, vars);
  auto host = std::make_shared<HostFacts>();
  std::tie(host->os, host->arch) = host_os_arch();
  host->env = sandbox_env(policy);
  std::vector<std::string> trusted;
  for (const auto& d : dirs) {
    if (!inside_writable(d, writable)) trusted.push_back(d);
  }
  // §7.2.3: `env` and `nenv` see the environment of §6.6, but for what only a call knows (its
  // agent and secret, the git entries).
  host->env["PATH"] = sandboxed_path(host->env, trusted);
  host->env["OLLIE_SESSION_ID"] = config_.session_id;
  host->env["OLLIE_TOOLS_PATH"] = join(trusted, ':');
  host->env["TMPDIR"] = config_.tmpdir;
  std::stringstream in(host->env["PATH"]);
  for (std::string e; std::getline(in, e, ':');) host->path.push_back(e);
  auto catalog = std::make_shared<const std::vector<CatalogEntry>>(scan_tools(dirs, *host));
  std::lock_guard lock(mu_);
  catalog_ = catalog;
  host_ = std::move(host);
  dirs_ = dirs;
  return catalog;
}

std::shared_ptr<const std::vector<CatalogEntry>> Session::catalog_for(const std::string& agent) {
  std::shared_ptr<const std::vector<CatalogEntry>> catalog;
  std::shared_ptr<const HostFacts> host;
  std::set<std::string> names;
  std::vector<std::string> dirs;
  {
    std::lock_guard lock(mu_);
    catalog = catalog_;
    host = host_;
    names = registry_.names(agent);
    dirs = dirs_;
  }
  if (!catalog) return scan();
  auto fresh = refreshed(*catalog, names, dirs, *host);
  if (!fresh) return catalog;
  std::lock_guard lock(mu_);
  if (catalog_ == catalog) catalog_ = fresh;  // else a scan meanwhile is newer
  return fresh;
}

// ---- ctl ----

p9::Result<void> Session::load(const std::string& agent, const std::vector<std::string>& tools) {
  const auto catalog = scan();
  std::lock_guard lock(mu_);
  listings_.erase(agent);
  return registry_.load(agent, tools, *catalog);
}

void Session::unload(const std::string& agent, const std::vector<std::string>& tools) {
  std::lock_guard lock(mu_);
  listings_.erase(agent);
  registry_.unload(agent, tools);
}

void Session::forget(const std::string& agent) {
  std::vector<std::shared_ptr<Call>> calls;
  {
    std::lock_guard lock(mu_);
    registry_.forget(agent);
    listings_.erase(agent);
    agent_cwd_.erase(agent);
    std::erase_if(calls_, [&](const auto& c) {
      if (c.first != agent) return false;
      if (auto call = c.second.lock()) calls.push_back(std::move(call));
      return true;
    });
  }
  for (const auto& call : calls) call->cancel();
  procs_->forget_agent(agent);
}

p9::Result<void> Session::set_env(const std::string& key, const std::string& value) {
  static const std::regex name("^[A-Za-z_][A-Za-z0-9_]*$");
  if (!std::regex_match(key, name)) return p9::error("invalid env name: " + key);
  {
    std::lock_guard lock(mu_);
    const auto it = env_.find(key);
    if (value.empty() ? it == env_.end() : it != env_.end() && it->second == value) return {};
    if (value.empty()) env_.erase(it);
    else env_[key] = value;
    if (!catalog_) return {};  // no scan yet: the first one sees it
  }
  scan();  // variants test the environment (§7.2.3): chosen again
  std::lock_guard lock(mu_);
  listings_.clear();
  return {};
}

p9::Result<void> Session::set_cwd(const std::string& dir) {
  auto d = session_cwd(dir);
  if (!d) return d.error();
  std::lock_guard lock(mu_);
  config_.cwd = d->path;
  cwd_ = std::move(d);
  return {};
}

p9::Result<void> Session::set_agent_cwd(const std::string& agent, const std::optional<std::string>& dir) {
  if (!dir) {
    std::lock_guard lock(mu_);
    agent_cwd_.erase(agent);
    return {};
  }
  auto d = HeldCwd::open(*dir);
  if (!d) return d.error();
  // olliesrv sends the directory it checked, resolved (§4.2's containment of an agent's agent/new
  // compares resolved paths): one that resolves elsewhere now had a component replaced since, by
  // a tool that can write in the caller's cwd, to reach outside it.
  if (d->resolved != d->path) return p9::error("cwd: " + *dir + ": changed while being set");
  std::lock_guard lock(mu_);
  agent_cwd_.insert_or_assign(agent, std::move(*d));
  return {};
}

p9::Result<void> Session::set_approvals(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::lock_guard lock(mu_);
  return approvals_.replace(pairs);
}

// ---- tools, info ----

std::string Session::tools(const std::string& request) {
  if (request == "*") return json_text(catalog_json(*scan())) + "\n";
  const auto catalog = catalog_for(request);
  std::vector<std::string> dropped;
  std::string text;
  {
    std::lock_guard lock(mu_);
    if (registry_.names(request).empty()) return "[]\n";
    auto& listing = listings_[request];
    if (listing.catalog != catalog) {
      listing.text = json_text(registry_.agent_json(request, *catalog, &dropped)) + "\n";
      listing.catalog = catalog;
    }
    text = listing.text;
  }
  for (const auto& d : dropped) spdlog::warn("toolsrv: loaded tool {} of agent {} is no longer valid", d, request);
  return text;
}

std::string Session::info(const std::string& agent) {
  const auto cwd = agent.empty() ? agent_cwd("") : agent_cwd(agent);
  const auto [os, arch] = host_os_arch();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  bool git = false;
  for (std::string dir = cwd;; dir = clean_path(dir + "/..")) {
    struct stat st {};
    if (::stat((dir + "/.git").c_str(), &st) == 0) {
      git = true;
      break;
    }
    if (dir == "/") break;
  }
  return "os=" + os + "\narch=" + arch + "\nhostname=" + host + "\nlandlock=" + std::to_string(landlock_abi()) +
         "\ncwd=" + cwd + "\ngit=" + (git ? "true" : "false") + "\n";
}

std::string Session::resolve_dirs(const std::string& agent, const std::vector<std::string>& paths) {
  // A relative path is opened from the directory the agent's tools run in (held since it was
  // set), not from its name: a tool that swapped that name for a symlink (to $HOME) must not
  // move what olliesrv's containment compares with (§4.2). Each directory is named by where the
  // opened one is, never resolved twice. Not cleaned first: `link/..` is the link target's
  // parent, as the kernel walks it.
  const auto held = held_cwd(agent);
  const char* home = std::getenv("HOME");
  std::string out;
  for (const auto& p : paths) {
    // `~` and `~/…` are this host's home (§3.3: `~` expanded on the tool host).
    std::string expanded;
    if (home && *home == '/' && (p == "~" || p.rfind("~/", 0) == 0)) expanded = home + p.substr(1);
    const std::string& q = expanded.empty() ? p : expanded;
    const bool absolute = !q.empty() && q.front() == '/';
    const int base = absolute || !held ? AT_FDCWD : held->fd->get();
    const std::string path = absolute || held ? (q.empty() ? "." : q) : agent_cwd(agent) + "/" + q;
    const UniqueFd d(::openat(base, path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    std::string real = d ? fd_path(d.get()) : std::string();
    // A newline would end the line early: a TAB in its place is refused as one (§4.1).
    std::replace(real.begin(), real.end(), '\n', '\t');
    out += p + "\t" + (real.empty() || real.front() != '/' ? "-" : real) + "\n";
  }
  return out;
}

std::string Session::stat_paths(const std::string& agent, const std::vector<std::string>& paths) {
  const auto cwd = agent_cwd(agent);
  std::string out;
  for (const auto& p : paths) {
    struct stat st {};
    if (::stat(absolute_path(p, cwd).c_str(), &st) == 0) {
      const auto ns = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
      out += p + "\ttrue\t" + std::to_string(ns) + "\t" + std::to_string(st.st_size) + "\n";
    } else {
      out += p + "\tfalse\t-\t-\n";
    }
  }
  return out;
}

// ---- calls ----

/// Runs one prepared call through its stages: bypass approval, path lock, sandbox, process.
struct Session::Launcher : std::enable_shared_from_this<Session::Launcher> {
  Session* s;
  Prepared p;
  std::shared_ptr<Call> call;
  std::function<void(std::shared_ptr<Process>)> on_start, on_end;

  void end_early(ProcStatus status, const std::string& reason) {
    {
      std::lock_guard lock(call->mu_);  // the cancel hooks hold this launcher: break the cycle
      call->cancel_bypass_ = nullptr;
      call->cancel_lock_ = nullptr;
    }
    on_start(s->procs_->add_finished(p.request.tool, p.request.agent, p.background, status, reason, p.headers));
  }

  bool cancelled() {
    std::lock_guard lock(call->mu_);
    return call->cancelled_;
  }

  void begin() {
    if (!p.fail.empty()) return end_early(ProcStatus::failed, p.fail);
    if (!p.request.bypass) return lock(false);
    const auto writable = writable_paths(p.policy, p.vars);
    for (const auto& path : {p.tool.exe_path, p.tool.meta_path}) {
      // As written and link by link: a tool directory that is a link in the cwd looks safe
      // resolved, and the model retargets it between this check and the exec.
      if (!path.empty() && model_placed(path, writable)) {
        return end_early(ProcStatus::denied, "bypass refused: tool inside a writable path: " + path);
      }
    }
    auto self = shared_from_this();
    std::unique_lock lock(call->mu_);
    call->bypass_id_ = s->bypass_.request(p.request.agent, p.request.tool, p.request.args, p.cwd, p.background,
                                          [self](BypassDecision d) { self->decided(d); });
    if (call->bypass_id_ == 0) {
      lock.unlock();
      return end_early(ProcStatus::denied, "bypass refused: " + std::to_string(bypass_pending_max) +
                                               " requests are pending already");
    }
    call->cancel_bypass_ = [self] {
      if (self->s->bypass_.withdraw(self->call->bypass_id_)) self->end_early(ProcStatus::denied, "bypass withdrawn");
    };
  }

  void decided(const BypassDecision& d) {
    {
      std::lock_guard lock(call->mu_);
      call->cancel_bypass_ = nullptr;
    }
    if (cancelled()) return end_early(ProcStatus::denied, "bypass withdrawn");
    if (!d.allowed) {
      return end_early(ProcStatus::denied, d.reason == "timeout" ? "bypass denied: no answer within " +
                                                                      std::to_string(s->config_.bypass_timeout.count()) + " s"
                                                                : "bypass denied");
    }
    lock(true);
  }

  void lock(bool bypass) {
    if (p.background) return run(bypass, nullptr);
    auto self = shared_from_this();
    auto req = LockRequest::for_call(p.tool.scope, p.request.args, p.cwd);
    // Leaves the queue if still waiting; false once granted (the grant then sees cancelled_).
    auto leave = [self](std::uint64_t ticket) {
      if (ticket && self->s->locks_->cancel(ticket)) self->end_early(ProcStatus::failed, "cancelled while waiting for a path lock");
    };
    std::unique_lock lock(call->mu_);
    call->cancel_lock_ = [self, leave] {
      std::uint64_t ticket;
      {
        std::lock_guard l(self->call->mu_);
        ticket = self->call->lock_ticket_;
      }
      leave(ticket);  // 0: not queued yet; lock() itself sees cancelled_ once it is
    };
    lock.unlock();
    const auto ticket = s->locks_->acquire(req, [self, bypass](LockHold hold) {
      {
        std::lock_guard l(self->call->mu_);
        self->call->cancel_lock_ = nullptr;
      }
      if (self->cancelled()) return self->end_early(ProcStatus::failed, "cancelled");
      self->run(bypass, std::make_shared<LockHold>(std::move(hold)));
    });
    lock.lock();
    call->lock_ticket_ = ticket;
    const bool cancelled_meanwhile = call->cancelled_;
    lock.unlock();
    // A cancel between acquire() and the ticket found no ticket to withdraw: withdraw it here.
    if (cancelled_meanwhile) leave(ticket);
  }

  std::vector<std::string> environment(bool bypass) {
    std::map<std::string, std::string> env;
    if (bypass) {
      for (char** e = environ; e && *e; ++e) {
        const std::string kv = *e;
        const auto eq = kv.find('=');
        if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
      for (const auto& [k, v] : p.session_env) env[k] = v;
    } else {
      for (const auto& name : p.policy.env) {
        if (const char* v = std::getenv(name.c_str())) env[name] = v;
      }
      for (const auto& [k, v] : p.session_env) env[k] = v;
    }
    const auto path_it = env.find("PATH");
    // A bypass call runs unconfined: a directory the model can write is no place to look for the
    // program the hostowner approved.
    const std::string path = bypass ? clean_search_path(path_it != env.end() ? path_it->second : "", &p.writable)
                                    : sandboxed_path(env, p.trusted);
    long k = 0;
    if (const auto it = env.find("GIT_CONFIG_COUNT"); it != env.end()) {
      char* end = nullptr;
      const long n = std::strtol(it->second.c_str(), &end, 10);
      // More entries than any environment holds is not a count (and LONG_MAX + 1 overflows).
      if (!it->second.empty() && *end == '\0' && n >= 0 && n <= 100'000) k = n;
    }
    env["OLLIE_AGENT_ID"] = p.request.agent;
    env["OLLIE_UNAME"] = p.request.agent;
    if (!p.request.auth.empty()) env["OLLIE_AUTH"] = p.request.auth;
    env["OLLIE_SESSION_ID"] = s->config_.session_id;
    env["OLLIE_TOOLS_PATH"] = join(p.trusted, ':');
    env["TMPDIR"] = s->config_.tmpdir;
    env["PATH"] = path;
    // git forced safe (§6.6): no fsmonitor command; for a bypass call no hooks either, since the
    // cwd's .git/hooks are the model's to write.
    std::vector<std::pair<std::string, std::string>> git = {{"core.fsmonitor", "false"}};
    if (bypass) git.emplace_back("core.hooksPath", "/dev/null");
    for (const auto& [key, value] : git) {
      env["GIT_CONFIG_KEY_" + std::to_string(k)] = key;
      env["GIT_CONFIG_VALUE_" + std::to_string(k)] = value;
      ++k;
    }
    env["GIT_CONFIG_COUNT"] = std::to_string(k);
    std::vector<std::string> out;
    for (const auto& [key, v] : env) out.push_back(key + "=" + v);
    return out;
  }

  void run(bool bypass, std::shared_ptr<LockHold> hold) {
    if (cancelled()) return end_early(ProcStatus::failed, "cancelled");  // forgotten or flushed meanwhile
    // The paths the model can write, resolved once, now that the call no longer waits: PATH, the
    // bypass search path and the sandbox plan all see the same answer.
    p.writable = writable_paths(p.policy, p.vars);
    for (const auto& d : p.tool_dirs) {
      if (inside_writable(d, p.writable)) s->warn_once("tool directory inside a writable path, kept off PATH: " + d);
      else p.trusted.push_back(d);
    }
    Launch l;
    l.tool = p.request.tool;
    l.agent = p.request.agent;
    l.background = p.background;
    l.timeout = p.background ? std::chrono::seconds(0) : p.timeout;
    l.stdin_data = p.request.args_text;
    l.headers = p.headers;
    l.spec.cwd = p.cwd;
    l.spec.cwd_dir = p.held.fd;
    l.spec.env = environment(bypass);
    if (p.tool.cmd) l.spec.argv = {"/bin/sh", "-c", *p.tool.cmd};
    else l.spec.argv = {p.tool.exe_path};
    l.spec.no_new_privs = !bypass;
    if (!bypass) {
      const auto plan = plan_sandbox(p.policy, p.vars, p.writable, p.tool_dirs, s->config_.data_root, p.tool.exe_path,
                                     ollie_socket(l.spec.env));
      // A warning (§7.3.2), optional paths of the shipped policy (~/.gitconfig or ~/.config/git)
      // included: `log_level: error` in sandbox.yaml silences them.
      for (const auto& skipped : plan.skipped) s->sandbox_note(p.policy.log_level, "sandbox path skipped: " + skipped);
      // A tool directory behind a link the model can write is not granted (the model could point
      // it anywhere), so its programs cannot run sandboxed: said here, not as exec's bare EACCES.
      if (!p.tool.cmd && !p.tool.exe_path.empty()) {
        for (const auto& dir : plan.redirectable)
          if (is_within(clean_path(p.tool.exe_path), dir))
            return end_early(ProcStatus::failed, "sandbox: tool directory " + dir + ": a link the sandbox can write is on the way: " +
                                                     p.request.tool +
                                                     " cannot run sandboxed (a tool directory inside a writable path must be a directory, not a link)");
      }
      const int abi = landlock_abi();
      if (auto why = sandbox_unavailable(plan, abi)) {
        if (!p.policy.best_effort) return end_early(ProcStatus::failed, *why);
        if (abi <= 0) {
          spdlog::warn("toolsrv: NO LANDLOCK: {} runs UNCONFINED (best_effort): {}", p.request.tool, *why);
          l.headers.push_back("sandbox=none");
        } else {
          s->sandbox_note(p.policy.log_level, "best_effort: running with Landlock ABI " + std::to_string(abi) + ": " + *why);
        }
      }
      if (abi > 0) {
        auto ruleset = s->rulesets_.get(plan, abi);
        if (!ruleset) return end_early(ProcStatus::failed, "sandbox: " + ruleset.ename());
        l.ruleset = std::move(*ruleset);
      }
      // The guard's filter at every ABI: no Landlock governs a file's mode, owner, times or
      // extended attributes (fileattr.hpp); below ABI 9 it also mediates Unix sockets.
      if (s->unix_guard_) {
        auto access = std::make_shared<UnixAccess>();
        access->sockets = plan.unix_sockets;
        for (const auto& rule : plan.rules)
          if (rule.access == Access::rw || rule.access == Access::rwx) access->writable.push_back({rule.dev, rule.ino});
        if (abi >= 4 && plan.network.restricts()) {
          access->tcp_connect = plan.network.enabled ? plan.network.connect_tcp : std::vector<std::uint16_t>{};
        }
        auto* guard = s->unix_guard_.get();
        l.spec.unix_filter = true;
        l.on_unix_listener = [guard, access](UniqueFd fd) { guard->adopt(std::move(fd), access); };
      }
    }
    auto self = shared_from_this();
    l.on_finish = [self, hold](const std::shared_ptr<Process>& proc) {
      if (hold) hold->release();
      if (self->on_end) self->on_end(proc);
    };
    s->procs_->start(std::move(l), [self, hold](std::shared_ptr<Process> proc) {
      bool kill = false;
      if (proc->finished()) {
        if (hold) hold->release();
      } else {
        std::lock_guard lock(self->call->mu_);
        self->call->pid_ = proc->pid();
        const int pid = proc->pid();
        auto* procs = self->s->procs_.get();
        self->call->cancel_process_ = [procs, pid] { procs->cancel(pid); };
        kill = self->call->cancelled_;
      }
      if (kill) self->s->procs_->cancel(proc->pid());
      self->on_start(proc);
    });
  }
};

p9::Result<std::shared_ptr<Call>> Session::start_call(const CallRequest& request, bool background,
                                                      std::function<void(std::shared_ptr<Process>)> on_start,
                                                      std::function<void(std::shared_ptr<Process>)> on_end) {
  Prepared p;
  {
    std::lock_guard lock(mu_);
    if (!registry_.loaded(request.agent, request.tool)) return p9::error("tool not loaded: " + request.tool);
  }
  p.request = request;
  p.background = background;
  auto held = held_cwd(request.agent);
  std::string cwd_error = held ? "" : held.ename();
  if (held) {
    p.held = *held;
    p.cwd = p.held.path;
    if (auto st = p.held.check(); !st) cwd_error = st.ename();
  } else {
    p.cwd = agent_cwd(request.agent);
  }
  // The tool as the latest scan (load, tools) found it: the directories are not rescanned per
  // call (§7.2.2). Only its executable is checked again, so one that vanished or lost its x bit
  // since fails clearly rather than with an exec error.
  std::shared_ptr<const std::vector<CatalogEntry>> catalog;
  {
    std::lock_guard lock(mu_);
    catalog = catalog_;
  }
  const auto* entry = catalog ? find_entry(*catalog, request.tool) : nullptr;
  if (!entry) p.fail = "unknown tool: " + request.tool;
  else if (!entry->tool) p.fail = "invalid tool: " + request.tool + ": " + entry->error;
  else p.tool = *entry->tool;
  if (p.fail.empty() && !p.tool.cmd) {
    struct stat st {};
    if (::stat(p.tool.exe_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 0111) == 0) {
      p.fail = "invalid tool: " + request.tool + ": no executable and no cmd: " + p.tool.exe_path +
               " is not an executable file";
    }
  }
  p.timeout = std::chrono::seconds(request.timeout ? *request.timeout : p.tool.timeout);
  if (!tmpdir_error_.empty() && p.fail.empty()) p.fail = "private TMPDIR: " + tmpdir_error_;
  if (!cwd_error.empty() && p.fail.empty()) p.fail = cwd_error;

  auto global = global_policy_.load(config_.config_root + "/sandbox.yaml");
  if (!global && p.fail.empty()) p.fail = "sandbox.yaml: " + global.ename();
  if (global) {
    std::string note;
    std::optional<PolicyFile> project;
    const auto o = cwd_error.empty() ? find_override(p.held.fd->get(), p.cwd, &note) : std::nullopt;
    if (o) {
      bool ok;
      {
        std::lock_guard lock(mu_);
        ok = approvals_.approved(o->sha256, o->dir);
      }
      if (ok) {
        auto parsed = parse_policy(o->bytes);
        if (!parsed && p.fail.empty()) p.fail = o->path + ": " + parsed.ename();
        if (parsed) project = std::move(*parsed);
        p.headers.push_back("override=" + o->sha256 + " applied");
      } else {
        sandbox_note((*global)->log_level.value_or(""),
                     "project sandbox override " + o->path + " ignored: not approved (sha256 " + o->sha256 + ")",
                     spdlog::level::info);
        p.headers.push_back("override=" + o->sha256 + " ignored");
      }
    }
    if (!note.empty()) sandbox_note((*global)->log_level.value_or(""), note);
    p.policy = effective_policy(**global, project ? &*project : nullptr);
  }
  p.vars = TemplateVars::for_call(cwd_error.empty() ? p.held.resolved : p.cwd, config_.tmpdir, config_.config_root,
                                  config_.data_root, config_.bin_path);
  if (cwd_error.empty()) p.vars.cwd_fd = p.held.fd->get();
  std::vector<std::string> warnings;
  p.tool_dirs = tool_dirs(config_.tools_path, config_.config_root, &warnings);
  {
    std::lock_guard lock(mu_);
    p.session_env = env_;
  }

  auto launcher = std::make_shared<Launcher>();
  launcher->s = this;
  launcher->p = std::move(p);
  launcher->call = std::make_shared<Call>();
  launcher->on_start = std::move(on_start);
  launcher->on_end = std::move(on_end);
  auto call = launcher->call;
  {
    std::lock_guard lock(mu_);
    std::erase_if(calls_, [](const auto& c) { return c.second.expired(); });
    calls_.emplace_back(request.agent, call);
  }
  launcher->begin();
  return call;
}

p9::Result<std::shared_ptr<Call>> Session::call(const CallRequest& request, std::function<void(std::string)> done) {
  auto once = std::make_shared<std::function<void(std::string)>>(std::move(done));
  return start_call(
      request, false,
      [once](std::shared_ptr<Process> proc) {
        if (proc->finished()) (*once)(proc->take_reply());
      },
      [once](std::shared_ptr<Process> proc) { (*once)(proc->take_reply()); });
}

p9::Result<std::shared_ptr<Call>> Session::call_background(const CallRequest& request,
                                                           std::function<void(p9::Result<int>)> done) {
  auto* procs = procs_.get();
  return start_call(
      request, true,
      [done = std::move(done), procs](std::shared_ptr<Process> proc) {
        if (!proc->finished() || proc->os_pid() > 0) return done(proc->pid());
        const auto status = proc->status();
        auto reason = proc->reply();
        reason = reason.substr(reason.find("\n\n") + 2);
        while (!reason.empty() && reason.back() == '\n') reason.pop_back();
        procs->dismiss(proc->pid());
        if (status == ProcStatus::denied) return done(p9::error("bypass denied"));
        done(p9::error("start failed: " + reason));
      },
      nullptr);
}

}  // namespace toolsrv
