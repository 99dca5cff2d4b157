#pragma once
/// The sandbox policy of sandbox.yaml and .ollie-sandbox.yaml (spec §7.3.1), parsed with yaml-cpp.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib9p/result.hpp"

namespace toolsrv {

using p9::Result;

/// The network section: TCP ports only, by Landlock (ABI >= 4).
struct NetworkPolicy {
  bool enabled = true;
  bool unrestricted = true;
  std::vector<std::uint16_t> bind_tcp;
  std::vector<std::uint16_t> connect_tcp;

  /// True when the policy restricts TCP at all (needs Landlock ABI 4): `enabled: false` (no TCP
  /// bind or connect, whatever `unrestricted` says) or `unrestricted: false` (listed ports only).
  bool restricts() const { return !enabled || !unrestricted; }

  bool operator==(const NetworkPolicy&) const = default;
};

/// The effective policy of a call, every default applied.
struct Policy {
  bool best_effort = false;
  std::string log_level;
  std::vector<std::string> ro, rox, rw, rwx;  ///< path templates (§7.3.2), not yet expanded
  NetworkPolicy network;
  std::vector<std::string> env;  ///< variables passed from toolsrv's environment
  /// Pathname Unix sockets, or directories of them (beneath), that tools may connect and send
  /// to (path templates); {OLLIE_ADDR}'s socket is always added. Empty = no other socket.
  std::vector<std::string> unix_sockets;
  bool ldd = false;
  bool add_exec = false;
};

/// One policy file as written: scalars it does not set stay empty, so an override replaces only
/// what it names (§7.3.3).
struct PolicyFile {
  std::optional<bool> best_effort;
  std::optional<std::string> log_level;
  std::vector<std::string> ro, rox, rw, rwx;
  std::optional<bool> net_enabled, net_unrestricted;
  std::vector<std::uint16_t> bind_tcp, connect_tcp;
  std::vector<std::string> env;
  std::vector<std::string> unix_sockets;
  std::optional<bool> ldd, add_exec;
};

/// Parses the YAML text of a policy file. Errors name the key or the line:
/// `line 3: filesystem.ro: expected a list of strings`, `unknown key: filesystem.rox2`.
Result<PolicyFile> parse_policy(std::string_view text);

/// Reads and parses a file; a missing or unreadable file is an error (never "no rules"). The
/// error text does not name the file: the caller prefixes it (`sandbox.yaml: <error>`).
Result<PolicyFile> load_policy(const std::string& path);

/// load_policy for a file read on every call: the bytes are read each time (an edit takes effect
/// at the next call) and parsed again only when they changed; an unchanged file gives the same
/// object again. Thread-safe.
class PolicyLoader {
 public:
  Result<std::shared_ptr<const PolicyFile>> load(const std::string& path);

 private:
  std::mutex mu_;
  std::string path_, text_;
  std::optional<Result<std::shared_ptr<const PolicyFile>>> parsed_;
};

/// The global file with an optional approved project override merged in: lists are unioned
/// (order kept, duplicates dropped), scalars present in the override replace the global value.
Policy effective_policy(const PolicyFile& global, const PolicyFile* project);

}  // namespace toolsrv
