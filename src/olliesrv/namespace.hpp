#pragma once
/// The olliesrv namespace: one declaration, like devcons's consdir[] (spec §2).

#include "virtfs/dsl.hpp"

namespace ollie {

class Olliesrv;
class Session;
class Agent;
struct BgProc;

/// What every handler sees: the server and the principal of the fid.
struct Ctx {
  Olliesrv* srv = nullptr;
  virtfs::Principal who;
  std::shared_ptr<Session> session;  ///< inside session/{session}/
  std::shared_ptr<Agent> agent;      ///< inside …/agent/{agent}/
  std::shared_ptr<Agent> peer;       ///< …/peer/{agent}: the linked peer
  std::shared_ptr<BgProc> proc;      ///< inside …/proc/{pid}/
  /// An agent principal's own agent (§1.1: a principal is an agent that exists), from its attach.
  std::weak_ptr<Agent> me;
};

/// `session killed` / `agent killed` for a gone object (§1.5), else ok; `agent killed` too for
/// every fid of an agent principal whose agent is gone (a process that outlived it keeps none
/// of its rights).
p9::Status gone(const Ctx& c);

/// The sessions by name, and one by name or id, for a `{session}` directory (session/, bypass/pending/).
std::vector<std::string> session_names(Ctx& c);
std::optional<virtfs::Instance<Ctx>> session_lookup(const Ctx& c, const std::string& key);

/// A write or wstat rename whose change the session persists (§7.7): `f`, then, when it took,
/// session.json written before the reply, so kill -9 after the reply cannot lose it.
virtfs::WriteCoFn<Ctx> saved(std::function<p9::Status(Ctx&, std::string)> f);

/// The stat times of a file whose last change its session or agent records (§1.5).
virtfs::MtimeFn<Ctx> changed_at(std::int64_t Session::*when);
virtfs::MtimeFn<Ctx> changed_at(std::int64_t Agent::*when);

/// The owner of an agent's files: the agent itself (§1.6).
std::string agent_owner(const Ctx& c);

virtfs::Node<Ctx> declare();

}  // namespace ollie
