// ollie-acp: the Agent Client Protocol bridge. An editor starts it as its agent and speaks
// JSON-RPC on its stdin and stdout; it speaks 9P to olliesrv. Logs go to stderr.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "acp/bridge.hpp"
#include "acp/ollie.hpp"
#include "acp/rpc.hpp"
#include "lib9p/stdfds.hpp"

namespace {

const char* usage =
    "usage: ollie-acp [-a address] [-l level]\n"
    "The Agent Client Protocol bridge: an editor (Zed, Emacs agent-shell, ...) runs it as its agent\n"
    "and speaks JSON-RPC 2.0 on its stdin and stdout; it drives olliesrv over 9P.\n"
    "-a address: olliesrv's dial string; default $OLLIE_ADDR, else ollie (the namespace directory).\n"
    "-l level: log level on stderr (trace, debug, info, warn, error); default $OLLIE_LOG, else warn.\n";

// Serves until the editor closes stdin, then finishes what it read before, 30 s at most: every
// request is answered, but a prompt whose turn is running is not waited for (the turn goes on in
// olliesrv, as it would with the editor gone; the prompt is answered with an error saying so).
// The permission requests in flight failed with the editor gone: their denials are written to
// olliesrv, else the bypass requests would stay pending. Then the output is written, and it stops.
asio::awaitable<void> serve(acp::Rpc& rpc, acp::Bridge& bridge, asio::io_context& io) {
  co_await rpc.run();
  asio::steady_timer t(io);
  const auto pause = [&]() -> asio::awaitable<void> {
    t.expires_after(std::chrono::milliseconds(10));
    co_await t.async_wait(asio::use_awaitable);
  };
  for (int i = 0; i < 3000 && (rpc.handling() > bridge.turns() || bridge.asking()); i++) co_await pause();
  rpc.abandon("ollie-acp: stdin ended: the bridge stops following this prompt (its turn goes on in olliesrv)");
  for (int i = 0; i < 500 && !rpc.flushed(); i++) co_await pause();
  io.stop();
}

}  // namespace

int main(int argc, char** argv) {
  p9::fill_standard_fds();  // its 9P connection may not become the editor's stdout
  std::string address = std::getenv("OLLIE_ADDR") ? std::getenv("OLLIE_ADDR") : "";
  std::string level = std::getenv("OLLIE_LOG") ? std::getenv("OLLIE_LOG") : "warn";
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if ((a == "-a" || a == "-l") && i + 1 < argc) {
      (a == "-a" ? address : level) = argv[++i];
    } else {
      std::fputs(usage, a == "-h" || a == "--help" ? stdout : stderr);
      return a == "-h" || a == "--help" ? 0 : 1;
    }
  }
  if (address.empty()) address = "ollie";
  spdlog::set_default_logger(spdlog::stderr_color_mt("ollie-acp"));
  spdlog::set_level(spdlog::level::from_str(level));
  std::signal(SIGPIPE, SIG_IGN);

  // stdout is the protocol's alone: the bridge writes to a copy of it, and fd 1 becomes stderr
  // so that nothing else (a library's stray print) can reach the editor.
  const int in = ::dup(0), out = ::dup(1);
  if (in < 0 || out < 0 || ::dup2(2, 1) < 0) {
    std::fprintf(stderr, "ollie-acp: dup: %s\n", std::strerror(errno));
    return 1;
  }
  asio::io_context io(1);
  acp::Rpc rpc(io.get_executor(), in, out);
  acp::Ollie ollie(io.get_executor(), address);
  acp::Bridge bridge(io.get_executor(), rpc, ollie);
  bridge.install();
  asio::co_spawn(io, serve(rpc, bridge, io), asio::detached);
  io.run();
  return 0;
}
