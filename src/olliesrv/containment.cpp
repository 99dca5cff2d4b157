#include "containment.hpp"

#include "ids.hpp"
#include "session.hpp"
#include "toolhost.hpp"

namespace ollie {

bool at_or_below(const std::string& path, const std::string& base) {
  if (path == base || base == "/") return true;
  return path.size() > base.size() && path.compare(0, base.size(), base) == 0 && path[base.size()] == '/';
}

p9::Result<std::shared_ptr<Agent>> new_agent_caller(const Session& s, const virtfs::Principal& who, const std::string& parent) {
  if (who.hostowner) return std::shared_ptr<Agent>();
  auto caller = s.find(who.uname);
  if (!caller || caller->id != who.uname) return p9::error("permission denied: agent/new of another session");
  if (!parent.empty())
    if (auto p = s.find(parent); p && p != caller) return p9::error("permission denied: parent must be the caller");
  return caller;
}

asio::awaitable<p9::Result<std::string>> contained_cwd(std::shared_ptr<Session> s, std::shared_ptr<Agent> caller,
                                                       std::string cwd) {
  const std::string own = caller->effective_cwd();
  const std::string want = cwd.empty() ? own : cwd;
  // Resolved where the tools run (§4.2): by the session's toolsrv, local or remote. The caller's
  // own is `.` of its tools, the directory toolsrv holds for it: its name may have been swapped
  // for a symlink since (a tool of another agent can write where it lies), the held one not.
  std::vector<std::string> paths{".", cwd.empty() ? "." : cwd, s->cwd};  // named: GCC 12 and co_await temporaries
  auto r = co_await s->host->resolve(caller->id, std::move(paths));
  if (!r) co_return p9::error("agent/new: " + r.ename());
  const std::string &real_own = (*r)[0], &real_want = (*r)[1], &real_session = (*r)[2];
  if (auto st = resolved_dir(real_want, want); !st) co_return st.error();
  if (real_own.empty() || !at_or_below(real_want, real_own)) co_return p9::error("permission denied: cwd outside " + own);
  co_return real_want == real_session ? std::string() : real_want;
}

}  // namespace ollie
