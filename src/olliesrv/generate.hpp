#pragma once
/// The root `generate` and `complete` files (spec §2.2): one LLM request each, without tools or
/// history, through the hub's HTTP engine, counted in no agent's stats.

#include <vector>

#include "namespace.hpp"

namespace ollie {

/// complete and generate, in the order of spec §2's tree.
std::vector<virtfs::Node<Ctx>> generate_files();

}  // namespace ollie
