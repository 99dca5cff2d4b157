#pragma once
/// The refusal rate limit of the shell tool (spec OP-35): 5 refusals within a minute block the
/// agent's shell calls for 5 minutes. The record is `$TMPDIR/ollie-shell-$OLLIE_AGENT_ID`,
/// locked with flock while a call checks and updates it: lines `<unix time>` (a refusal) and
/// `until <unix time>` (the end of a block). Best effort, as the spec says: the model can write
/// `$TMPDIR`; a record that cannot be opened means no limit, a corrupt one is taken as empty.

#include <ctime>

namespace shell {

constexpr int max_refusals = 5;
constexpr std::time_t refusal_window = 60, block_time = 300;

class Limit {
 public:
  /// Opens and locks this agent's record (none without TMPDIR or OLLIE_AGENT_ID).
  Limit();
  ~Limit();
  Limit(const Limit&) = delete;
  Limit& operator=(const Limit&) = delete;

  /// Seconds the block still lasts at `now`, 0 when not blocked.
  std::time_t blocked_for(std::time_t now) const;
  /// Records a refusal at `now`; true when it starts a block.
  bool refused(std::time_t now);

 private:
  void save();
  int fd_ = -1;
  std::time_t until_ = 0;
  std::time_t times_[max_refusals] = {};
  int count_ = 0;
};

}  // namespace shell
