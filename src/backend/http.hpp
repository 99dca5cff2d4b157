#pragma once
/// The HTTP engine: libcurl's multi-socket interface driven by Asio. A loop (a curl multi, its
/// sockets and timers) lives on an io_context; a transfer runs on the loop of the thread that
/// starts it, so the agent that asks for a response gets its bytes on its own thread, without a
/// hand-over. Handlers run on that loop's thread and must not block.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace asio {
class io_context;
}

namespace ollie::backend {

/// One HTTP request.
struct HttpRequest {
  std::string method = "POST";
  std::string url;
  std::vector<std::string> headers;  ///< "Name: value"
  std::string body;
  std::chrono::milliseconds connect_timeout{30'000};
  std::chrono::milliseconds idle_timeout{300'000};  ///< without a byte from the server
  std::chrono::milliseconds deadline{0};  ///< the whole transfer, 0: none (non-streamed requests)
  std::size_t max_body = 0;               ///< body bytes accepted, 0: any (non-streamed requests)
};

/// Status line and headers of a response (header names in lower case).
struct HttpHead {
  long status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  /// The value of header `lower_name`, "" when absent.
  std::string_view header(std::string_view lower_name) const;
};

/// How a transfer ended.
struct TransferEnd {
  enum class Kind {
    complete,
    connect_timeout,
    idle_timeout,
    deadline,   ///< HttpRequest::deadline passed before the last byte
    too_large,  ///< the body grew past HttpRequest::max_body
    handler,    ///< a handler threw; the transfer was aborted
    network,
  };
  Kind kind = Kind::complete;
  std::string message;  ///< what went wrong ("" when complete)
};

/// Callbacks of one transfer, all on the engine thread. on_head runs once before any body;
/// on_end runs exactly once unless the transfer is cancelled. An exception thrown by one never
/// reaches libcurl: it aborts the transfer, which ends with Kind::handler (an exception from
/// on_end itself is logged).
struct TransferHandler {
  std::function<void(const HttpHead&)> on_head;
  std::function<void(std::string_view)> on_body;
  std::function<void(const TransferEnd&)> on_end;
};

/// A whole (non-streamed) response.
struct HttpResponse {
  HttpHead head;
  std::string body;
  TransferEnd end;
};

using TransferId = std::uint64_t;

/// A handler that gathers the whole response and hands it to `done` at the end.
TransferHandler collect(std::function<void(HttpResponse)> done);

class HttpEngine {
 public:
  /// One loop on an io_context and a thread of its own (tests, and programs without I/O threads).
  HttpEngine();
  /// A loop on each of `contexts`, each run by one thread the caller owns (see shutdown()).
  explicit HttpEngine(const std::vector<asio::io_context*>& contexts);
  ~HttpEngine();
  HttpEngine(const HttpEngine&) = delete;
  HttpEngine& operator=(const HttpEngine&) = delete;

  /// Queues a transfer on the loop of the calling thread (any other thread: the loops in turn);
  /// callable from any thread, handlers included.
  TransferId start(HttpRequest req, TransferHandler handler);

  /// Removes a transfer. After it returns no callback of that transfer runs (when called from a
  /// handler, none runs after the handler returns). A thread that runs no loop waits for the
  /// transfer's loop; another loop's thread does not (two loops would wait for each other), so
  /// there a callback already on its way may still run.
  void cancel(TransferId id);

  /// Runs a request to completion, blocking the caller (never call it on a loop's thread).
  HttpResponse fetch(HttpRequest req);

  /// Ends every fetch() waiting now, and makes later ones return at once, with an error: a
  /// shutdown's first step, so that the threads blocked in fetches (a body that trickles in)
  /// are free for the rest of it. Streamed transfers go on until shutdown().
  void stop_fetches();

  /// Drops every transfer without callbacks and lets go of the loops' sockets and timers; start(),
  /// cancel() and fetch() return at once afterwards. Call it from a thread that runs no loop: a
  /// loop whose thread still runs closes there (posted: it is its context's last work, so the
  /// thread can run out of work), one whose context stopped closes here. Call it again once the
  /// threads have ended, before their contexts are destroyed. The destructor calls it.
  void shutdown();

  struct Transfer;
  struct Loop;

 private:
  /// The loop the calling thread runs, nullptr when it runs none.
  Loop* here() const;

  std::unique_ptr<asio::io_context> own_io_;  // HttpEngine(): the context of its own thread
  std::vector<std::unique_ptr<Loop>> loops_;
  std::unique_ptr<std::thread> own_thread_;
  std::atomic<std::size_t> next_loop_{0};
  std::atomic<TransferId> next_id_{1};
  std::mutex fetches_mu_;
  std::set<TransferId> fetches_;  // the fetches waiting now
  bool fetches_stopped_ = false;
};

}  // namespace ollie::backend
