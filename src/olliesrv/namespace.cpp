#include "namespace.hpp"

#include "agent_cfg.hpp"
#include "agent_files.hpp"
#include "backend/text.hpp"
#include "bypass_files.hpp"
#include "compaction.hpp"
#include "generate.hpp"
#include "hub.hpp"
#include "ids.hpp"
#include "lifecycle.hpp"
#include "olliesrv.hpp"
#include "root.hpp"
#include "session.hpp"
#include "session_files.hpp"
#include "verbs.hpp"
#include "virtfs/ctl.hpp"

namespace ollie {

namespace {

using D = virtfs::Dsl<Ctx>;
using Reply = asio::awaitable<p9::Result<std::string>>;
using Text = p9::Result<std::string>;

}  // namespace

// ---- objects gone under an open fid (§1.5) -----------------------------------------------------

p9::Status gone(const Ctx& c) {
  if (!c.who.hostowner) {
    auto me = c.me.lock();
    if (!me) return p9::error("agent killed");
    std::lock_guard lock(me->mu);
    if (me->killed) return p9::error("agent killed");
  }
  if (c.session) {
    std::lock_guard lock(c.session->mu);
    if (c.session->killed) return p9::error(c.agent ? "agent killed" : "session killed");
  }
  if (c.agent) {
    std::lock_guard lock(c.agent->mu);
    if (c.agent->killed) return p9::error("agent killed");
  }
  return {};
}

virtfs::WriteCoFn<Ctx> saved(std::function<p9::Status(Ctx&, std::string)> f) {
  return [f = std::move(f)](Ctx& c, std::string text) -> asio::awaitable<p9::Status> {
    const p9::Status st = f(c, std::move(text));
    if (!st) co_return st;
    co_return co_await save_change(c.srv->hub(), c.session);  // answered once saved (§7.7)
  };
}

std::vector<std::string> session_names(Ctx& c) {
  std::vector<std::string> out;
  for (const auto& s : c.srv->hub().sessions()) out.push_back(s->current_name());
  return out;
}

std::optional<virtfs::Instance<Ctx>> session_lookup(const Ctx& c, const std::string& key) {
  auto s = c.srv->hub().find(key);
  if (!s) return std::nullopt;
  Ctx child = c;
  child.session = s;
  return virtfs::Instance<Ctx>{std::move(child), s, s->id};
}

namespace {

/// A handler that answers `session killed` / `agent killed` for a gone object: for statewait, whose
/// reads call it again after waiting (the server checks every other operation first, Access::gone).
template <class F>
auto alive(F f) {
  return [f](Ctx& c) -> Text {
    if (auto st = gone(c); !st) return st.error();
    return f(c);
  };
}

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

// ---- session/ (§2.4) ---------------------------------------------------------------------------

std::string session_idx(Ctx& c) {
  std::string out;
  for (const auto& s : c.srv->hub().sessions()) {
    const auto agents = s->agents().size();
    std::lock_guard lock(s->mu);
    out += s->name + "\t" + s->id + "\t" + s->cwd + "\t" + or_dash(s->remote) + "\t" + or_dash(s->backend) + "\t" +
           or_dash(s->model) + "\t" + std::to_string(agents) + "\n";
  }
  return out;
}

Reply session_new(Ctx& c, std::string request) { co_return co_await new_session(c.srv->hub(), std::move(request)); }

p9::Status rename_session(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) return st;
  const std::string n(backend::trim(text));
  if (!valid_name(n)) return p9::error(invalid_name(n));
  const std::string old = c.session->current_name();
  if (old == n) return {};
  if (auto st = c.srv->hub().rename(c.session, n); !st) return st;
  c.srv->hub().bus.publish("session." + c.session->id + ".rename", "session/" + old + " session/" + n);
  for (const auto& a : c.session->agents()) {  // the Environment section names the session (§7.6)
    std::lock_guard lock(a->mu);
    a->render_due = true;
  }
  return {};
}

Reply session_ctl_file(Ctx& c, std::string request) {
  if (auto st = gone(c); !st) co_return st.error();
  co_return co_await session_ctl(c.srv->hub(), c.session, std::move(request));
}

// ---- session/{session}/agent/ (§2.6) -------------------------------------------------------------

std::string agent_idx(Ctx& c) {
  std::string out;
  for (const auto& a : c.session->agents()) {
    const std::string state = a->state(), cwd = a->effective_cwd();
    std::lock_guard lock(a->mu);
    out += a->name + "\t" + a->id + "\t" + state + "\t" + or_dash(a->profile.name) + "\t" + or_dash(a->backend_name) + "\t" +
           or_dash(a->model) + "\t" + cwd + "\t" + or_dash(a->parent) + "\n";
  }
  return out;
}

std::vector<std::string> agent_names(Ctx& c) {
  std::vector<std::string> out;
  for (const auto& a : c.session->agents()) out.push_back(a->current_name());
  return out;
}

std::optional<virtfs::Instance<Ctx>> agent_lookup(const Ctx& c, const std::string& key) {
  auto a = c.session->find(key);
  if (!a) return std::nullopt;
  Ctx child = c;
  child.agent = a;
  return virtfs::Instance<Ctx>{std::move(child), a, a->id};
}

// §8.13: stored as written (never rewritten by the workflow), and submitted to `conductor`.
asio::awaitable<p9::Status> set_goal(Ctx& c, std::string text) {
  co_return co_await submit_goal(c.srv->hub(), c.session, std::move(text));
}

Reply agent_new(Ctx& c, std::string request) {
  if (auto st = gone(c); !st) co_return st.error();
  co_return co_await new_agent(c.srv->hub(), c.session, c.who, std::move(request));
}

// ---- session/{session}/agent/{agent}/ (§2.7) -----------------------------------------------------

p9::Status rename_agent(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) return st;
  const std::string n(backend::trim(text));
  return set_agent_name(c.srv->hub(), c.session, c.agent, n);
}

Reply agent_ctl_file(Ctx& c, std::string request) {
  if (auto st = gone(c); !st) co_return st.error();
  const bool self = !c.who.hostowner && c.who.uname == c.agent->id;
  co_return co_await agent_ctl(c.srv->hub(), c.session, c.agent, std::move(request), self);
}

p9::Status prompt(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) return st;
  return write_prompt(c.srv->hub(), c.session, c.agent, std::move(text));
}

Reply block(Ctx& c, std::string request) {
  if (auto st = gone(c); !st) co_return st.error();
  const std::string id(backend::trim(request));
  if (id.size() != 8 || id.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    co_return p9::error("invalid block id: " + id);
  auto found = c.agent->transcript.find(id);
  if (!found) co_return p9::error("block not found: " + id);
  co_return found->json() + "\n";
}

std::uint32_t log_vers(const Ctx& c) { return c.agent->transcript.version(); }
std::int64_t log_mtime(const Ctx& c) { return c.agent->transcript.changed_at(); }
}  // namespace

std::string agent_owner(const Ctx& c) { return c.agent->id; }

virtfs::MtimeFn<Ctx> changed_at(std::int64_t Session::*when) {
  return [when](const Ctx& c) {
    std::lock_guard lock(c.session->mu);
    return (*c.session).*when;
  };
}

virtfs::MtimeFn<Ctx> changed_at(std::int64_t Agent::*when) {
  return [when](const Ctx& c) {
    std::lock_guard lock(c.agent->mu);
    return (*c.agent).*when;
  };
}

virtfs::Node<Ctx> declare() {
  using namespace virtfs;
  auto agent_dir = D::Template(
      "{agent}", Mode{0555}, Doc{"an agent, by name or id"}, List(agent_names), Lookup(agent_lookup),
      Rename(saved(rename_agent), [](const Ctx& c) { return c.agent->current_name(); }),
      Mtime([](const Ctx& c) {
        std::lock_guard lock(c.agent->mu);
        return c.agent->created;
      }),
      D::Leaf("id", Mode{0444}, Doc{"the immutable agent id"}, Read([](Ctx& c) { return Text(c.agent->id + "\n"); })),
      D::Leaf("name", Mode{0644}, Doc{"the agent's name; write to rename"},
              Read([](Ctx& c) { return Text(c.agent->current_name() + "\n"); }), Write(saved(rename_agent)),
              Mtime(changed_at(&Agent::name_changed))),
      D::Leaf("ctl", Mode{0600}, Owner(agent_owner), Doc{"agent control; verbs: stop kill compact clear inject agent model models backend tools tool_load cwd name systemprompt peeradd peerdel"},
              Rdwr(agent_ctl_file)),
      D::Leaf("cfg", Mode{0644}, Doc{"the effective configuration, key=value; write key=value tokens to change it (idle only)"},
              Read([](Ctx& c) { return Text(c.agent->cfg_text()); }),
              Write([](Ctx& c, std::string text) -> asio::awaitable<p9::Status> {
                if (auto st = gone(c); !st) co_return st;
                co_return co_await write_cfg(c.srv->hub(), c.session, c.agent, std::move(text));
              }),
              Mtime(changed_at(&Agent::cfg_changed))),
      D::Leaf("prompt", Mode{0200}, Doc{"submit a prompt; /verb and !cmd run at once"}, Write(prompt)),
      fifo_file(), feed_file(),
      D::Leaf("statewait", Mode{0444}, Doc{"the state when it changes; the current state every 5 s"},
              Read(alive([](Ctx& c) { return Text(c.agent->state() + "\n"); })),  // the 5 s heartbeat
              BlockOnce(alive([](Ctx& c) { return Text(c.agent->state() + "\n"); }),
                        [](Ctx& c) { return c.agent->state_signal(); }),
              Vers([](const Ctx& c) { return static_cast<std::uint32_t>(c.agent->state_signal()->version()); }),
              Mtime([](const Ctx& c) {
                std::lock_guard lock(c.agent->mu);
                return c.agent->state_changed;
              })),
      D::Leaf("stats", Mode{0444}, Doc{"usage, context and cost, key=value"},
              Read([](Ctx& c) -> Reply {
                // A restored agent's window is not asked at the restore (no network for 10,000
                // sessions): its first read asks, so contextLength is never the unknown 128000 of
                // a model whose window is known (§8.5.1). A read is not held by a provider that
                // does not answer: after 2 s it shows 128000, and the answer from then on.
                (void)co_await Compaction::context_length(c.agent, Compaction::ask_patience);
                co_return Text(c.agent->stats_text());
              })),
      D::Leaf("chat", Mode{0440}, Doc{"the rendered transcript: the last 64 KiB, then live, token by token"},
              Stream([](Ctx& c) -> p9::Result<std::shared_ptr<Cursor>> { return c.agent->transcript.chat(); }),
              Vers(log_vers), Mtime(log_mtime)),
      D::Leaf("chat.raw", Mode{0440}, Doc{"JSONL: every finalized block, then live partial and finalized blocks"},
              Stream([](Ctx& c) -> p9::Result<std::shared_ptr<Cursor>> { return c.agent->transcript.chat_raw(); }),
              Vers(log_vers), Mtime(log_mtime)),
      D::Leaf("log", Mode{0440}, Doc{"the last 64 KiB of the rendered transcript"},
              Read([](Ctx& c) { return Text(c.agent->transcript.log()); }), Vers(log_vers), Mtime(log_mtime),
              Length([](const Ctx& c) -> std::uint64_t { return c.agent->transcript.log().size(); })),
      D::Leaf("log.raw", Mode{0440}, Doc{"JSONL of every finalized block"},
              Read([](Ctx& c) { return Text(c.agent->transcript.log_raw()); }), Vers(log_vers), Mtime(log_mtime),
              Length([](const Ctx& c) -> std::uint64_t { return c.agent->transcript.log_raw_size(); })),
      D::Leaf("block", Mode{0660}, Doc{"write a block id, read that block as JSON"}, Rdwr(block)),
      plan_file(), peer_dir(), proc_dir());

  auto session_dir = D::Template(
      "{session}", Mode{0555}, Doc{"a session, by name or id"}, List(session_names), Lookup(session_lookup),
      Rename(saved(rename_session), [](const Ctx& c) { return c.session->current_name(); }),
      Mtime([](const Ctx& c) {
        std::lock_guard lock(c.session->mu);
        return c.session->created;
      }),
      D::Leaf("id", Mode{0444}, Doc{"the immutable session id"}, Read([](Ctx& c) { return Text(c.session->id + "\n"); })),
      D::Leaf("name", Mode{0644}, Doc{"the session's name; write to rename"},
              Read([](Ctx& c) { return Text(c.session->current_name() + "\n"); }), Write(saved(rename_session)),
              Mtime(changed_at(&Session::name_changed))),
      D::Leaf("ctl", Mode{0600}, Doc{"session control; verbs: kill save invalidate"}, Rdwr(session_ctl_file)),
      D::Leaf("env", Mode{0600}, Doc{"the tools' environment additions, KEY=VALUE; write KEY=VALUE tokens, KEY= unsets"},
              Read([](Ctx& c) { return Text(read_env(*c.session)); }),
              Write(saved([](Ctx& c, std::string text) { return write_env(*c.session, text); })),
              Mtime(changed_at(&Session::env_changed))),
      D::Leaf("goal", Mode{0644}, Doc{"the session's goal, exactly as last written; a write sets it and submits it to the agent conductor"},
              Read([](Ctx& c) { return Text(read_goal(*c.session)); }),
              Write(set_goal), Mtime(changed_at(&Session::goal_changed))),
      session_bypass_file(),
      D::Dir("agent", Mode{0555}, Doc{"the session's agents"},
             D::Leaf("new", Mode{0666}, Doc{"create an agent: name= cwd= agent= backend= model= parent=; reply: its id; with timeout= prompt=<rest>: a sub-agent's answer"},
                     Rdwr(agent_new)),
             D::Leaf("idx", Mode{0444}, Doc{"name id state profile backend model cwd parent, one agent per line"},
                     Read([](Ctx& c) { return Text(agent_idx(c)); })),
             std::move(agent_dir)));

  return D::Dir("/", Mode{0555}, Doc{"the olliesrv namespace"}, root_files(),
      D::Leaf("event", Mode{0666}, Doc{"events from open on, one per line; write topic patterns first to filter"},
              StreamRdwr([](Ctx& c) -> p9::Result<std::shared_ptr<Cursor>> {
                auto s = c.srv->bus().subscribe(c.who.uname, c.who.hostowner);
                if (!s) return s.error();
                return std::shared_ptr<Cursor>(std::move(*s));
              })),
      generate_files(), bypass_dir(),
      D::Dir("session", Mode{0555}, Doc{"the sessions"},
             D::Leaf("new", Mode{0600}, Doc{"create a session: cwd= (required) name= backend= model= remote=; reply: its id"},
                     Rdwr(session_new)),
             D::Leaf("idx", Mode{0444}, Doc{"name id cwd remote backend model agents, one session per line"},
                     Read([](Ctx& c) { return Text(session_idx(c)); })),
             std::move(session_dir)));
}

}  // namespace ollie
