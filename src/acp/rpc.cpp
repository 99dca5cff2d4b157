#include "rpc.hpp"

#include "updates.hpp"

#include <array>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <spdlog/spdlog.h>

namespace acp {
namespace {

json message(const json& id, const std::string& method, json params) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}

json error_reply(int c, const std::string& message) {
  return {{"error", {{"code", c}, {"message", message}}}};
}

}  // namespace

Rpc::Rpc(asio::any_io_executor ex, int in, int out) : ex_(ex), in_(ex, in), out_(ex, out) {}

asio::awaitable<void> Rpc::run() {
  std::string buf;
  bool skipping = false;  // inside a line that was too long: drop it up to its newline
  std::array<char, 65536> chunk;
  for (;;) {
    auto [ec, n] = co_await in_.async_read_some(asio::buffer(chunk), asio::experimental::as_tuple(asio::use_awaitable));
    if (ec) break;
    const std::size_t scanned = buf.size();  // holds no newline: only the new bytes are searched
    buf.append(chunk.data(), n);
    std::size_t start = 0;
    for (std::size_t nl, from = scanned; (nl = buf.find('\n', from)) != std::string::npos; start = from = nl + 1) {
      if (skipping) {
        skipping = false;
        continue;
      }
      // A whole line is bounded as an unterminated rest is (below): its newline may come in the
      // read that took it over the bound.
      if (nl - start > max_line) {
        fail(nullptr, code::parse_error, "message longer than 16 MiB");
        continue;
      }
      dispatch(buf.substr(start, nl - start));
    }
    buf.erase(0, start);
    if (buf.size() > max_line) {
      if (!skipping) fail(nullptr, code::parse_error, "message longer than 16 MiB");
      skipping = true;
      buf.clear();
    }
  }
  if (!skipping && buf.find_first_not_of(" \t\r") != std::string::npos) dispatch(buf);
  // The editor hung up: every request we still wait for fails, and any later one.
  closed_ = true;
  for (auto& [id, h] : pending_) h->set(error_reply(code::internal_error, "editor hung up"));
  pending_.clear();
}

namespace {

// A notification's method sent with an id (ACP's session/cancel, as some editors send it): it
// runs, and the answer is null, rather than that the method does not exist.
asio::awaitable<json> answered_null(Rpc::Notification h, json params) {
  co_await h(std::move(params));
  co_return nullptr;
}

}  // namespace

void Rpc::dispatch(const std::string& line) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  bool deep = false;
  json msg = parse_bounded(line, &deep);
  if (msg.is_discarded())
    return fail(nullptr, code::parse_error,
                deep ? "parse error: nested deeper than " + std::to_string(max_json_depth) + " levels" : "parse error: not JSON");
  if (!msg.is_object()) return fail(nullptr, code::invalid_request, "invalid request: not a JSON-RPC object");
  json id = msg.contains("id") ? msg["id"] : json();
  const bool id_ok = id.is_null() || id.is_string() || id.is_number_integer();
  if (!id_ok) return fail(nullptr, code::invalid_request, "invalid request: bad id");
  if (msg.value("jsonrpc", "") != "2.0") return fail(id, code::invalid_request, "invalid request: jsonrpc must be \"2.0\"");

  if (!msg.contains("method")) {  // a response to one of our requests
    if (!id.is_number_integer() || !pending_.count(id.get<std::int64_t>())) {
      spdlog::warn("acp: response to no request: {}", line.substr(0, 200));
      return;
    }
    auto h = pending_[id.get<std::int64_t>()];
    pending_.erase(id.get<std::int64_t>());
    h->set(std::move(msg));
    return;
  }
  if (!msg["method"].is_string()) return fail(id, code::invalid_request, "invalid request: method must be a string");
  const std::string method = msg["method"].get<std::string>();
  json params = msg.contains("params") ? msg["params"] : json::object();
  if (!params.is_object() && !params.is_array()) return fail(id, code::invalid_request, "invalid request: bad params");

  if (!msg.contains("id")) {  // a notification: never answered
    auto it = notifications_.find(method);
    if (it == notifications_.end()) {
      spdlog::info("acp: notification {} ignored", method);
      return;
    }
    notifying_++;
    asio::co_spawn(ex_, it->second(std::move(params)), [this, method](std::exception_ptr e) {
      notifying_--;
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        spdlog::warn("acp: {}: {}", method, x.what());
      }
    });
    return;
  }
  auto it = requests_.find(method);
  auto as_notification = notifications_.find(method);
  if (it == requests_.end() && as_notification == notifications_.end())
    return fail(id, code::method_not_found, "method not found: " + method);
  // Counted until answered: the end of stdin waits for it (main.cpp).
  const std::uint64_t n = ++handled_;
  handling_[n] = id;
  auto run = it != requests_.end() ? it->second(std::move(params)) : answered_null(as_notification->second, std::move(params));
  asio::co_spawn(ex_, std::move(run), [this, n, id, method](std::exception_ptr e, json result) {
    if (!handling_.erase(n)) return;  // abandoned: already answered
    if (!e) return answer(id, std::move(result));
    try {
      std::rethrow_exception(e);
    } catch (const RpcError& x) {
      fail(id, x.code, x.what());
    } catch (const std::exception& x) {
      spdlog::warn("acp: {}: {}", method, x.what());
      fail(id, code::internal_error, x.what());
    }
  });
}

void Rpc::abandon(const std::string& why) {
  for (const auto& [n, id] : handling_) fail(id, code::internal_error, why);
  handling_.clear();
}

void Rpc::answer(const json& id, json result) {
  send({{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
}

void Rpc::fail(const json& id, int c, const std::string& message) {
  send({{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", c}, {"message", message}}}});
}

void Rpc::notify(const std::string& method, json params) {
  send({{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}});
}

asio::awaitable<json> Rpc::request(const std::string& method, json params) {
  if (closed_) throw RpcError(code::internal_error, "editor hung up");
  const std::int64_t id = ++next_id_;
  auto h = std::make_shared<p9::Handoff<json>>();
  pending_[id] = h;
  send(message(id, method, std::move(params)));
  json reply;
  try {
    reply = co_await h->get();
  } catch (...) {
    pending_.erase(id);
    throw;
  }
  if (reply.contains("error")) {
    const json& e = reply["error"];
    const int c = e.is_object() && e.contains("code") && e["code"].is_number_integer() ? e["code"].get<int>() : code::internal_error;
    const std::string m = e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : "error";
    throw RpcError(c, m);
  }
  co_return reply.contains("result") ? reply["result"] : json();
}

void Rpc::send(const json& msg) {
  std::string line = msg.dump(-1, ' ', false, json::error_handler_t::replace);
  line += '\n';
  backlog_bytes_ += line.size();
  if (backlog_bytes_ > max_backlog) {
    spdlog::error("acp: the editor does not read its output ({} bytes waiting): giving up", backlog_bytes_);
    std::_Exit(1);
  }
  backlog_.push_back(std::move(line));
  pump();
}

void Rpc::pump() {
  if (writing_ || backlog_.empty()) return;
  writing_ = true;
  asio::async_write(out_, asio::buffer(backlog_.front()), [this](std::error_code ec, std::size_t) {
    writing_ = false;
    if (ec) {
      spdlog::error("acp: stdout: {}", ec.message());
      std::_Exit(1);
    }
    backlog_bytes_ -= backlog_.front().size();
    backlog_.pop_front();
    pump();
  });
}

}  // namespace acp
