#pragma once
/// The asynchronous 9P2000 client, for coroutines (olliesrv's agents calling their session's
/// toolsrv): every request is a `co_await`. It runs on the executor it was dialed on (a strand
/// or a one-thread io_context), with no thread of its own and no blocking call; coroutines on
/// any executor may use it, each resumed on its own (a Handoff per request).
///
/// Cancelling the awaiting coroutine (a cancellation_signal bound to its co_spawn, `||` with a
/// timer) sends Tflush for its request and throws std::system_error(operation_aborted) at once;
/// a reply that still comes is dropped, and the tag is reused only after the Rflush (flush(5)).
/// A request that would have created a fid (walk, auth, attach) has that fid clunked once the
/// flush is over. When the connection is lost every request in flight fails with the reason
/// (`connection closed`). 9P errors are values, as everywhere in lib9p.
///
/// The protocol state (tags, flushes, fids, version, walks) is the Mux and Walk that the blocking
/// Client shares; this layer is the Asio socket and the awaiting.

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fcall.hpp"
#include "handoff.hpp"
#include "mux.hpp"
#include "result.hpp"

namespace p9 {

class AsyncFid;

class AsyncClient : public std::enable_shared_from_this<AsyncClient> {
 public:
  /// Dials `unix!/path`, `tcp!host!port` or a service name from ex and negotiates 9P2000.
  static asio::awaitable<Result<std::shared_ptr<AsyncClient>>> dial(asio::any_io_executor ex, std::string address,
                                                                   std::uint32_t msize = MAX_MSIZE);
  /// Hangs up.
  ~AsyncClient();
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  /// Sends t (its tag is chosen here) and awaits the reply. An Rerror becomes an error. When the
  /// awaiting coroutine is cancelled, after_flush runs once the server is done with t (to undo
  /// what t may have done, e.g. clunk the fid a walk may have made).
  asio::awaitable<Result<Fcall>> rpc(Fcall t, std::function<void()> after_flush = {});

  /// Tauth; an error (e.g. `authentication not required`) when the server does not authenticate.
  asio::awaitable<Result<AsyncFid>> auth(std::string uname, std::string aname = "");
  /// Tattach; afid null for NOFID.
  asio::awaitable<Result<AsyncFid>> attach(std::string uname, std::string aname = "", const AsyncFid* afid = nullptr);
  /// Tauth, the secret written to the auth fid, and Tattach naming it: how olliesrv and its agents
  /// authenticate to toolsrv (spec §6.1).
  asio::awaitable<Result<AsyncFid>> attach_with_secret(std::string uname, std::string secret, std::string aname = "");

  /// Largest payload of one Tread/Twrite.
  std::uint32_t iounit() const { return mux_->iounit(); }
  /// Hangs up, from any thread: every request in flight fails with `connection closed`.
  void close();

 private:
  friend class AsyncFid;
  struct Wire;
  class Sent;

  explicit AsyncClient(asio::any_io_executor ex);
  /// Starts t, its frame appended to out (a caller pipelines by starting several, then writing
  /// out once). after_flush runs if the Sent is dropped unanswered, once the server is done with t.
  Sent start(Fcall t, std::vector<std::uint8_t>& out, std::function<void()> after_flush = {});
  /// Queues frames for the socket, from any thread.
  void write(std::vector<std::uint8_t> frames);
  /// Tclunk without waiting; it goes out with the next request, or after a few milliseconds
  /// without one. The number is free again after the Rclunk.
  void clunk_later(std::uint32_t fid);
  /// The after_flush of a request that may have made fid (walk, auth, attach, a cancelled clunk).
  std::function<void()> clunk_after_flush(std::uint32_t fid);
  /// Tauth or Tattach of fid.
  asio::awaitable<Result<AsyncFid>> new_fid_rpc(Fcall t, std::uint32_t fid);

  std::shared_ptr<Mux> mux_;
  std::shared_ptr<Wire> wire_;
};

/// A request on the wire. reply() awaits its answer; dropped unanswered (its coroutine was
/// cancelled, or the caller gave up on it), it is flushed.
class AsyncClient::Sent {
 public:
  Sent(std::shared_ptr<AsyncClient> c, std::uint16_t tag, std::shared_ptr<Handoff<Result<Fcall>>> reply,
       std::function<void()> after_flush);
  Sent(Sent&& o) noexcept;
  Sent& operator=(Sent&&) = delete;
  ~Sent();

  asio::awaitable<Result<Fcall>> reply();

 private:
  std::shared_ptr<AsyncClient> c_;
  std::uint16_t tag_;
  std::shared_ptr<Handoff<Result<Fcall>>> reply_;
  std::function<void()> after_flush_;
  bool answered_ = false;
};

/// One fid of an AsyncClient. Move-only; clunked without waiting when destroyed (unless already
/// clunked). Like the coroutines it returns, use one AsyncFid from one coroutine at a time.
class AsyncFid {
 public:
  AsyncFid() = default;
  AsyncFid(std::shared_ptr<AsyncClient> c, std::uint32_t fid, Qid qid) : c_(std::move(c)), fid_(fid), qid_(qid) {}
  AsyncFid(AsyncFid&& o) noexcept { *this = std::move(o); }
  AsyncFid& operator=(AsyncFid&& o) noexcept;
  ~AsyncFid();

  /// Walks to a slash-separated path relative to this fid (empty, "." and "/" clone it),
  /// 16 elements per Twalk. A missing element gives `<element>: file not found`.
  asio::awaitable<Result<AsyncFid>> walk(std::string path) const;
  asio::awaitable<Status> open(std::uint8_t mode);
  /// Reads at most count bytes (0: iounit) at the fid's offset and advances it; empty is EOF.
  asio::awaitable<Result<std::string>> read(std::uint32_t count = 0);
  asio::awaitable<Result<std::string>> pread(std::uint64_t offset, std::uint32_t count);
  /// Reads until EOF; `reply too large` past `max` bytes (the server is not trusted to stop).
  asio::awaitable<Result<std::string>> read_all(std::size_t max);
  /// Writes all of data at the fid's offset in iounit-sized pieces.
  asio::awaitable<Result<std::size_t>> write(std::string data);
  asio::awaitable<Result<Dir>> stat() const;
  asio::awaitable<Status> clunk();
  /// One exchange with an Rdwr file (toolsrv's proc/new): walks to path, opens it ORDWR, writes
  /// request and reads the reply, pipelined in one write to the socket (a 9P server takes a
  /// connection's requests in order, as lib9p and plan9port's do); a reply of an iounit or more
  /// is read on to EOF (an Rdwr reply is held whole from its first read, so a shorter read is
  /// its end), up to `max` bytes (`reply too large` past them). Clunks without waiting. One
  /// round trip where one at a time takes six.
  asio::awaitable<Result<std::string>> call(std::string path, std::string request, std::size_t max) const;

  std::uint32_t num() const { return fid_; }
  const Qid& qid() const { return qid_; }
  std::uint64_t offset() const { return offset_; }
  void seek(std::uint64_t off) { offset_ = off; }

 private:
  std::shared_ptr<AsyncClient> c_;
  std::uint32_t fid_ = NOFID;
  Qid qid_;
  std::uint64_t offset_ = 0;
};

}  // namespace p9
