#pragma once
/// The ACP agent side: the method table and what each method does in olliesrv's namespace.
/// An ACP session is one olliesrv agent, its id `<session id>/<agent id>` (both immutable, so
/// it survives renames and restarts). The bridge keeps only which of them this editor opened
/// and the prompt each one is running; everything else is read from the files when needed.

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "acp/ollie.hpp"
#include "acp/rpc.hpp"
#include "acp/updates.hpp"

namespace acp {

/// The protocol version this bridge speaks (the SDK's PROTOCOL_VERSION).
inline constexpr int protocol_version = 1;

/// A prompt in flight.
struct Turn {
  bool cancelled = false;
  bool started = false;           // its user block appeared, or its `!command` was written: a `ctl stop` now stops it
  std::set<std::string> asked;    // bypass request ids already put to the editor
  std::set<std::string> claimed;  // tool call ids a permission request already named
  Translator translator{""};      // its blocks into updates; knows the calls awaiting their results
};

/// A session this editor opened (session/new or session/load).
struct Live {
  std::string id, sid, aid;
  std::string notice;  // said at the start of the next prompt (the MCP servers it ignored)
  std::shared_ptr<Turn> turn;
  std::string dir() const { return "session/" + sid + "/agent/" + aid + "/"; }
};

class Bridge {
 public:
  Bridge(asio::any_io_executor ex, Rpc& rpc, Ollie& ollie) : ex_(ex), rpc_(rpc), ollie_(ollie) {}
  /// Registers every method with rpc.
  void install();
  /// True while a permission request is in flight (its resolution not yet written to olliesrv).
  bool asking() const { return asking_ > 0; }
  /// The prompts running (each one request in flight, answered when its turn ends).
  std::size_t turns() const;

 private:
  using Method = asio::awaitable<json> (Bridge::*)(json);
  /// A request's method, once the connection is initialized.
  asio::awaitable<json> served(Method m, json params);
  // bridge.cpp: the session lifecycle, modes and models.
  asio::awaitable<json> initialize(json params);
  asio::awaitable<json> new_session(json params);
  asio::awaitable<json> load_session(json params);
  asio::awaitable<json> set_mode(json params);
  asio::awaitable<json> set_config_option(json params);
  asio::awaitable<json> session_state(std::shared_ptr<Live> live);
  asio::awaitable<json> config_options(std::shared_ptr<Live> live);
  // turn.cpp: prompts and their streaming.
  asio::awaitable<json> prompt(json params);
  asio::awaitable<void> cancel(json params);
  asio::awaitable<void> stop_turn(std::shared_ptr<Live> live);
  asio::awaitable<json> command(std::shared_ptr<Live> live, p9::AsyncFid chat, std::set<std::string> old, std::string text);
  // permissions.cpp: the session's bypass requests as permission requests.
  asio::awaitable<void> ask_pending(std::shared_ptr<Live> live);
  asio::awaitable<void> ask(std::shared_ptr<Live> live, std::string session_name, std::string reqid);
  /// Runs ask() on its own, counted in asking_.
  void spawn_ask(std::shared_ptr<Live> live, std::string session_name, std::string reqid);

  /// The live session a request names; -32002 when this editor did not open it.
  std::shared_ptr<Live> find(const json& params);
  /// Sends one session/update of live.
  void update(const Live& live, json u);
  /// The value, or an RpcError with olliesrv's error text.
  template <class T>
  static T need(p9::Result<T> r, const std::string& what);
  static void need(const p9::Status& st, const std::string& what);

  asio::any_io_executor ex_;
  Rpc& rpc_;
  Ollie& ollie_;
  std::map<std::string, std::shared_ptr<Live>> live_;
  int asking_ = 0;
  bool initialized_ = false;  // an initialize was answered
};

/// A value quoted for a request (spec §1.3): in single quotes, a quote doubled.
std::string quote(const std::string& v);
/// The lines of a text, without their newlines; a trailing empty line dropped.
std::vector<std::string> lines(const std::string& text);
/// The string parameter `key` of an ACP request, or -32602.
std::string param(const json& params, const char* key);

template <class T>
T Bridge::need(p9::Result<T> r, const std::string& what) {
  if (!r) {
    const int c = connection_lost(r.ename()) ? code::internal_error : code::invalid_params;
    throw RpcError(c, what + ": " + r.ename());
  }
  return std::move(*r);
}

}  // namespace acp
