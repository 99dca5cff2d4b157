#pragma once
/// Mux: the client half of 9P multiplexing (plan9port's libmux), the one protocol state of both
/// the blocking Client and the AsyncClient, which only move its bytes: the tags in flight and
/// what completes each, flushes as flush(5) orders them, the framing and checking of replies,
/// version negotiation, and the fid numbers.
///
/// Thread-safe. Completions run outside its lock, on the thread that passes it the bytes of
/// the reply (or that closes it); every request started is completed exactly once: with its
/// reply, an Rerror as an error, `interrupted` when a flush dropped it, or the reason the
/// connection closed.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "fcall.hpp"
#include "result.hpp"

namespace p9 {

class Mux {
 public:
  using Done = std::function<void(Result<Fcall>)>;
  /// Requests in flight at once (flushes aside, and Tclunks up to twice as many); one more fails
  /// with `too many requests in flight`.
  static constexpr std::size_t MAX_IN_FLIGHT = 1024;

  /// The Tversion asking for msize; until its reply, frames up to msize are accepted.
  Fcall version_request(std::uint32_t msize);
  /// Checks the Rversion (9P2000, an msize from MIN_MSIZE to the one asked for) and adopts its
  /// msize: from then on a larger frame from the server ends the connection.
  Status version_reply(const Result<Fcall>& r);

  /// Gives t a free tag (NOTAG for Tversion), registers done for its reply and appends the frame
  /// to out. Once closed, or with MAX_IN_FLIGHT requests in flight, calls done with the error
  /// at once (t.tag is then NOTAG) and returns it.
  Status start(Fcall& t, Done done, std::vector<std::uint8_t>& out);
  /// Flushes oldtag: appends a Tflush to out. The old request's completion still gets its reply
  /// if that comes first, else `interrupted` when the Rflush comes; only then is oldtag free, and
  /// `settled` runs (also at once when oldtag is not in flight, and when the connection closes).
  void flush(std::uint16_t oldtag, std::function<void()> settled, std::vector<std::uint8_t>& out);
  /// Takes bytes read from the server (from one reader) and completes the request of each whole
  /// reply. An error (a frame of a bad size, or one that does not decode) ends the stream: close
  /// with it.
  Status received(std::span<const std::uint8_t> bytes);
  /// Fails every request in flight, and every later start, with why (the first reason stays).
  void close(const std::string& why);

  std::uint32_t msize() const { return msize_; }
  /// Largest payload of one Tread/Twrite.
  std::uint32_t iounit() const { return msize_ - IOHDRSZ; }
  std::uint32_t new_fid();
  /// Makes a fid number free again; only once the server is done with it (its Rclunk, a failed
  /// Tattach, a walk that created nothing).
  void release_fid(std::uint32_t fid);

 private:
  struct Pending {
    std::uint8_t type = 0;
    Done done;                                  // empty once the reply was delivered
    std::uint16_t oldtag = NOTAG;               // of a Tflush
    bool flushing = false;                      // a Tflush of this tag is in flight
    std::vector<std::function<void()>> settled;  // run when the flush is over
  };
  void deliver(Fcall r);
  std::uint16_t free_tag();

  std::mutex mu_;  // everything below but in_
  std::map<std::uint16_t, Pending> pending_;
  std::uint16_t next_tag_ = 0;
  bool closed_ = false;
  std::string why_;
  std::vector<std::uint32_t> free_fids_;
  std::uint32_t next_fid_ = 1;
  std::atomic<std::uint32_t> msize_{8192};
  std::atomic<std::uint32_t> limit_{MAX_MSIZE};  // the largest frame accepted
  std::vector<std::uint8_t> in_;  // a partial frame, touched by the reader only
};

}  // namespace p9
