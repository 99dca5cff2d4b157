#include "identity.hpp"

#include <spdlog/spdlog.h>

#include "ids.hpp"

namespace ollie {

p9::Status Identity::auth(const std::string& uname, const std::string&) const {
  if (uname == hostowner_) return p9::error(p9::err::auth_not_required);
  if (agent_key && agent_key(uname)) return {};
  return p9::error("unknown user: " + uname);
}

p9::Result<virtfs::Principal> Identity::attach(const virtfs::AttachRequest& r) const {
  if (!r.aname.empty()) return p9::error("no such tree: " + r.aname);
  // Only forwarded sockets have a listener tag; one whose session is gone admits no one ("-").
  std::string via;
  if (r.peer.listener) via = forwarded_session ? forwarded_session(r.peer.listener) : std::string();
  if (r.peer.listener && via.empty()) via = "-";
  if (!via.empty() || r.uname != hostowner_) {
    auto key = agent_key ? agent_key(r.uname) : std::nullopt;
    if (!key || (!via.empty() && key->session != via)) return p9::error("unknown user: " + r.uname);
    if (!r.has_afid) return p9::error(p9::err::auth_required);
    std::string presented = r.secret;
    while (!presented.empty() && (presented.back() == '\n' || presented.back() == '\r')) presented.pop_back();
    // An afid made for another uname holds no secret of this agent.
    if (r.afid_uname != r.uname || !same_secret(presented, key->secret)) {
      spdlog::warn("attach as agent {} (pid {}): authentication failed", r.uname, r.peer.pid);
      return p9::error(p9::err::auth_failed);
    }
    return virtfs::Principal{r.uname, key->group, false};
  }
  if (check_peers_ && r.peer.known && r.peer.no_new_privs)
    return p9::error("permission denied: sandboxed clients attach as their agent");
  return virtfs::Principal{r.uname, "", true};
}

}  // namespace ollie
