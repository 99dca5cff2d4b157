#pragma once
/// The event bus (spec §5): publish `<kind>.<id>.<verb>` topics; every open `event` fid is a
/// subscription with its own filter and a buffer of at most 1000 undelivered events.

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "virtfs/stream.hpp"

namespace ollie {

/// A topic pattern: dot-separated segments, `*` one segment, a last `*` one or more.
class Pattern {
 public:
  /// Topics have 3 segments and fewer than 64 bytes: a pattern past either bound matches none.
  static constexpr std::size_t MAX_BYTES = 256, MAX_SEGMENTS = 8;
  static p9::Result<Pattern> parse(std::string_view text);
  bool matches(const std::string& topic) const;

 private:
  std::vector<std::string> segs_;
  bool never_ = false;  ///< past MAX_BYTES or MAX_SEGMENTS
};

class Subscription;

class Bus {
 public:
  static constexpr std::size_t BUFFER = 1000;  ///< undelivered events kept per subscription

  /// Delivers `<topic> <payload>` (or `<topic>` alone) to every matching subscription.
  void publish(const std::string& topic, const std::string& payload = "");
  /// Open `event` fids a principal other than the hostowner may hold: each costs every publish
  /// a match of its filter and keeps up to BUFFER events (an agent holding 32,000 made every
  /// state change of the server take most of a second).
  static constexpr std::size_t MAX_PER_PRINCIPAL = 64;

  /// A new subscription of `who`; it sees events published from now on. Past MAX_PER_PRINCIPAL
  /// of an agent's: `too many event fids (limit 64)`.
  p9::Result<std::shared_ptr<Subscription>> subscribe(const std::string& who, bool hostowner);

 private:
  friend class Subscription;
  std::mutex mu_;
  std::vector<std::weak_ptr<Subscription>> subs_;
  std::size_t swept_ = 64;  ///< subs_'s size after the last sweep by subscribe (at least 64)
  std::map<std::string, std::shared_ptr<std::atomic<std::size_t>>> held_;  // by principal
};

/// One `event` fid: a Streaming Rdwr cursor whose request is the filter.
class Subscription : public virtfs::Cursor {
 public:
  static constexpr std::size_t MAX_PATTERNS = 256;  ///< every publish matches each of them
  static constexpr std::size_t MAX_FILTER = 64 * 1024;  ///< bytes of a filter, blanks included

  ~Subscription() override {
    if (held_) held_->fetch_sub(1);
  }
  virtfs::Chunk read(std::size_t max) override;
  std::shared_ptr<virtfs::Signal> signal() override { return signal_; }
  /// Sets the filter: patterns separated by blanks or newlines. Given after every write with all
  /// written so far, so events are kept until the first read, which drops those it does not select
  /// (a filter written in pieces selects what its whole selects).
  p9::Status request(std::string_view filter) override;

 private:
  friend class Bus;
  /// One published event, shared by every subscription that keeps it.
  struct Event {
    std::string topic;
    std::string line;
  };
  void offer(const std::shared_ptr<const Event>& e);
  bool wanted(const std::string& topic) const;
  void drop_unwanted();  ///< the buffered events the filter does not select; under mu_

  std::shared_ptr<std::atomic<std::size_t>> held_;  // its principal's count, or none
  std::mutex mu_;
  std::vector<Pattern> filter_;
  std::deque<std::shared_ptr<const Event>> queue_;
  std::string partial_;      // the rest of a line split by a short read
  std::size_t dropped_ = 0;  // reported as `event.overflow <n>` before the next line
  bool started_ = false;     // read once: the filter is final
  std::shared_ptr<virtfs::Signal> signal_ = std::make_shared<virtfs::Signal>();
};

}  // namespace ollie
