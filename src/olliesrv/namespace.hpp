#pragma once
/// The olliesrv namespace: one declaration, like devcons's consdir[] (spec §2).

#include "virtfs/dsl.hpp"

namespace ollie {

class Olliesrv;
class Session;
class Agent;

/// What every handler sees: the server and the principal of the fid.
struct Ctx {
  Olliesrv* srv = nullptr;
  virtfs::Principal who;
  std::shared_ptr<Session> session;  ///< inside session/{session}/
  std::shared_ptr<Agent> agent;      ///< inside …/agent/{agent}/
};

virtfs::Node<Ctx> declare();

}  // namespace ollie
