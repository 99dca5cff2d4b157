#pragma once
/// The bridge: a daemon per session, language server and project root that keeps the server warm
/// between tool calls (spec §6.6: a tool's process group dies with the call, so the bridge leaves
/// it with setsid). It listens on a Unix socket in $TMPDIR; each connection carries one JSON
/// request line and gets one JSON response line:
///
///   {"op":"request","path":<abs>,"method":<LSP method>,"params":{…},"ready":true}
///     → {"result":<LSP result>,"pid":<bridge pid>[,"note":"…"]} | {"error":"…","pid":…}
///   {"op":"sync","paths":[<abs>…]}  (files changed on disk: open or refresh them) → {"pid":…}
///
/// The bridge opens `path` in the server (didOpen, or didChange when its mtime or size changed),
/// and with `ready` waits, bounded, for the server to have built the file and finished its
/// background index. A server that died is restarted at the next request. The bridge exits after
/// `idle` seconds without a request, on SIGTERM, when its socket is removed or replaced, or when
/// its owner ends: the process that ran the call which started it (toolsrv, so a stopped olliesrv
/// leaves no bridge or language server behind).

#include <string>

#include "servers.hpp"

namespace lsp {

/// Where one bridge lives: all under $TMPDIR/lsp/.
struct Place {
  std::string dir;    ///< $TMPDIR/lsp
  std::string key;    ///< hash of server and root
  std::string sock() const { return dir + "/" + key + ".sock"; }
  std::string lock() const { return dir + "/" + key + ".lock"; }
  std::string pid() const { return dir + "/" + key + ".pid"; }
  std::string state() const { return dir + "/" + key; }  ///< the server's compile database, index, log
};

struct BridgeConfig {
  Server server;
  std::string root;
  Place place;
  int idle = 600;  ///< seconds without a request before the bridge exits
};

/// Runs the bridge on the listening socket `listener` (bound to place.sock()) until the process
/// behind the pidfd `owner` ends (-1: no owner); never returns.
[[noreturn]] void run_bridge(const BridgeConfig& config, int listener, int owner);

}  // namespace lsp
