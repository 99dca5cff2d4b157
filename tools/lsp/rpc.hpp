#pragma once
/// LSP's base protocol (JSON-RPC with `Content-Length` framing) over a pair of descriptors, and the
/// one-line JSON exchange between a tool and its bridge. Every read is bounded in size.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace lsp {

using json = nlohmann::json;

/// The largest LSP message read from a server (a references result of a big project fits).
inline constexpr std::size_t max_message = 32u << 20;

/// Reads framed messages from one descriptor, keeping what was read past a message for the next.
class MessageReader {
 public:
  explicit MessageReader(int fd) : fd_(fd) {}
  /// The next message; nullopt at end of input, a read error, a malformed header or a body over
  /// max_message (the stream is then unusable: the caller treats the server as dead). A body that
  /// is not JSON comes back as an empty object, to be skipped.
  std::optional<json> next();

 private:
  bool fill();
  int fd_;
  std::string pending_;
};
/// Writes one framed message; false when the descriptor is closed.
bool write_message(int fd, const json& message);

/// How long a write to a non-blocking descriptor may wait for room.
inline constexpr int write_timeout_ms = 20000;

/// Writes all of `data`; false on error, or when a non-blocking descriptor stays full for
/// write_timeout_ms.
bool write_all(int fd, const std::string& data);
/// Reads up to a newline (not kept) or end of input, at most `limit` bytes; nullopt when the line
/// is longer, or on a read error or timeout (SO_RCVTIMEO) before any newline.
std::optional<std::string> read_line(int fd, std::size_t limit);

}  // namespace lsp
