#pragma once
/// The olliesrv namespace: one declaration, like devcons's consdir[] (spec §2).

#include "virtfs/dsl.hpp"

namespace ollie {

class Olliesrv;

/// What every handler sees: the server and the principal of the fid.
struct Ctx {
  Olliesrv* srv = nullptr;
  virtfs::Principal who;
};

virtfs::Node<Ctx> declare();

}  // namespace ollie
