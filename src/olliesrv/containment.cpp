#include "containment.hpp"

#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>
#include <climits>
#include <cstdlib>

#include "hub.hpp"
#include "session.hpp"

namespace ollie {

namespace {

/// The path with `..` and symlinks resolved; empty when it does not resolve.
std::string resolved(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

bool at_or_below(const std::string& path, const std::string& base) {
  if (path == base || base == "/") return true;
  return path.size() > base.size() && path.compare(0, base.size(), base) == 0 && path[base.size()] == '/';
}

struct Resolved {
  std::string own, want, session;
};

}  // namespace

p9::Result<std::shared_ptr<Agent>> new_agent_caller(const Session& s, const virtfs::Principal& who, const std::string& parent) {
  if (who.hostowner) return std::shared_ptr<Agent>();
  auto caller = s.find(who.uname);
  if (!caller || caller->id != who.uname) return p9::error("permission denied: agent/new of another session");
  if (!parent.empty())
    if (auto p = s.find(parent); p && p != caller) return p9::error("permission denied: parent must be the caller");
  return caller;
}

asio::awaitable<p9::Result<std::string>> contained_cwd(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> caller,
                                                       std::string cwd) {
  const std::string own = caller->effective_cwd();
  const std::string want = cwd.empty() ? own : cwd;
  // realpath reads the file system: on the blocking pool, never on an I/O thread. A named
  // lambda, not a temporary inside the co_await (GCC 12).
  auto resolve = [own, want, session = s->cwd]() -> asio::awaitable<Resolved> {
    co_return Resolved{resolved(own), resolved(want), resolved(session)};
  };
  const Resolved r = co_await asio::co_spawn(hub.blocking, resolve, asio::use_awaitable);
  if (r.want.empty()) co_return p9::error("cwd: " + want + ": not a directory");
  if (r.own.empty() || !at_or_below(r.want, r.own)) co_return p9::error("permission denied: cwd outside " + own);
  co_return r.want == r.session ? std::string() : r.want;
}

}  // namespace ollie
