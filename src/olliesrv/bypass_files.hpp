#pragma once
/// The bypass files of the namespace (spec §2.3, §2.5): `/bypass/` (policy, pending/{session})
/// and a session's `bypass`, declared here and placed by namespace.cpp's declaration.

#include "namespace.hpp"

namespace ollie {

/// `/bypass/`: `policy` and `pending/{session}` (hostowner only, by their modes).
virtfs::Node<Ctx> bypass_dir();
/// `session/{session}/bypass`: the session's policy.
virtfs::Node<Ctx> session_bypass_file();

}  // namespace ollie
