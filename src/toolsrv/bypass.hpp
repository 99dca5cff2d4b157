#pragma once
/// Bypass bookkeeping, toolsrv side (spec §6.9.1): pending requests as JSON lines, resolution by
/// `<id> allow|deny`, a timeout that denies, and withdrawal of cancelled calls.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib9p/result.hpp"
#include "toolsrv/notifier.hpp"

namespace toolsrv {

/// How long a request waits for the hostowner before it is denied (§6.9.1).
inline constexpr std::chrono::seconds bypass_timeout_default{300};
/// Requests unresolved at once; request() refuses more.
inline constexpr std::size_t bypass_pending_max = 64;
/// Lines of pending kept for readers that have not read them yet. A reader further behind still
/// gets every request that is unresolved; only end lines it missed are lost.
inline constexpr std::size_t bypass_log_max = 1024;

/// The outcome of a request.
struct BypassDecision {
  bool allowed = false;
  std::string reason;  ///< "" when resolved by a line; "timeout" when it expired
};

class BypassBroker {
 public:
  /// `timeout` is a parameter only so tests can shorten it.
  explicit BypassBroker(std::chrono::seconds timeout = bypass_timeout_default);
  ~BypassBroker();
  BypassBroker(const BypassBroker&) = delete;
  BypassBroker& operator=(const BypassBroker&) = delete;

  /// Creates a request with a new id and appends
  /// `{"id":"7","agent":..,"tool":..,"args":{..},"cwd":..,"background":false}` to pending.
  /// `decided` runs once: on the resolving thread, or the broker's timer thread with
  /// `{false, "timeout"}`; never after withdraw(). Returns 0, and never calls `decided`, when
  /// bypass_pending_max requests are unresolved already.
  std::uint64_t request(const std::string& agent, const std::string& tool, const nlohmann::json& args,
                        const std::string& cwd, bool background, std::function<void(BypassDecision)> decided);

  /// bypass/resolve: one `<reqid> allow` or `<reqid> deny` per line, in order; the first bad line
  /// stops. Errors: `no such request: <id>`, `bad resolve line: <line>`.
  p9::Result<void> resolve(std::string_view text);

  /// The call was cancelled: drops the request and reports `"reason":"withdrawn"` on pending.
  /// False when it was no longer pending (resolved or expired: its decision is on its way).
  bool withdraw(std::uint64_t id);

  /// A reader of bypass/pending: starts with every unresolved request, then follows new lines.
  struct Reader {
    std::string backlog;
    std::uint64_t next_seq = 0;
  };
  Reader open_pending() const;
  /// The bytes a reader has not yet seen (whole lines), or "" when none.
  std::string read_pending(Reader& reader) const;

  /// Bumped on every new line of pending.
  std::uint64_t version() const { return notifier_.version(); }
  /// Wakes once when version() > seen.
  Subscription when_changed(std::uint64_t seen, std::function<void()> wake) { return notifier_.when_changed(seen, std::move(wake)); }

 private:
  struct Pending {
    std::uint64_t seq;  // of its line
    std::string line;
    std::chrono::steady_clock::time_point deadline;
    std::function<void(BypassDecision)> decided;
  };
  struct Line {
    std::uint64_t seq;
    std::uint64_t request;  // the id whose request this line is, 0 for an end line
    std::string text;
  };
  void timer_loop();
  std::uint64_t append_locked(std::string text, std::uint64_t request = 0);
  // A request ended: its line goes (a reader that has not read it needs neither it nor its end),
  // and `reason`, if any, is reported on an end line.
  void end_locked(std::uint64_t id, const char* reason);

  const std::chrono::seconds timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Pending> pending_;
  std::deque<Line> log_;              // at most bypass_log_max lines
  std::uint64_t next_seq_ = 1;
  std::uint64_t dropped_below_ = 1;   // lines below this seq were dropped by the cap
  Notifier notifier_;
  std::thread timer_;
};

}  // namespace toolsrv
