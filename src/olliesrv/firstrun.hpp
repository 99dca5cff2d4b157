#pragma once
/// What a newcomer sees first: with no backend configured, one warning line saying so and how to
/// fix it (naming ollama when one answers at its URL), instead of an agent/new that fails; with a
/// default backend that cannot be used (unknown, its key missing), one line with agent/new's
/// error; with no tools installed, one line saying agents will have none and how to install them.

#include <string>
#include <vector>

#include "hub.hpp"

namespace ollie {

/// The warnings for this configuration (none when a default backend is configured and tools are
/// installed). Blocks for up to a second on the probe of ollama: call it off the I/O threads.
std::vector<std::string> first_run_warnings(Hub& hub);

}  // namespace ollie
