#include "ollie.hpp"

#include <cstdlib>
#include <spdlog/spdlog.h>

#include "lib9p/dial.hpp"
#include "lib9p/dirs.hpp"
#include "lib9p/errors.hpp"

namespace acp {
namespace {

/// Largest reply read from olliesrv: its files are a 64 KiB log window, cfg, listings.
constexpr std::size_t max_reply = 16u << 20;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1));
}

asio::awaitable<p9::Result<std::optional<std::string>>> Lines::next() {
  for (;;) {
    if (auto nl = buf_.find('\n'); nl != std::string::npos) {
      std::optional<std::string> line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      co_return line;
    }
    if (buf_.size() > max_stream_line) co_return p9::error("line longer than 64 MiB");
    auto r = co_await fid_.read();
    if (!r) co_return r.error();
    if (r->empty()) {
      std::optional<std::string> eof;
      co_return eof;
    }
    buf_ += *r;
  }
}

bool connection_lost(const std::string& ename) {
  return ename == p9::err::hung_up || ename == p9::err::shutting_down || ename.find("connect") != std::string::npos ||
         ename.find("No such file or directory") != std::string::npos;
}

void Ollie::check(const std::string& ename) {
  if (!connection_lost(ename) || !client_) return;
  spdlog::warn("acp: lost olliesrv ({}): redialing at the next request", ename);
  root_.reset();
  client_->close();
  client_.reset();
}

asio::awaitable<p9::Result<p9::AsyncFid>> Ollie::attach() {
  if (!root_) {
    std::string address = address_;
    // A Unix socket is dialed only through a private directory, as ollie-9p does.
    if (auto a = p9::parse_address(address); a && a->kind == p9::Address::Unix)
      if (auto st = p9::check_private_dir(p9::socket_dir(a->path)); !st) co_return p9::error(address_ + ": " + st.ename());
    auto c = co_await p9::AsyncClient::dial(ex_, address);
    if (!c) co_return p9::error(address_ + ": " + c.ename());
    std::string uname = env("OLLIE_UNAME");
    if (uname.empty()) uname = p9::login_name();
    std::string aname;
    auto afid = co_await (*c)->auth(uname, aname);
    p9::Result<p9::AsyncFid> r = p9::error("not attached");
    if (!afid) {
      if (afid.ename() != p9::err::auth_not_required) co_return p9::error(address_ + ": " + afid.ename());
      r = co_await (*c)->attach(uname, aname);
    } else {
      std::string secret = env("OLLIE_AUTH");
      if (auto w = co_await afid->write(secret); !w) co_return p9::error(address_ + ": " + w.ename());
      r = co_await (*c)->attach(uname, aname, &*afid);
    }
    if (!r) co_return p9::error(address_ + ": " + r.ename());
    client_ = *c;
    root_ = std::make_shared<p9::AsyncFid>(std::move(*r));
    spdlog::info("acp: attached to {} as {}", address_, uname);
  }
  auto root = root_;
  std::string here;
  auto clone = co_await root->walk(here);
  co_return clone;
}

asio::awaitable<p9::Result<p9::AsyncFid>> Ollie::root() {
  auto clone = co_await attach();
  if (clone || !connection_lost(clone.ename()) || !client_) co_return clone;
  // The connection went away while idle (olliesrv restarted): dial again, once.
  check(clone.ename());
  auto again = co_await attach();
  co_return again;
}

asio::awaitable<p9::Result<p9::AsyncFid>> Ollie::open(std::string path, std::uint8_t mode) {
  auto r = co_await root();
  if (!r) co_return r;
  auto f = co_await r->walk(path);
  if (!f) {
    check(f.ename());
    co_return f;
  }
  if (auto st = co_await f->open(mode); !st) {
    check(st.ename());
    co_return st.error();
  }
  co_return f;
}

asio::awaitable<p9::Result<std::string>> Ollie::read(std::string path) {
  auto f = co_await open(path, p9::OREAD);
  if (!f) co_return f.error();
  auto s = co_await f->read_all(max_reply);
  if (!s) check(s.ename());
  co_return s;
}

asio::awaitable<p9::Status> Ollie::write(std::string path, std::string data) {
  auto f = co_await open(path, p9::OWRITE);
  if (!f) co_return f.error();
  if (auto w = co_await f->write(data); !w) {
    check(w.ename());
    co_return w.error();
  }
  auto st = co_await f->clunk();
  if (!st) check(st.ename());
  co_return st;
}

asio::awaitable<p9::Result<std::string>> Ollie::call(std::string path, std::string request) {
  auto r = co_await root();
  if (!r) co_return r.error();
  auto s = co_await r->call(path, request, max_reply);
  if (!s) check(s.ename());
  co_return s;
}

}  // namespace acp
