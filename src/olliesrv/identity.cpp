#include "identity.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>

#include "ids.hpp"

namespace ollie {

namespace {

/// A failed agent attach is logged at most once a second, with the number not logged since: a
/// tool that tries secret after secret wrote 40,000 lines in 7 s.
void warn_auth_failed(const std::string& uname, pid_t pid) {
  static std::atomic<std::int64_t> last_ms{-1000};
  static std::atomic<std::uint64_t> unsaid{0};
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::int64_t prev = last_ms.load();
  if (now - prev < 1000 || !last_ms.compare_exchange_strong(prev, now)) {
    unsaid++;
    return;
  }
  if (const auto n = unsaid.exchange(0))
    spdlog::warn("attach as agent {} (pid {}): authentication failed ({} more failed attaches not logged)", uname, pid, n);
  else
    spdlog::warn("attach as agent {} (pid {}): authentication failed", uname, pid);
}

}  // namespace

std::string Identity::forwarded(const p9::Peer& peer) const {
  // Only forwarded sockets have a listener tag; one whose session is gone admits no one ("-").
  if (!peer.listener) return {};
  std::string via = forwarded_session ? forwarded_session(peer.listener) : std::string();
  return via.empty() ? "-" : via;
}

p9::Status Identity::auth(const std::string& uname, const std::string&, const p9::Peer& peer) const {
  const std::string via = forwarded(peer);
  if (via.empty() && uname == hostowner_) return p9::error(p9::err::auth_not_required);
  // An agent of another session is as unknown here as at attach: a remote tool learns nothing.
  if (auto key = agent_key ? agent_key(uname) : std::nullopt; key && (via.empty() || key->session == via)) return {};
  return p9::error("unknown user: " + uname);
}

p9::Result<virtfs::Principal> Identity::attach(const virtfs::AttachRequest& r) const {
  if (!r.aname.empty()) return p9::error("no such tree: " + r.aname);
  const std::string via = forwarded(r.peer);
  if (!via.empty() || r.uname != hostowner_) {
    auto key = agent_key ? agent_key(r.uname) : std::nullopt;
    if (!key || (!via.empty() && key->session != via)) return p9::error("unknown user: " + r.uname);
    if (!r.has_afid) return p9::error(p9::err::auth_required);
    std::string presented = r.secret;
    while (!presented.empty() && (presented.back() == '\n' || presented.back() == '\r')) presented.pop_back();
    // An afid made for another uname holds no secret of this agent.
    if (r.afid_uname != r.uname || !same_secret(presented, key->secret)) {
      warn_auth_failed(r.uname, r.peer.pid);
      return p9::error(p9::err::auth_failed);
    }
    return virtfs::Principal{r.uname, key->group, false};
  }
  if (check_peers_ && r.peer.known && r.peer.no_new_privs)
    return p9::error("permission denied: sandboxed clients attach as their agent");
  return virtfs::Principal{r.uname, "", true};
}

}  // namespace ollie
