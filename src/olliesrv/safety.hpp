#pragma once
/// The engine's safety texts and thresholds (spec §8.6) and the plan re-injection (§8.7).

#include <string>

namespace ollie {

/// The failed-round streak that appends the nudge (a `context` block named `nudge`).
inline constexpr int NUDGE_STREAK = 5;
/// The failed-round streak that aborts the turn.
inline constexpr int ABORT_STREAK = 10;
/// The plan is re-injected after every this many tool rounds of a turn.
inline constexpr int PLAN_EVERY = 10;

inline constexpr const char* NUDGE_TEXT =
    "[system: your last 5 tool rounds all failed. Step back and try a different approach, or ask the user "
    "for help. Update your plan to show where you are.]";
inline constexpr const char* ABORT_TEXT = "10 consecutive failed tool rounds: turn aborted";

/// The context message of §8.7 for `plan` (its surrounding blank lines trimmed); "" when the
/// plan is blank.
std::string plan_reminder(const std::string& plan);

}  // namespace ollie
