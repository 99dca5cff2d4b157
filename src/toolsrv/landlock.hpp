#pragma once
/// Native Landlock (spec §7.3.2): ABI negotiation, the ruleset built in toolsrv before fork, and
/// the one async-signal-safe call the forked child makes. Follows the order of the kernel's
/// samples/landlock/sandboxer.c: ABI, drop what it lacks, create, add rules, no_new_privs,
/// restrict_self.

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lib9p/result.hpp"
#include "toolsrv/fd.hpp"
#include "toolsrv/sandbox.hpp"

namespace toolsrv {

/// The newest Landlock ABI this toolsrv knows (7: Linux 6.15).
inline constexpr int landlock_abi_known = 7;

/// The ABI that adds LANDLOCK_ACCESS_FS_RESOLVE_UNIX (9: Linux 7.1), the right that governs
/// connect and send to pathname Unix sockets. Below it, toolsrv's seccomp filter does (unixsock.hpp).
inline constexpr int landlock_abi_resolve_unix = 9;

/// The running kernel's Landlock ABI (0 = none or disabled); asked once.
int landlock_abi();

/// Whether `abi` mediates pathname Unix sockets (the `sock` rules of the `unix` list).
bool landlock_resolves_unix(int abi);

/// Why there is no Landlock and what to do about it (empty when there is).
std::string landlock_missing_reason();

/// With best_effort off, the `sandbox unavailable: ...` reason when `abi` cannot enforce `plan`:
/// no Landlock, ABI < 3 (truncate), or a restricted network below ABI 4. nullopt = enforceable.
std::optional<std::string> sandbox_unavailable(const SandboxPlan& plan, int abi);

/// Builds the ruleset for `plan` on `abi` (> 0): handled rights of that ABI, one path-beneath rule
/// per path (opened O_PATH|O_CLOEXEC now, so symlinks resolve now, or the rule's held descriptor;
/// files get only file rights), TCP port rules from ABI 4, abstract-socket and signal scoping from
/// ABI 6. A path that no longer opens the file its rule recorded (PathRule::dev, ino) is granted
/// nothing. `as_planned`, when given, is set to whether every rule was granted as planned.
p9::Result<UniqueFd> build_ruleset(const SandboxPlan& plan, int abi, bool* as_planned = nullptr);

/// Rulesets kept open for reuse. A ruleset depends only on its plan's rules (paths, access and
/// the files they resolved to), the network section and the ABI; a plan equal in all of these
/// to an earlier one gets that earlier ruleset instead of a new one (about four system calls per
/// path saved). The plan is made fresh for every call (every path stat'ed), so a path that
/// appeared, vanished or now resolves to another file (an edit by rename, a retargeted symlink)
/// gives a new plan and a new ruleset, exactly as building per call would. A ruleset is never
/// changed once built; each landlock_restrict_self() on it makes a new domain, so calls sharing
/// one still get a domain each (§7.3.2). Thread-safe.
class RulesetCache {
 public:
  /// At most this many rulesets stay open (one per recent cwd, override and policy version).
  static constexpr std::size_t capacity = 8;

  /// The ruleset for `plan` on `abi` (> 0), built by build_ruleset when no kept one matches.
  p9::Result<std::shared_ptr<const UniqueFd>> get(const SandboxPlan& plan, int abi);
  /// How many rulesets were built (misses), for tests.
  std::size_t built() const;

 private:
  struct Entry {
    std::vector<PathRule> rules;
    NetworkPolicy network;
    int abi = 0;
    std::shared_ptr<const UniqueFd> ruleset;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // most recently used first
  std::size_t built_ = 0;
};

/// In the forked child, after PR_SET_NO_NEW_PRIVS: enforces the ruleset. Async-signal-safe.
/// Returns 0 or an errno value.
int landlock_restrict_self(int ruleset_fd) noexcept;

}  // namespace toolsrv
