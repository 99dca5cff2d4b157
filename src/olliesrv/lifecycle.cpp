#include "lifecycle.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <chrono>
#include <optional>
#include <set>
#include <thread>

#include "agent_cfg.hpp"
#include "bypass_policy.hpp"
#include "containment.hpp"
#include "dispatch.hpp"
#include "compaction.hpp"
#include "hub.hpp"
#include "ids.hpp"
#include "off_io.hpp"
#include "procs.hpp"
#include "remote.hpp"
#include "request.hpp"
#include "session.hpp"
#include "session_files.hpp"
#include "settings.hpp"
#include "verbs.hpp"
#include "virtfs/tokenize.hpp"

namespace ollie {

namespace {

/// The note a turn cut off by a kill -9 gets at the restore (§7.7).
constexpr std::string_view interrupted_note = "interrupted: olliesrv stopped during the turn";

/// §4.1's cwd rules, checked on this host (where the tools run for a local session). The
/// directory is kept as its symlinks resolve now: toolsrv holds a session's cwd only where its
/// name still leads straight to it, so a symlink planted on the way later is refused.
p9::Result<std::string> check_dir(const std::string& given, const p9::Env& env) {
  if (bad_path(given)) return p9::error("cwd: invalid character");
  std::string p = p9::expand_home(given, env);
  if (p.empty() || p[0] != '/') return p9::error("cwd must be absolute: " + given);
  struct stat st;
  char real[PATH_MAX];
  if (::stat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || !::realpath(p.c_str(), real))
    return p9::error("cwd: " + p + ": not a directory");
  if (bad_path(real)) return p9::error("cwd: invalid character");  // a clean name of one that is not
  return std::string(real);
}

/// The same rules for a remote session's cwd, but for the check of the directory, made on the
/// tool host. `~` and `~/…` (home_ok) are that host's HOME: a session's expanded by its bootstrap
/// (§4.1), an agent's by its toolsrv's resolve (§3.3).
p9::Result<std::string> check_remote_dir(std::string p, bool home_ok = false) {
  if (bad_path(p)) return p9::error("cwd: invalid character");
  const bool home = home_ok && (p == "~" || p.rfind("~/", 0) == 0);
  if (p.empty() || (p[0] != '/' && !home)) return p9::error("cwd must be absolute: " + p);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// Not inside the coroutines: GCC 12 rejects initializer lists of literals there.
p9::Result<KeyValues> parse_session_request(const std::string& r) {
  return parse_request(r, {"name", "cwd", "remote", "backend", "model"});
}

p9::Result<KeyValues> parse_agent_request(const std::string& r) {
  return parse_request(r, {"name", "cwd", "agent", "backend", "model", "parent", "timeout"}, true);
}

// One lock at a time: Session::find takes the session's, then an agent's.
std::string agent_path(const Session& s, const Agent& a) { return "session/" + s.current_name() + "/agent/" + a.current_name(); }

}  // namespace

asio::awaitable<p9::Result<std::string>> new_session(Hub& hub, std::string request) {
  auto kv = parse_session_request(request);
  if (!kv) co_return kv.error();
  if (kv->get("cwd").empty()) co_return p9::error("cwd is required");
  const std::string remote = kv->get("remote");
  // A remote cwd is on the tool host: its bootstrap checks it (§6.11).
  auto cwd = remote.empty() ? check_dir(kv->get("cwd"), hub.env) : check_remote_dir(kv->get("cwd"), true);
  if (!cwd) co_return cwd.error();
  const std::string id = new_uuid();
  std::string name = kv->get("name");
  if (name.empty()) name = default_name(id);
  if (!valid_name(name)) co_return p9::error(invalid_name(name));
  if (!remote.empty() && !remote::valid_destination(remote)) co_return p9::error("remote: invalid destination: " + remote);
  if (auto st = check_backend(kv->get("backend")); !st) co_return st.error();
  if (auto st = check_model(kv->get("model")); !st) co_return st.error();
  if (hub.find(name)) co_return p9::error("session already exists: " + name);

  auto s = std::make_shared<Session>(hub, id, *cwd, remote);
  {
    std::lock_guard lock(s->mu);
    s->name = name;
    s->backend = kv->get("backend");
    s->model = kv->get("model");
  }
  s->host->set_env("OLLIE_SESSION_ID", id);
  if (!hub.addr.empty()) s->host->set_env("OLLIE_ADDR", hub.addr);
  // The session's toolsrv starts now: the cwd check is its first need (§4.1), made by the start,
  // which sends it the cwd. If it cannot start, nothing is created.
  // Undone by a kill: its toolsrv stops, a remote one's forwarded socket goes (§6.11.5), and the
  // private TMPDIR a toolsrv made goes with the session's files.
  auto remove = [s] { s->remove_files(); };  // named: see off_io
  p9::Status made;
  try {
    made = co_await s->host->ensure();
  } catch (const std::system_error&) {
    // Flushed while its toolsrv starts: the start is stopped too (a remote bootstrap's ssh),
    // and nothing is left of the session.
    s->kill();
    asio::post(hub.blocking, remove);
    throw;
  }
  if (made) {
    s->cwd = s->host->cwd();  // a remote `~/…` as its bootstrap expanded it; no one else sees s yet
    made = hub.add(s);
  }
  // Answered only once saved (§7.7): a session the disk did not take is not made. Nor is one
  // whose request was flushed meanwhile (§1.5): its client is told nothing, and would find the
  // name taken by a session it never learnt the id of.
  bool flushed = false;
  if (made) {
    try {
      made = co_await save_now(hub, s);
    } catch (const std::system_error&) {
      flushed = true;
    }
    flushed = flushed || (co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none;
    if (flushed) made = p9::error("interrupted");
    if (!made) hub.remove(id);
  }
  if (!made) {
    s->kill();
    if (flushed) {
      asio::post(hub.blocking, remove);  // a co_await would end at once, cancelled
      co_return made.error();
    }
    co_await off_io<void>(hub, remove);
    co_return made.error();
  }
  hub.bus.publish("session." + id + ".new", "session/" + name);
  co_return id + "\n";
}

namespace {

/// `timeout=` (§4.2): whole seconds, 0 = none.
std::optional<int> parse_timeout(const std::string& v) {
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoi(v);
}

bool all_blank(const std::string& t) {
  return std::all_of(t.begin(), t.end(), virtfs::blank);
}

/// A sub-agent's end (§4.2 step 5), or a flushed creation's undoing: killed, its registry dropped,
/// `agent.<id>.kill`. Nothing to do when `ctl kill` already destroyed it.
void destroy_agent(Hub& hub, const std::shared_ptr<Session>& s, const std::shared_ptr<Agent>& a) {
  {
    std::lock_guard lock(a->mu);
    if (a->killed) return;
  }
  const std::string path = agent_path(*s, *a);
  a->kill();
  if (s->remove(a->id)) hub.bus.publish("agent." + a->id + ".kill", path);  // no `new`, no `kill`
  asio::co_spawn(a->ex, s->host->forget(a->id), asio::detached);
}

/// Kills the agent however its request ends (reply, error, Tflush or a closed connection), unless
/// released: a sub-agent always, a persistent agent whose creation did not finish.
class AgentGuard {
 public:
  AgentGuard(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a) : hub_(hub), s_(std::move(s)), a_(std::move(a)) {}
  AgentGuard(const AgentGuard&) = delete;
  AgentGuard& operator=(const AgentGuard&) = delete;
  ~AgentGuard() {
    if (a_) destroy_agent(hub_, s_, a_);
  }
  void release() { a_.reset(); }

 private:
  Hub& hub_;
  std::shared_ptr<Session> s_;
  std::shared_ptr<Agent> a_;
};

/// Waits for a place among the sub-agents of `depth` (one pool per depth: a sub-agent waiting
/// for its own sub-agents never holds the place they need). A flushed request stops waiting.
asio::awaitable<p9::Result<virtfs::Gate::Pass>> subagent_slot(std::shared_ptr<Session> s, int depth, int limit) {
  std::shared_ptr<virtfs::Gate> gate;
  {
    std::lock_guard lock(s->mu);
    auto& g = s->subagent_gates[depth];
    if (!g) g = std::make_shared<virtfs::Gate>();
    gate = g;
  }
  auto pass = co_await gate->enter(static_cast<std::size_t>(std::max(limit, 0)));
  std::lock_guard lock(s->mu);
  if (s->killed) co_return p9::error("session killed");
  co_return std::move(pass);
}

/// Sub-agent mode, steps 3-4: submits the prompt, waits for the end of its turn (or the timeout),
/// not for turns queued after it (a background process's interrupt, a prompt or an inject that
/// came too late for it), and answers that turn's final assistant message exactly.
asio::awaitable<p9::Result<std::string>> run_subagent(std::shared_ptr<Agent> a, std::string prompt, int timeout) {
  Submission work;  // no braced list in a coroutine (GCC 12)
  work.text = std::move(prompt);
  auto end = work.end = std::make_shared<TurnEnd>();
  if (!a->submit(std::move(work))) co_return p9::error("subagent interrupted");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout);
  for (;;) {
    const auto ver = a->idle_signal->version();
    {
      std::lock_guard lock(a->mu);
      if (end->ended) break;
      if (a->killed) co_return p9::error("subagent interrupted");
    }
    if (timeout == 0) {
      co_await a->idle_signal->wait(ver);
      continue;
    }
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= decltype(left)::zero()) co_return p9::error("subagent timeout after " + std::to_string(timeout) + "s");
    co_await a->idle_signal->wait(ver, left);
  }
  std::lock_guard lock(a->mu);
  if (end->interrupted) co_return p9::error("subagent interrupted");
  // A turn that failed (a refusal that kept its text too) is no answer (§4.2).
  if (!end->failure.empty()) co_return p9::error("subagent failed: " + end->failure);
  co_return end->answer;
}

}  // namespace

asio::awaitable<p9::Result<std::string>> new_agent(Hub& hub, std::shared_ptr<Session> s, virtfs::Principal who,
                                                   std::string request) {
  auto kv = parse_agent_request(request);
  if (!kv) co_return kv.error();
  const bool sub = kv->prompt.has_value();
  if (sub && all_blank(*kv->prompt)) co_return p9::error("empty prompt");
  int timeout = 600;
  if (const std::string t = kv->get("timeout"); !t.empty()) {
    if (!sub) co_return p9::error("timeout requires prompt");
    auto n = parse_timeout(t);
    if (!n) co_return p9::error("invalid timeout: " + t);
    timeout = *n;
  }
  const std::string id = new_uuid();
  std::string name = kv->get("name");
  if (name.empty()) name = default_name(id);
  if (!valid_name(name)) co_return p9::error(invalid_name(name));
  if (s->find(name)) co_return p9::error("agent already exists: " + name);
  // The agent that sends the request (null for the hostowner), contained by §4.2's rules.
  auto called_by = new_agent_caller(*s, who, kv->get("parent"));
  if (!called_by) co_return called_by.error();
  const std::shared_ptr<Agent> caller = *called_by;
  // Its write and global calls would wait for the lock that the calling one holds while it waits.
  if (sub && caller && caller->locking_calls > 0)
    co_return p9::error("agent/new: caller holds the session's global tool lock");
  std::shared_ptr<Agent> parent;
  if (const std::string p = kv->get("parent"); !p.empty()) {
    parent = s->find(p);
    if (!parent) co_return p9::error("no such agent: " + p);
  }

  // cwd (§4.3): cwd= → the parent's effective cwd → the caller's → the session's.
  std::string cwd;
  if (!kv->get("cwd").empty()) {
    // An existing directory on the tool host (§4.2): this one for a local session; a remote
    // one's toolsrv answers, here or (for a caller) with the containment below.
    // A remote `~` is the tool host's: its toolsrv's resolve (below) expands it.
    auto d = s->remote.empty() ? check_dir(kv->get("cwd"), hub.env) : check_remote_dir(kv->get("cwd"), true);
    if (!d) co_return d.error();
    cwd = *d;
    if (!caller) {  // the resolved directory is what toolsrv holds (a caller's is resolved below)
      std::vector<std::string> paths{*d, s->cwd};  // named: GCC 12 and co_await temporaries
      auto r = co_await s->host->resolve(id, std::move(paths));
      if (!r) co_return p9::error("agent/new: " + r.ename());
      if (auto st = resolved_dir(r->front(), *d); !st) co_return st.error();
      // The session's cwd, however it is named (a symlink, `..`), is no override.
      cwd = r->front() == r->back() ? s->cwd : r->front();
    }
  } else if (parent) {
    cwd = parent->effective_cwd();
  } else {
    cwd = s->cwd;
  }
  std::string cwd_override = cwd == s->cwd ? std::string() : cwd;
  if (caller) {  // a caller's parent= is itself: the default is its cwd, and it stays inside it
    // Named first: GCC 12 destroys a temporary of a co_await expression twice.
    std::string asked = kv->get("cwd").empty() ? std::string() : cwd;
    auto contained = co_await contained_cwd(s, caller, std::move(asked));
    if (!contained) co_return contained.error();
    cwd_override = *contained;
  }

  // profile (§4.3): agent= → the parent's → default. Read on the blocking pool.
  SettingsInput in;
  std::string profile_name = kv->get("agent");
  std::vector<HistoryMessage> seeded;
  if (parent) {
    std::lock_guard lock(parent->mu);
    if (profile_name.empty()) profile_name = parent->profile.name;
    in.parent_backend = parent->backend_name;
    in.parent_model = parent->model;
    seeded = parent->history;  // §8.10.2: the parent's history at this moment
  }
  if (profile_name.empty()) profile_name = "default";
  // §8.10.2: a copy that ends with an assistant message whose calls lack results (the parent is
  // in the middle of them) loses that message and the results it has so far.
  for (std::size_t i = seeded.size(); i-- > 0;) {
    const auto& m = seeded[i].msg;
    if (m.role == backend::Role::tool) continue;
    if (m.role == backend::Role::assistant && seeded.size() - 1 - i < m.tool_calls.size()) seeded.resize(i);
    break;
  }
  drop_unanswered(seeded);
  auto profile = co_await read_profile(hub, profile_name);
  if (!profile) co_return profile.error();
  if (auto st = check_backend(kv->get("backend")); !st) co_return st.error();
  if (auto st = check_model(kv->get("model")); !st) co_return st.error();
  in.backend = kv->get("backend");
  in.model = kv->get("model");
  in.profile = &*profile;
  {
    std::lock_guard lock(s->mu);
    in.session_backend = s->backend;
    in.session_model = s->model;
  }
  auto choice = resolve_backend_choice(in, hub.conf(), hub.env);
  if (!choice) co_return choice.error();
  // Sub-agent fan-out (doc/engine.md): a depth cap, then a place among that depth's running ones.
  const auto limits = hub.conf().subagents;
  const int depth = sub ? (caller ? caller->depth : 0) + 1 : 0;
  if (sub && depth > limits.depth)
    co_return p9::error("agent/new: sub-agent depth limit reached: " + std::to_string(limits.depth));
  std::optional<virtfs::Gate::Pass> slot;  // held to the end of the request
  if (sub) {
    auto got = co_await subagent_slot(s, depth, limits.running);
    if (!got) co_return got.error();
    slot.emplace(std::move(*got));
  }

  auto a = std::make_shared<Agent>(hub, s, id, s->ex);
  a->subagent = sub;
  a->parent = parent ? parent->id : caller ? caller->id : std::string();
  a->depth = depth;
  if (sub && caller) {  // it spends in its issuer's turn tree, and rolls up into its stats
    a->issuer = caller;
    std::lock_guard lock(caller->mu);
    a->tree = caller->tree;
  }
  if (sub) a->transcript.on_final = nullptr;  // never persisted (§7.7)
  {
    std::lock_guard lock(a->mu);
    a->name = name;
    a->profile = *profile;
    a->backend_name = choice->backend;
    a->model = choice->model;
    a->cwd_override = cwd_override;
    a->history = std::move(seeded);
  }
  if (auto st = a->make_backend(); !st) co_return st.error();
  if (auto st = s->add(a, false); !st) co_return st.error();  // the name is taken, the directory not yet there
  AgentGuard destroy(hub, s, a);  // from now on a flushed creation, and every sub-agent, is undone
  // Held by toolsrv now, and refused when the directory checked above was replaced since (§4.2):
  // the agent would run somewhere else than it shows. The guard undoes the agent.
  if (!cwd_override.empty())
    if (auto st = co_await s->host->check_agent_cwd(id, cwd_override); !st) co_return st.error();
  co_await load_profile_tools(s, a, *profile);
  if (!co_await a->resolve_prompts()) {  // flushed, or its session killed meanwhile (§1.5): undone
    std::lock_guard lock(s->mu);
    co_return p9::error(s->killed ? "session killed" : "interrupted");
  }
  (void)co_await system_prompt(a, s);  // §8.1.1: rendered at creation (it shows the id and name)
  (void)co_await Compaction::context_length(a, Compaction::ask_patience);  // `stats` shows the model's window from the start
  if (!s->show(id)) co_return p9::error("session killed");  // §8.1.1: the directory last
  hub.bus.publish("agent." + id + ".new", agent_path(*s, *a));
  if (sub) co_return co_await run_subagent(a, std::move(*kv->prompt), timeout);
  // Answered only once saved (§7.7): an agent the disk did not take is undone, or the next
  // start would find its files without it and remove them.
  // Flushed meanwhile (§1.5): its client is told nothing, so nothing is made, and the save it
  // had is replaced by one without it.
  p9::Status saved;
  bool flushed = false;
  try {
    saved = co_await save_now(hub, s);
  } catch (const std::system_error&) {
    flushed = true;
  }
  flushed = flushed || (co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none;
  if (flushed) {
    destroy_agent(hub, s, a);
    destroy.release();
    s->save_soon();
    co_return p9::error("interrupted");
  }
  if (!saved) co_return saved.error();
  destroy.release();
  co_return id + "\n";
}

asio::awaitable<p9::Status> submit_goal(Hub& hub, std::shared_ptr<Session> s, std::string text) {
  if (auto st = check_goal(text); !st) co_return st;
  // The next goal write goes on however this one ends (a flush included).
  auto turn = co_await s->goal_gate->enter(1);
  {
    std::lock_guard lock(s->mu);
    if (s->killed) co_return p9::error("session killed");
  }
  auto conductor = s->find("conductor");
  // A sub-agent named so is gone at its request's end, and the goal with it.
  if (conductor && conductor->subagent) co_return p9::error("conductor: not a persistent agent");
  if (!conductor) {
    // As `agent/new name=conductor agent=conductor` of the hostowner (§4.3: the session's cwd).
    // Named first: GCC 12 destroys a temporary of a co_await expression twice.
    virtfs::Principal hostowner{"", "", true};
    std::string request = "name=conductor agent=conductor";
    auto made = co_await new_agent(hub, s, std::move(hostowner), std::move(request));
    conductor = s->find("conductor");
    if (!conductor) co_return p9::error("conductor: " + (made ? std::string("killed at creation") : made.ename()));
  }
  if (auto st = write_goal(*s, text); !st) co_return st;
  if (auto st = co_await save_change(hub, s); !st) co_return st;
  Submission goal;
  goal.text = std::move(text);
  goal.origin = "goal";
  if (!conductor->submit(std::move(goal))) co_return p9::error("conductor: queue full or agent killed");
  co_return p9::Status{};
}

asio::awaitable<p9::Status> save_now(Hub& hub, std::shared_ptr<Session> s) {
  auto save = [s] { return s->save(); };  // named: see off_io
  auto st = co_await off_io<p9::Status>(hub, save);
  if (!st) co_return p9::error("save: " + st.ename());
  co_return st;
}

asio::awaitable<p9::Status> save_change(Hub& hub, std::shared_ptr<Session> s) {
  auto st = co_await save_now(hub, std::move(s));
  if (!st) co_return p9::error(st.ename() + " (the change is made, not saved)");
  co_return st;
}

asio::awaitable<void> kill_session(Hub& hub, std::shared_ptr<Session> s) {
  const std::string name = s->current_name();
  if (!s->kill()) co_return;  // a kill at the same moment published it
  hub.remove(s->id);
  // The files, then the event, on the blocking pool: a save under way may hold them (an fsync),
  // and a flushed `ctl kill` still ends with its event.
  // Named, not a temporary of the co_await expression (GCC 12, see off_io).
  auto remove = [&hub, s, name] {
    s->remove_files();
    hub.bus.publish("session." + s->id + ".kill", "session/" + name);
  };
  co_await off_io<void>(hub, remove);
}

asio::awaitable<void> kill_agent(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a) {
  const std::string path = agent_path(*s, *a);
  a->kill();
  const bool shown = s->remove(a->id);  // false: a concurrent kill was first
  // The save, its files and the event on the blocking pool (a flushed `ctl kill` still ends
  // with them).
  auto remove = [&hub, s, aid = a->id, path, shown] {
    // The mark, the save, the files: a kill -9 between two neither restores the agent without
    // its blocks nor leaves them behind for good (Store::mark_killed).
    if (auto st = hub.store.mark_killed(s->id, aid); !st) spdlog::error("agent {}: mark: {}", aid, st.ename());
    (void)s->save();
    if (auto st = hub.store.remove_agent(s->id, aid); !st) spdlog::error("agent {}: remove: {}", aid, st.ename());
    if (shown) hub.bus.publish("agent." + aid + ".kill", path);
  };
  co_await off_io<void>(hub, remove);
  co_await s->host->forget(a->id);
}

namespace {

// Names, ids, cwds and models are path elements and idx or cfg fields (§1.2, §2.4): a session
// with one that session/new or agent/new would refuse (or never makes: an id not a UUID, an agent
// id another session's agent has, whose uname would own that agent's files) is not served, and
// is left as it is, like any other that fails to load. Values are shown escaped, as
// bypass/pending shows a command.
std::optional<std::string> refused(const SessionRecord& r, const std::set<std::string>& ids_in_use) {
  using bypass::shown;
  if (!looks_like_uuid(r.id)) return "invalid session id: " + shown(r.id);
  if (!valid_name(r.name)) return "invalid session name: " + shown(r.name);
  if (bad_path(r.cwd)) return "cwd: invalid character: " + shown(r.cwd);
  if (!check_model(r.model)) return "invalid model: " + shown(r.model);
  for (const auto& ar : r.agents) {
    if (!looks_like_uuid(ar.id)) return "invalid agent id: " + shown(ar.id);
    if (ids_in_use.contains(ar.id)) return "agent " + ar.id + ": id taken by another session";
    if (!valid_name(ar.name)) return "agent " + ar.id + ": invalid agent name: " + shown(ar.name);
    if (!ar.profile.empty() && !valid_profile_name(ar.profile))
      return "agent " + ar.id + ": invalid profile: " + shown(ar.profile);
    if (!ar.parent.empty() && !looks_like_uuid(ar.parent)) return "agent " + ar.id + ": invalid parent: " + shown(ar.parent);
    if (bad_path(ar.cwd)) return "agent " + ar.id + ": cwd: invalid character: " + shown(ar.cwd);
    if (!check_model(ar.model)) return "agent " + ar.id + ": invalid model: " + shown(ar.model);
  }
  return std::nullopt;
}

}  // namespace

std::size_t restore(Hub& hub) {
  std::vector<std::string> skipped;
  auto loaded = hub.store.load_all(&skipped);
  for (const auto& why : skipped) spdlog::error("restore: session skipped: {}", why);
  std::size_t n = 0;
  std::map<std::string, p9::Result<Profile>> profiles;  // each profile file read once
  std::set<std::string> ids_in_use;                       // the agent ids of the sessions served
  for (auto& l : loaded) {
    auto& r = l.record;
    if (auto why = refused(r, ids_in_use)) {
      spdlog::error("restore: session skipped: {}: {}", r.id, *why);
      continue;
    }
    auto s = std::make_shared<Session>(hub, r.id, r.cwd, r.remote);
    {
      std::lock_guard lock(s->mu);
      s->name = r.name;
      s->remote = r.remote;
      s->backend = r.backend;
      s->model = r.model;
      for (const auto& [k, v] : r.env) {
        if (auto why = env_entry_error(k, v)) spdlog::warn("restore: session {} ({}): env entry dropped: {}", r.name, r.id, *why);
        else s->env[k] = v;
      }
      s->goal = r.goal;
      s->bypass = r.bypass;
      s->bypass_counter = r.bypass_counter;
    }
    s->host->set_env("OLLIE_SESSION_ID", r.id);
    if (!hub.addr.empty()) s->host->set_env("OLLIE_ADDR", hub.addr);
    for (const auto& [k, v] : s->env) s->host->set_env(k, v);
    std::vector<std::shared_ptr<Agent>> agents;
    std::vector<std::pair<std::size_t, std::string>> profile_notes;  // agent index, note
    for (auto& ar : r.agents) {
      auto a = std::make_shared<Agent>(hub, s, ar.id, s->ex);
      const std::string pname = ar.profile.empty() ? "default" : ar.profile;
      auto known = profiles.find(pname);
      if (known == profiles.end()) known = profiles.emplace(pname, load_profile(hub.config_root, pname)).first;
      auto profile = known->second;
      if (!profile) {
        spdlog::warn("restore: agent {}/{} ({}): {}", r.name, ar.name, ar.id, profile.ename());
        // Said in the agent's transcript too (§7.5: warnings are `info` blocks), once restored.
        profile_notes.emplace_back(agents.size(), profile.ename() + ": restored without its prompt entries and autoLoad tools");
        profile = Profile{};
        profile->name = ar.profile;
      }
      const auto& lines = l.blocks[ar.id];
      std::vector<Block> blocks;
      for (const auto& line : lines)
        if (auto b = Block::parse(line)) blocks.push_back(std::move(*b));
      // A turn a kill -9 cut off ends here (§8.14): its cost becomes costLast and joins costSession.
      // The save after this start writes the mark off, so a start that dies before it adds it again
      // to the same saved totals, not twice.
      const double cut_cost = ar.turn ? ar.turn_cost : 0;
      // The mark of a cut turn is taken off by the save after its note: a start that died
      // between the two finds the note already there.
      if (ar.turn && !blocks.empty() && blocks.back().role == "info" && blocks.back().content == interrupted_note)
        ar.turn = false;
      // Above every line, parsed or not: no id of the file is given again (§7.7).
      a->transcript.restore(std::move(blocks), std::max<std::uint64_t>(ar.block_counter, lines.size()));
      std::vector<std::string> want = profile->auto_load;
      for (const auto& t : ar.tools)
        if (std::find(want.begin(), want.end(), t) == want.end()) want.push_back(t);
      {
        std::lock_guard lock(a->mu);
        a->name = ar.name;
        a->parent = ar.parent;
        a->profile = std::move(*profile);
        a->backend_name = ar.backend;
        a->model = ar.model;
        a->cwd_override = ar.cwd;
        // A value a cfg write refuses is not served (a hand-edited file's `"maxTokens": -5`).
        a->overrides = checked_params(ar.params, [&](const std::string& why) {
          spdlog::warn("restore: agent {}/{} ({}): cfg override dropped: {}", r.name, ar.name, ar.id, why);
        });
        a->tools = want;
        a->plan = ar.plan;
        a->peers = ar.peers;
        a->feed = ar.feed;
        a->created = ar.created;
        a->restored_prompt_bytes = ar.system_prompt_bytes;
        a->history = std::move(ar.messages);
        a->stats.totals = ar.usage;
        if (cut_cost > 0) {
          a->stats.totals.cost_last = cut_cost;
          a->stats.totals.cost_session += cut_cost;
        }
      }
      if (auto st = a->make_backend(); !st) spdlog::warn("restore: agent {}/{} ({}): {}", r.name, ar.name, ar.id, st.ename());
      s->host->want_tools(ar.id, want);
      if (!ar.cwd.empty()) s->host->set_agent_cwd(ar.id, ar.cwd);
      if (auto st = s->add(a); !st) {  // the whole session is skipped: a save would lose the agent
        spdlog::error("restore: session skipped: {}: agent {}: {}", r.id, ar.id, st.ename());
        break;
      }
      agents.push_back(a);
    }
    if (agents.size() != r.agents.size()) continue;  // an agent failed: the session is skipped
    {
      std::lock_guard lock(s->mu);
      for (const auto& ar : r.agents)
        if (ar.created > 0) s->created = std::min(s->created, ar.created);
    }
    // Two sessions of one name: a rename's new name is taken by another session before the
    // rename's save, and a kill -9 falls between. The later (by id) is served under its default
    // name, saved so, rather than not at all.
    bool renamed = false;
    if (hub.find(r.name)) {
      const std::string fresh = default_name(r.id);
      renamed = !hub.find(fresh);  // (the hub's lock is never taken under a session's)
      if (renamed) spdlog::warn("restore: session {}: its name {} is another session's: it is {} now", r.id, r.name, fresh);
      std::lock_guard lock(s->mu);
      s->name = fresh;
    }
    if (auto st = hub.add(s); !st) {
      spdlog::error("restore: session {}: {}", r.id, st.ename());
      continue;
    }
    if (renamed)
      if (auto st = s->save(); !st) spdlog::error("restore: session {}: save: {}", r.id, st.ename());
    hub.store.settle(l);  // restored: now its torn last lines and stale temp files may go (§7.7)
    // A turn a kill -9 cut off ended without a word (its calls without results are dropped):
    // its agent's transcript says so, once (the save takes the mark off).
    bool cut_off = false;
    for (std::size_t i = 0; i < agents.size(); i++) {
      if (!r.agents[i].turn) continue;
      agents[i]->note("info", std::string(interrupted_note));
      cut_off = true;
    }
    for (const auto& [i, text] : profile_notes) agents[i]->note("info", text);
    if (cut_off || !profile_notes.empty()) s->save_soon();
    for (const auto& a : agents) ids_in_use.insert(a->id);
    n++;
    hub.bus.publish("session." + r.id + ".new", "session/" + r.name);
    for (const auto& a : agents) hub.bus.publish("agent." + a->id + ".new", agent_path(*s, *a));
  }
  return n;
}

void stop_all(Hub& hub) {
  hub.stopping = true;
  hub.stop_fd.raise();  // prompt entries still running end now
  std::vector<std::shared_ptr<Agent>> stopped;
  for (const auto& s : hub.sessions()) {
    for (const auto& a : s->agents())
      if (a->stop()) stopped.push_back(a);
  }
  // The interrupts end first (§8.9: within 100 ms), so the saves below hold what they keep: the
  // partial text, the turn's cost. Bounded: a turn that does not end is saved as it stands.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (const auto& a : stopped)
    while (a->running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (const auto& s : hub.sessions()) {
    for (const auto& a : s->agents()) report_lost_at_stop(*a);
    (void)s->save();
    s->host->stop();
    for (const auto& a : s->agents()) end_watches(*a);
  }
}

}  // namespace ollie
