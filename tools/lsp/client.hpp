#pragma once
/// The tool's side of the bridge: find the bridge for a server and project root through its
/// socket in $TMPDIR/lsp, start it when there is none (under a lock file, so concurrent first
/// calls start one), replace it when its socket is stale, and exchange one request.

#include "rpc.hpp"
#include "servers.hpp"

namespace lsp {

/// Sends `request` (see bridge.hpp) to the bridge of `server` at `root`; returns its response
/// object. A response with `error` → tool::Error with that text.
json ask_bridge(const Server& server, const std::string& root, const json& request);

}  // namespace lsp
