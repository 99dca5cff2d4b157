#pragma once
/// The root files of the olliesrv tree (spec §2.1) and root `ctl` (§3.1): backends, models,
/// agents, tools, help and ctl. generate.hpp has complete and generate.

#include <asio/awaitable.hpp>
#include <vector>

#include "namespace.hpp"

namespace ollie {

struct Hub;

/// backends, models, agents, tools, help and ctl, in the order of spec §2's tree.
std::vector<virtfs::Node<Ctx>> root_files();

/// Root `ctl invalidate`: re-reads backends.conf, drops the caches of the root files and gives
/// every agent a fresh backend (its model list and context lengths are asked again, with the
/// new backends.conf), on the hub's blocking pool.
asio::awaitable<void> invalidate(Hub& hub);

}  // namespace ollie
