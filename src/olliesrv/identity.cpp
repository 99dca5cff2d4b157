#include "identity.hpp"

#include <fstream>

namespace ollie {

bool has_no_new_privs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("NoNewPrivs:")) return line.find('0') == std::string::npos;
  return true;
}

p9::Status Identity::auth(const std::string& uname, const std::string&) const {
  if (uname == hostowner_) return p9::error(p9::err::auth_not_required);
  return p9::error("unknown user: " + uname);
}

p9::Result<virtfs::Principal> Identity::attach(const virtfs::AttachRequest& r) const {
  if (!r.aname.empty()) return p9::error("no such tree: " + r.aname);
  if (r.uname != hostowner_) return p9::error("unknown user: " + r.uname);
  if (check_peers_ && r.peer.known && has_no_new_privs(r.peer.pid))
    return p9::error("permission denied: sandboxed clients attach as their agent");
  return virtfs::Principal{r.uname, "", true};
}

}  // namespace ollie
