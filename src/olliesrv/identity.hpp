#pragma once
/// Who may attach to olliesrv (spec §1.5): the hostowner, by login name and without
/// authentication, never from a process that runs with no_new_privs (every sandboxed tool);
/// an agent by its id, through Tauth with its secret. A connection through a remote session's
/// forwarded socket (§6.11) may attach only as an agent of that session.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "virtfs/serve.hpp"

namespace ollie {

class Identity {
 public:
  /// hostowner: the login name olliesrv runs as. check_peers is false when olliesrv itself
  /// runs with no_new_privs (then every peer inherits it and the check cannot tell).
  Identity(std::string hostowner, bool check_peers) : hostowner_(std::move(hostowner)), check_peers_(check_peers) {}

  /// The secret of the agent whose id is `uname` (nullopt when no such agent exists), and its
  /// group (`agent` or `subagent`): agents attach as themselves through Tauth (§1.5).
  struct AgentKey {
    std::string secret, group, session;
  };
  std::function<std::optional<AgentKey>(const std::string& uname)> agent_key;
  /// The session whose forwarded socket has the listener tag `tag` (p9::Peer::listener; only
  /// those sockets have a tag), "" once that session is gone.
  std::function<std::string(std::uint64_t tag)> forwarded_session;

  const std::string& hostowner() const { return hostowner_; }
  /// Tauth: what attach would accept from this peer (a forwarded socket: its session's agents).
  p9::Status auth(const std::string& uname, const std::string& aname, const p9::Peer& peer) const;
  p9::Result<virtfs::Principal> attach(const virtfs::AttachRequest& r) const;

 private:
  /// The session a forwarded socket admits ("-" once it is gone); "" for the others.
  std::string forwarded(const p9::Peer& peer) const;

  std::string hostowner_;
  bool check_peers_;
};

}  // namespace ollie
