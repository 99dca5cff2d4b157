#pragma once
/// AWS event-stream binary framing (application/vnd.amazon.eventstream), decoded from
/// arbitrary chunks: prelude (total length, headers length, CRC32), headers, payload, CRC32.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "backend/limits.hpp"

namespace ollie::backend {

/// One decoded message: its string headers (":event-type", ":message-type", ...) and payload.
struct EventStreamMessage {
  std::map<std::string, std::string, std::less<>> headers;
  std::string payload;
};

/// CRC-32 (IEEE 802.3), as the framing uses it.
std::uint32_t crc32(std::string_view bytes, std::uint32_t crc = 0);

class EventStreamDecoder {
 public:
  /// The largest message accepted.
  static constexpr std::size_t max_message = limits::event_data;

  /// Feeds bytes; calls `on_message` for each whole message. Returns false with error() set
  /// on a corrupt frame (bad length or CRC), after which the decoder stays failed.
  template <class F>
  bool feed(std::string_view in, F&& on_message) {
    if (!error_.empty()) return false;
    buf_.append(in);
    std::size_t off = 0;
    for (;;) {
      EventStreamMessage m;
      const auto n = next(std::string_view(buf_).substr(off), m);
      if (n == 0) break;
      if (!error_.empty()) return false;
      off += n;
      on_message(m);
    }
    buf_.erase(0, off);
    return true;
  }

  /// True when bytes of an unfinished message are pending.
  bool partial() const { return !buf_.empty(); }
  /// Why the stream was rejected.
  const std::string& error() const { return error_; }

 private:
  std::size_t next(std::string_view b, EventStreamMessage& m);
  std::string buf_;
  std::string error_;
};

}  // namespace ollie::backend
