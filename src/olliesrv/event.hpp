#pragma once
/// The event bus (spec §5): publish `<kind>.<id>.<verb>` topics; every open `event` fid is a
/// subscription with its own filter and a buffer of at most 1000 undelivered events.

#include <deque>
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
  static constexpr std::size_t MAX_BYTES = 256, MAX_SEGMENTS = 8;  ///< topics have 3 segments
  static p9::Result<Pattern> parse(std::string_view text);
  bool matches(const std::string& topic) const;

 private:
  std::vector<std::string> segs_;
};

class Subscription;

class Bus {
 public:
  static constexpr std::size_t BUFFER = 1000;  ///< undelivered events kept per subscription

  /// Delivers `<topic> <payload>` (or `<topic>` alone) to every matching subscription.
  void publish(const std::string& topic, const std::string& payload = "");
  /// A new subscription; it sees events published from now on.
  std::shared_ptr<Subscription> subscribe();

 private:
  friend class Subscription;
  std::mutex mu_;
  std::vector<std::weak_ptr<Subscription>> subs_;
};

/// One `event` fid: a Streaming Rdwr cursor whose request is the filter.
class Subscription : public virtfs::Cursor {
 public:
  static constexpr std::size_t MAX_PATTERNS = 256;  ///< every publish matches each of them
  static constexpr std::size_t MAX_FILTER = 64 * 1024;  ///< bytes of a filter, blanks included

  virtfs::Chunk read(std::size_t max) override;
  std::shared_ptr<virtfs::Signal> signal() override { return signal_; }
  /// Sets the filter: patterns separated by blanks or newlines; events already buffered that do
  /// not match are dropped.
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

  std::mutex mu_;
  std::vector<Pattern> filter_;
  std::deque<std::shared_ptr<const Event>> queue_;
  std::string partial_;      // the rest of a line split by a short read
  std::size_t dropped_ = 0;  // reported as `event.overflow <n>` before the next line
  std::shared_ptr<virtfs::Signal> signal_ = std::make_shared<virtfs::Signal>();
};

}  // namespace ollie
