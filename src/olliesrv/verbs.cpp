#include "verbs.hpp"

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "agent_cfg.hpp"
#include "backend/config.hpp"
#include "backend/text.hpp"
#include "caches.hpp"
#include "compaction.hpp"
#include "hub.hpp"
#include "ids.hpp"
#include "lifecycle.hpp"
#include "result.hpp"
#include "session.hpp"
#include "settings.hpp"
#include "virtfs/ctl.hpp"

namespace ollie {

namespace {

using Reply = asio::awaitable<p9::Result<std::string>>;

// ---- session ctl (§3.2) ------------------------------------------------------------------------

struct SessionCall {
  Hub& hub;
  std::shared_ptr<Session> s;
};

Reply session_kill(SessionCall& c, const virtfs::Command&) {
  co_await kill_session(c.hub, c.s);
  co_return std::string("killed\n");
}

// The write (temp, fsync, rename) and the wait for a save already under way happen on the
// blocking pool, never on the I/O thread (save_now); a failure is `save: <reason>`.
Reply session_save(SessionCall& c, const virtfs::Command&) {
  if (auto st = co_await save_now(c.hub, c.s); !st) co_return st.error();
  co_return std::string("saved\n");
}

// Re-syncs with toolsrv (§3.2): what a start sends (the cwds resolved again: a directory removed
// and made anew is taken), a rescan, then every agent's prompt entries resolved again (§7.5.1),
// its tool list fetched again and its system prompt rendered again; a running turn serves
// nothing from its result cache after it.
Reply session_invalidate(SessionCall& c, const virtfs::Command&) {
  c.s->drop_results();
  if (auto st = co_await c.s->host->resync(); !st) spdlog::warn("session {}: invalidate: {}", c.s->id, st.ename());
  (void)co_await c.s->host->catalog();  // `tools *` rescans the tool directories
  for (const auto& a : c.s->agents()) {
    co_await a->resolve_prompts();  // marks the prompt due
    (void)co_await system_prompt(a, c.s);
  }
  co_return std::string("ok\n");
}

constexpr virtfs::Verb<Reply (*)(SessionCall&, const virtfs::Command&)> session_verbs[] = {
    {.name = "kill", .run = session_kill},
    {.name = "save", .run = session_save},
    {.name = "invalidate", .run = session_invalidate},
};

// ---- agent ctl (§3.3) --------------------------------------------------------------------------

struct AgentCall {
  Hub& hub;
  std::shared_ptr<Session> s;
  std::shared_ptr<Agent> a;
  bool shown = false;  // the reply is already a block: a `/verb` does not add it again (§3.4)
};

p9::Error running(const virtfs::Command& cmd) { return p9::error("cannot " + cmd.verb + " while agent is running"); }

Reply verb_stop(AgentCall& c, const virtfs::Command&) { co_return std::string(c.a->stop() ? "stopped\n" : "idle\n"); }

// Unlinks the agent's peers on both sides (§8.11: killing either agent removes the link).
void unlink_peers(Session& s, Agent& a) {
  std::vector<std::string> peers;
  {
    std::lock_guard lock(a.mu);
    peers.swap(a.peers);
  }
  for (const auto& id : peers) {
    auto p = s.find(id);
    if (!p) continue;
    std::lock_guard lock(p->mu);
    std::erase(p->peers, a.id);
  }
}

Reply verb_kill(AgentCall& c, const virtfs::Command&) {
  unlink_peers(*c.s, *c.a);
  co_await kill_agent(c.hub, c.s, c.a);
  co_return std::string("killed\n");
}

Reply verb_compact(AgentCall& c, const virtfs::Command& cmd) {
  Hold held(*c.a, true);  // `stop` interrupts the summary's request
  if (!held.ok) co_return running(cmd);
  if (!compactable(*c.a)) co_return std::string("nothing to compact\n");
  auto n = co_await compact(c.a, c.s);
  if (!n) co_return n.error();
  c.shown = true;  // step 7's info block says it
  if (auto st = co_await save_change(c.hub, c.s); !st) co_return st.error();  // the compacted history, before the reply (§7.7)
  co_return "compacted " + std::to_string(*n) + " messages\n";
}

Reply verb_clear(AgentCall& c, const virtfs::Command& cmd) {
  Hold held(*c.a);
  if (!held.ok) co_return running(cmd);
  c.a->clear();
  c.a->note("info", "cleared");
  c.shown = true;
  if (auto st = co_await save_change(c.hub, c.s); !st) co_return st.error();
  co_return std::string("cleared\n");
}

// §8.8: during a turn the pending inject (its `user` block at once); idle, an ordinary prompt.
Reply verb_inject(AgentCall& c, const virtfs::Command& cmd) {
  const std::string text = cmd.args.empty() ? std::string() : cmd.args[0];  // free text: the raw rest (§3)
  if (text.empty()) co_return cmd.usage();
  if (c.a->inject(text)) {
    c.a->transcript.append(make_block("user", text, "inject"));
    co_return std::string("injected\n");
  }
  if (auto st = c.a->submit({text, ""}); !st) co_return st.error();  // §3.3: as a normal prompt
  co_return std::string("submitted\n");
}

Reply verb_agent(AgentCall& c, const virtfs::Command& cmd) {
  if (!cmd.args.empty()) {
    Hold held(*c.a);
    if (!held.ok) co_return running(cmd);
    bool current = false;  // naming the current profile changes nothing (§2.8.3, as `cfg agent=`)
    {
      std::lock_guard lock(c.a->mu);
      current = cmd.args[0] == c.a->profile.name;
    }
    if (!current) {
      auto p = co_await read_profile(c.hub, cmd.args[0]);
      if (!p) co_return p.error();
      if (auto st = co_await apply_change(c.hub, c.s, c.a, profile_switch(*c.a, std::move(*p))); !st) co_return st.error();
    }
  }
  std::lock_guard lock(c.a->mu);
  co_return c.a->profile.name + "\n";
}

Reply verb_model(AgentCall& c, const virtfs::Command& cmd) {
  if (!cmd.args.empty()) {
    if (auto st = check_model(cmd.args[0]); !st) co_return st.error();
    Hold held(*c.a);
    if (!held.ok) co_return running(cmd);
    SettingsChange change;
    {
      std::lock_guard lock(c.a->mu);
      if (cmd.args[0] != c.a->model) change.target = BackendChoice{c.a->backend_name, cmd.args[0]};
    }
    if (auto st = co_await apply_change(c.hub, c.s, c.a, std::move(change)); !st) co_return st.error();
  }
  std::lock_guard lock(c.a->mu);
  co_return c.a->model + "\n";
}

Reply verb_models(AgentCall& c, const virtfs::Command&) {
  std::string b;
  {
    std::lock_guard lock(c.a->mu);
    b = c.a->backend_name;
  }
  auto models = co_await backend_models(c.hub, b);
  if (!models) {
    const std::string e = models.ename();
    co_return p9::error(e.rfind(b + ": ", 0) == 0 ? e : b + ": " + e);
  }
  std::string out;
  for (const auto& m : *models) out += m + "\n";
  co_return out;
}

// The model becomes that backend's default (§7.4); naming the current backend changes nothing.
Reply verb_backend(AgentCall& c, const virtfs::Command& cmd) {
  if (!cmd.args.empty()) {
    if (cmd.args[0].empty()) co_return unknown_backend("");  // `backend ''`: a name is required
    if (auto st = check_backend(cmd.args[0]); !st) co_return st.error();
    Hold held(*c.a);
    if (!held.ok) co_return running(cmd);
    SettingsChange change;
    {
      std::lock_guard lock(c.a->mu);
      if (cmd.args[0] != c.a->backend_name) change.target = BackendChoice{cmd.args[0], ""};
    }
    if (auto st = co_await apply_change(c.hub, c.s, c.a, std::move(change)); !st) co_return st.error();
  }
  std::lock_guard lock(c.a->mu);
  co_return c.a->backend_name + "\n";
}

Reply verb_tools(AgentCall& c, const virtfs::Command&) {
  auto r = co_await c.s->host->tools(c.a->id);
  std::vector<ToolInfo> tools;
  if (r) {
    tools = std::move(*r);
  } else {
    std::lock_guard lock(c.a->mu);
    tools = c.a->last_tools;
  }
  std::sort(tools.begin(), tools.end(), [](const ToolInfo& x, const ToolInfo& y) { return x.name < y.name; });
  std::string out;
  for (const auto& t : tools) out += t.name + "\t" + backend::one_line(t.description) + "\n";
  co_return out;
}

Reply verb_tool_load(AgentCall& c, const virtfs::Command& cmd) {
  // All or nothing (§3.3): refused, or no toolsrv to take them, nothing changes.
  // A name given twice is loaded, and answered, once.
  // Sets, not scans: a request may name a million tools.
  std::vector<std::string> names;
  std::set<std::string_view> seen;
  for (const auto& t : cmd.args)
    if (seen.insert(t).second) names.push_back(t);
  const auto st = co_await c.s->host->load(c.a->id, names);
  if (!st) co_return st.error();
  std::string out;
  {
    std::lock_guard lock(c.a->mu);
    const std::set<std::string> had(c.a->tools.begin(), c.a->tools.end());
    for (const auto& t : names) {
      if (!had.contains(t)) c.a->tools.push_back(t);
      out += t + "\n";
    }
  }
  if (auto st = co_await save_change(c.hub, c.s); !st) co_return st.error();
  co_return out;
}

// `cwd dir` sets the override (checked and set on the tool host), `cwd -` clears it.
Reply verb_cwd(AgentCall& c, const virtfs::Command& cmd) {
  if (!cmd.args.empty()) {
    SettingsChange change;
    if (cmd.args[0] == "-") {
      change.cwd = "";
    } else {
      auto d = cwd_argument(c.hub, *c.s, cmd.args[0]);
      if (!d) co_return d.error();
      change.cwd = *d;
    }
    Hold held(*c.a);
    if (!held.ok) co_return running(cmd);
    if (auto st = co_await apply_change(c.hub, c.s, c.a, std::move(change)); !st) co_return st.error();
  }
  co_return c.a->effective_cwd() + "\n";
}

Reply verb_name(AgentCall& c, const virtfs::Command& cmd) {
  if (!cmd.args.empty()) {
    if (auto st = set_agent_name(c.hub, c.s, c.a, cmd.args[0]); !st) co_return st.error();
    if (auto st = co_await save_change(c.hub, c.s); !st) co_return st.error();
  }
  co_return c.a->current_name() + "\n";
}

Reply verb_systemprompt(AgentCall& c, const virtfs::Command&) {
  std::string text = co_await system_prompt(c.a, c.s);
  if (text.empty() || text.back() != '\n') text += '\n';
  co_return text;
}

// §8.11: both ways, by id (persisted with the session).
Reply verb_peeradd(AgentCall& c, const virtfs::Command& cmd) {
  const std::string& n = cmd.args[0];
  auto p = c.s->find(n);
  if (!p) co_return p9::error("no such agent: " + n);
  if (p == c.a) co_return p9::error("cannot peer with self");
  if (p->subagent) co_return p9::error("not a persistent agent: " + n);
  if (c.a->subagent) co_return p9::error("not a persistent agent: " + c.a->current_name());
  {
    std::scoped_lock lock(c.a->mu, p->mu);
    if (std::find(c.a->peers.begin(), c.a->peers.end(), p->id) != c.a->peers.end())
      co_return p9::error("already peers: " + n);
    c.a->peers.push_back(p->id);
    if (std::find(p->peers.begin(), p->peers.end(), c.a->id) == p->peers.end()) p->peers.push_back(c.a->id);
  }
  if (auto st = co_await save_change(c.hub, c.s); !st) co_return st.error();
  co_return "peer " + p->current_name() + "\n";
}

Reply verb_peerdel(AgentCall& c, const virtfs::Command& cmd) {
  const std::string& n = cmd.args[0];
  auto p = c.s->find(n);
  if (!p || !c.a->linked(p->id)) co_return p9::error("not a peer: " + n);
  {
    std::scoped_lock lock(c.a->mu, p->mu);
    std::erase(c.a->peers, p->id);
    std::erase(p->peers, c.a->id);
  }
  if (auto st = co_await save_change(c.hub, c.s); !st) co_return st.error();
  co_return "unpeered " + p->current_name() + "\n";
}

using virtfs::Idle;
using virtfs::Self;

// The columns of §3.3: Self (the agent's own principal), Idle only.
constexpr virtfs::Verb<Reply (*)(AgentCall&, const virtfs::Command&)> agent_verbs[] = {
    {.name = "stop", .run = verb_stop},
    {.name = "kill", .run = verb_kill},
    {.name = "compact", .idle = Idle::yes, .run = verb_compact},
    {.name = "clear", .idle = Idle::yes, .run = verb_clear},
    {.name = "inject", .synopsis = "<text>", .min_args = 1, .max_args = 1, .free_text = true, .run = verb_inject},
    {.name = "agent", .synopsis = "[profile]", .max_args = 1, .self = Self::query, .idle = Idle::set, .run = verb_agent},
    {.name = "model", .synopsis = "[name]", .max_args = 1, .self = Self::query, .idle = Idle::set, .run = verb_model},
    {.name = "models", .self = Self::yes, .run = verb_models},
    {.name = "backend", .synopsis = "[name]", .max_args = 1, .self = Self::query, .idle = Idle::set, .run = verb_backend},
    {.name = "tools", .self = Self::yes, .run = verb_tools},
    {.name = "tool_load", .synopsis = "<name>...", .min_args = 1, .max_args = virtfs::MANY, .self = Self::yes,
     .run = verb_tool_load},
    {.name = "cwd", .synopsis = "[dir | -]", .max_args = 1, .self = Self::query, .idle = Idle::set, .run = verb_cwd},
    {.name = "name", .synopsis = "[new]", .max_args = 1, .self = Self::query, .run = verb_name},
    {.name = "systemprompt", .self = Self::yes, .run = verb_systemprompt},
    {.name = "peeradd", .synopsis = "<name>", .min_args = 1, .max_args = 1, .run = verb_peeradd},
    {.name = "peerdel", .synopsis = "<name>", .min_args = 1, .max_args = 1, .run = verb_peerdel},
};

// `!command` (§3.4): the agent's shell tool, sandboxed, in its effective cwd; an `exec` block.
// A `stop` cancels it (its proc/new is flushed: toolsrv kills its process group); its block
// then says `interrupted`.
asio::awaitable<void> exec_command(std::shared_ptr<Session> s, std::shared_ptr<Agent> a, std::string command) {
  auto tools = co_await s->host->tools(a->id);
  if (!tools) {  // toolsrv could not say (unavailable, lost): not "not loaded"
    a->note("error", "!: " + tools.ename());
    co_return;
  }
  const auto has_shell = [](const std::vector<ToolInfo>& list) {
    return std::any_of(list.begin(), list.end(), [](const ToolInfo& t) { return t.name == "shell"; });
  };
  if (!has_shell(*tools)) {
    // §3.4's words; with no shell tool to load at all (nothing installed), that advice fails.
    auto all = co_await s->host->catalog();
    const bool there = !all || has_shell(*all);
    a->note("error", there ? "!: shell tool not loaded (use /tool_load shell)"
                           : "!: shell tool not loaded, and none is installed: `./dev.sh install` installs the shipped "
                             "tools (doc/data.md)");
    co_return;
  }
  ToolCallRequest req;
  req.tool = "shell";
  req.agent = a->id;
  req.auth = a->secret;
  req.args = nlohmann::json{{"cmd", command}}.dump();
  // A global-scope call under the path locks (§3.4): §4.2 refuses sub-agents while it runs.
  struct Locking {
    Agent& a;
    explicit Locking(Agent& x) : a(x) { a.locking_calls++; }
    ~Locking() { a.locking_calls--; }
  } locking{*a};
  auto out = co_await s->host->call(std::move(req), ToolHost::For::terminal);
  s->drop_results();  // a global-scope call (§8.3.3), a turn's meanwhile too
  a->transcript.append(make_block("exec", out.text, command));
  a->note_sandbox(out);
}

asio::awaitable<void> run_exec(std::shared_ptr<Session> s, std::shared_ptr<Agent> a, std::string command) {
  try {
    co_await exec_command(s, a, command);
    co_return;
  } catch (const std::system_error& e) {
    if (e.code() != asio::error::operation_aborted) throw;
  }
  a->transcript.append(make_block("exec", "interrupted", command));
}

asio::awaitable<void> run_slash(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a, std::string request) {
  bool shown = false;
  auto r = co_await agent_ctl(hub, s, a, request, false, &shown);
  if (!r) {
    a->note("error", r.ename());
    co_return;
  }
  if (shown) co_return;
  std::string text = *r;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  a->note("info", text);
}

}  // namespace

asio::awaitable<p9::Result<std::string>> session_ctl(Hub& hub, std::shared_ptr<Session> s, std::string request) {
  auto m = virtfs::match(session_verbs, request);
  if (!m) co_return m.error();
  SessionCall c{hub, std::move(s)};
  co_return co_await m->verb->run(c, m->command);
}

asio::awaitable<p9::Result<std::string>> agent_ctl(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a,
                                                   std::string request, bool self, bool* shown) {
  auto m = virtfs::match(agent_verbs, request, virtfs::Caller{self, a->running()});
  if (!m) co_return m.error();
  AgentCall c{hub, std::move(s), std::move(a)};
  auto r = co_await m->verb->run(c, m->command);
  if (shown) *shown = c.shown;
  co_return r;
}

p9::Status write_prompt(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a, std::string text) {
  text = std::string(backend::trim(text));
  if (text.empty()) return {};
  const auto logged = [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      spdlog::error("prompt: {}", x.what());
    }
  };
  if (text.rfind("//", 0) == 0) {
    text.erase(0, 1);
  } else if (text[0] == '/') {
    asio::co_spawn(a->ex, run_slash(hub, s, a, text.substr(1)), logged);
    return {};
  } else if (text[0] == '!') {
    // The command goes to `shell` as JSON and names its `exec` block: UTF-8 (§1.2), as a prompt.
    text = p9::valid_utf8(text);
    auto stop = a->begin_command();
    asio::co_spawn(a->ex, run_exec(s, a, std::string(backend::trim(std::string_view(text).substr(1)))),
                   asio::bind_cancellation_slot(stop->slot(), [a, stop, logged](std::exception_ptr e) {
                     a->end_command(stop);
                     logged(e);
                   }));
    return {};
  }
  return a->submit({text, ""});
}

}  // namespace ollie
