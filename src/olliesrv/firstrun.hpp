#pragma once
/// What a newcomer sees first: with no backend configured and no ollama answering at its URL,
/// one warning line saying so and how to fix it, instead of a first prompt that fails.

#include <optional>
#include <string>

#include "hub.hpp"

namespace ollie {

/// The warning for this configuration, or nullopt when a backend is configured or ollama
/// answers. Blocks for up to a second on the probe: call it off the I/O threads.
std::optional<std::string> first_run_warning(Hub& hub);

}  // namespace ollie
