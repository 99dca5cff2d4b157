#pragma once
/// The toolsrv namespace (spec §6.2): one declaration over a Session, served by virtfs.

#include <memory>

#include "toolsrv/session.hpp"
#include "virtfs/dsl.hpp"

namespace toolsrv {

/// What every handler sees: the session, and inside proc/{pid}/ the process.
struct Ctx {
  Session* session = nullptr;
  std::shared_ptr<Process> proc;
};

/// The tree of §6.2; virtfs::build() validates it.
virtfs::Node<Ctx> declare();

}  // namespace toolsrv
