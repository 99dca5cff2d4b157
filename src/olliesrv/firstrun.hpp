#pragma once
/// What a newcomer sees first: with no backend configured, one warning line saying so and how to
/// fix it (naming ollama when one answers at its URL), instead of an agent/new that fails.

#include <optional>
#include <string>

#include "hub.hpp"

namespace ollie {

/// The warning for this configuration, or nullopt when a default backend is configured. Blocks
/// for up to a second on the probe of ollama: call it off the I/O threads.
std::optional<std::string> first_run_warning(Hub& hub);

}  // namespace ollie
