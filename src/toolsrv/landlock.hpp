#pragma once
/// Native Landlock (spec §7.3.2): ABI negotiation, the ruleset built in toolsrv before fork, and
/// the one async-signal-safe call the forked child makes. Follows the order of the kernel's
/// samples/landlock/sandboxer.c: ABI, drop what it lacks, create, add rules, no_new_privs,
/// restrict_self.

#include <optional>
#include <string>

#include "lib9p/result.hpp"
#include "toolsrv/fd.hpp"
#include "toolsrv/sandbox.hpp"

namespace toolsrv {

/// The newest Landlock ABI this toolsrv knows (7: Linux 6.15).
inline constexpr int landlock_abi_known = 7;

/// The running kernel's Landlock ABI (0 = none or disabled); asked once.
int landlock_abi();

/// Why there is no Landlock and what to do about it (empty when there is).
std::string landlock_missing_reason();

/// With best_effort off, the `sandbox unavailable: ...` reason when `abi` cannot enforce `plan`:
/// no Landlock, ABI < 3 (truncate), or a restricted network below ABI 4. nullopt = enforceable.
std::optional<std::string> sandbox_unavailable(const SandboxPlan& plan, int abi);

/// Builds the ruleset for `plan` on `abi` (> 0): handled rights of that ABI, one path-beneath rule
/// per path (opened O_PATH|O_CLOEXEC now, so symlinks resolve now; files get only file rights),
/// TCP port rules from ABI 4, abstract-socket and signal scoping from ABI 6.
p9::Result<UniqueFd> build_ruleset(const SandboxPlan& plan, int abi);

/// In the forked child, after PR_SET_NO_NEW_PRIVS: enforces the ruleset. Async-signal-safe.
/// Returns 0 or an errno value.
int landlock_restrict_self(int ruleset_fd) noexcept;

}  // namespace toolsrv
