#pragma once
/// Who may attach to olliesrv (spec §1.5): the hostowner, by login name and without
/// authentication, never from a process that runs with no_new_privs (every sandboxed tool).

#include <string>

#include "virtfs/serve.hpp"

namespace ollie {

/// Whether a process runs with no_new_privs; a status that cannot be read counts as yes.
bool has_no_new_privs(pid_t pid);

class Identity {
 public:
  /// hostowner: the login name olliesrv runs as. check_peers is false when olliesrv itself
  /// runs with no_new_privs (then every peer inherits it and the check cannot tell).
  Identity(std::string hostowner, bool check_peers) : hostowner_(std::move(hostowner)), check_peers_(check_peers) {}

  const std::string& hostowner() const { return hostowner_; }
  p9::Status auth(const std::string& uname, const std::string& aname) const;
  p9::Result<virtfs::Principal> attach(const virtfs::AttachRequest& r) const;

 private:
  std::string hostowner_;
  bool check_peers_;
};

}  // namespace ollie
