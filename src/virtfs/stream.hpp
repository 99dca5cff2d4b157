#pragma once
/// Streams: what a Stream file reads from, one Cursor per fid, and ByteLog, the common
/// producer (an append-only byte sequence such as a chat log or a process's output).

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "lib9p/result.hpp"
#include "signal.hpp"

namespace virtfs {

struct Chunk {
  std::string data;
  bool eof = false;   ///< the producer has ended and every byte was delivered
  std::string error;  ///< the read fails with this Rerror, nothing delivered
};

/// One reader's position in a stream.
class Cursor {
 public:
  virtual ~Cursor() = default;
  /// Up to max bytes from the position, without waiting; empty data and !eof means "wait".
  virtual Chunk read(std::size_t max) = 0;
  /// Notified when bytes arrive or the producer ends.
  virtual std::shared_ptr<Signal> signal() = 0;
  /// Waits for bytes or the end (a blocked Stream read). The default waits on signal() and
  /// reads; a cursor over another server's stream overrides it to wait for that server's read.
  /// Throws operation_aborted when the awaiting coroutine is cancelled (Tflush).
  virtual asio::awaitable<Chunk> wait(std::size_t max);
  /// A Streaming Rdwr's request (e.g. event's filter), written before the first read: given
  /// after every write with all written so far (an error there leaves the last one in force),
  /// and at the first read, where an error is the read's.
  virtual p9::Status request(std::string_view req);
};

/// An append-only byte sequence with a notifier; cursors read it from any position.
class ByteLog : public std::enable_shared_from_this<ByteLog> {
 public:
  ByteLog() : signal_(std::make_shared<Signal>()) {}
  void append(std::string_view bytes);
  /// Ends the stream: readers get EOF once they have read everything.
  void close();
  std::uint64_t size() const;
  bool closed() const;
  /// A cursor starting at byte `from` (clamped to the current size).
  std::shared_ptr<Cursor> cursor(std::uint64_t from = 0);
  /// Bytes [from, from+max).
  Chunk read(std::uint64_t from, std::size_t max) const;
  const std::shared_ptr<Signal>& signal() const { return signal_; }

 private:
  mutable std::mutex mu_;
  std::string bytes_;
  bool closed_ = false;
  std::shared_ptr<Signal> signal_;
};

}  // namespace virtfs
