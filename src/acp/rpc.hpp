#pragma once
/// JSON-RPC 2.0 over the bridge's stdio, framed as ACP frames it: one JSON message per line.
/// Requests and notifications from the editor go to the handlers of a method table, each in a
/// coroutine of its own (a prompt runs while its cancel arrives); requests to the editor
/// (`session/request_permission`) await its response. Malformed input is answered with a
/// JSON-RPC error and the bridge reads on. stdout carries nothing else.

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "lib9p/handoff.hpp"

namespace acp {

using json = nlohmann::json;

/// JSON-RPC error codes (the ACP schema's ErrorCode).
namespace code {
inline constexpr int parse_error = -32700, invalid_request = -32600, method_not_found = -32601,
                     invalid_params = -32602, internal_error = -32603, not_found = -32002;
}

/// A handler's failure, answered as that JSON-RPC error.
struct RpcError : std::runtime_error {
  RpcError(int c, const std::string& m) : std::runtime_error(m), code(c) {}
  int code;
};

/// Largest message line accepted from the editor; a longer one is answered with a parse error.
inline constexpr std::size_t max_line = 16 * 1024 * 1024;
/// Largest backlog of output the editor has not read; beyond it the bridge gives up (exit).
inline constexpr std::size_t max_backlog = 64 * 1024 * 1024;

class Rpc {
 public:
  using Request = std::function<asio::awaitable<json>(json params)>;
  using Notification = std::function<asio::awaitable<void>(json params)>;

  Rpc(asio::any_io_executor ex, int in, int out);

  void on_request(std::string method, Request h) { requests_[std::move(method)] = std::move(h); }
  void on_notification(std::string method, Notification h) { notifications_[std::move(method)] = std::move(h); }

  /// Reads and dispatches messages until stdin ends.
  asio::awaitable<void> run();
  /// Sends a notification.
  void notify(const std::string& method, json params);
  /// Sends a request and awaits its result; an error response throws RpcError, as does a
  /// request after stdin's end (nothing could answer it).
  asio::awaitable<json> request(const std::string& method, json params);
  /// True when all output has been written.
  bool flushed() const { return !writing_ && backlog_.empty(); }
  /// The requests and notifications read whose handlers have not ended.
  std::size_t handling() const { return handling_.size() + notifying_; }
  /// Answers every request still being handled with an internal error saying why; their
  /// handlers' own answers, should they end later, are dropped. For the end of stdin: the
  /// prompts not waited for are answered all the same.
  void abandon(const std::string& why);

 private:
  void dispatch(const std::string& line);
  void answer(const json& id, json result);
  void fail(const json& id, int code, const std::string& message);
  void send(const json& msg);
  void pump();

  asio::any_io_executor ex_;
  asio::posix::stream_descriptor in_, out_;
  std::map<std::string, Request> requests_;
  std::map<std::string, Notification> notifications_;
  std::map<std::int64_t, std::shared_ptr<p9::Handoff<json>>> pending_;  // our requests by id
  std::int64_t next_id_ = 0;
  std::map<std::uint64_t, json> handling_;  // the editor's requests being handled: their ids, by our count
  std::uint64_t handled_ = 0;
  std::size_t notifying_ = 0;  // notification handlers running
  bool closed_ = false;        // stdin ended
  std::deque<std::string> backlog_;
  std::size_t backlog_bytes_ = 0;
  bool writing_ = false;
};

}  // namespace acp
