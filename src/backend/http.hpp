#pragma once
/// The HTTP engine: one thread drives every transfer with curl_multi_poll; curl_multi_wakeup
/// brings it back at once to add or cancel a transfer. Handlers run on that thread and must
/// not block (the agent loop posts what it receives to its own strand).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

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
  /// Starts the engine thread.
  HttpEngine();
  /// Stops the thread; transfers still running are dropped without callbacks.
  ~HttpEngine();
  HttpEngine(const HttpEngine&) = delete;
  HttpEngine& operator=(const HttpEngine&) = delete;

  /// Queues a transfer and wakes the engine; callable from any thread, handlers included.
  TransferId start(HttpRequest req, TransferHandler handler);

  /// Removes a transfer at once. After it returns no callback of that transfer runs (when
  /// called from a handler on the engine thread, none runs after the handler returns).
  void cancel(TransferId id);

  /// Runs a request to completion, blocking the caller (never call it on the engine thread).
  HttpResponse fetch(HttpRequest req);

  /// True on the engine thread.
  bool on_engine_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

  struct Transfer;

 private:
  void run();
  void add_pending();
  void finish(Transfer& t, TransferEnd end);
  void remove(TransferId id);

  void* multi_ = nullptr;  // CURLM*
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Transfer>> to_add_;
  std::vector<TransferId> to_cancel_;
  std::uint64_t pass_ = 0;   // completed loop passes, for cancel()'s wait
  bool stopping_ = false;
  TransferId next_id_ = 1;
  std::unordered_map<TransferId, std::unique_ptr<Transfer>> active_;  // engine thread only
  std::thread thread_;
};

}  // namespace ollie::backend
