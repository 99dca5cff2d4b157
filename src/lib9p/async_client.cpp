#include "async_client.hpp"

#include <spdlog/spdlog.h>
#include <sys/un.h>

#include <asio/co_spawn.hpp>
#include <asio/dispatch.hpp>
#include <asio/steady_timer.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/write.hpp>

#include "codec.hpp"
#include "dial.hpp"
#include "errors.hpp"
#include "tmsg.hpp"
#include "walk.hpp"

namespace p9 {

using Socket = asio::generic::stream_protocol::socket;
constexpr auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);
/// How long a Tclunk may wait for the next request to go out with it.
constexpr auto clunk_hold = std::chrono::milliseconds(5);

namespace {

std::string hang_up_reason(const std::error_code& ec) {
  if (ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
      ec == asio::error::operation_aborted)
    return err::hung_up;
  return std::string(err::hung_up) + ": " + ec.message();
}

asio::awaitable<Status> connect(Socket& sock, const Address& a) {
  if (a.kind == Address::Unix) {
    if (a.path.size() >= sizeof(sockaddr_un::sun_path)) co_return error(a.path + ": socket path too long");
    auto [ec] = co_await sock.async_connect(asio::local::stream_protocol::endpoint(a.path), tuple_awaitable);
    if (ec) co_return error("dial " + a.path + ": " + ec.message());
    co_return Status{};
  }
  asio::ip::tcp::resolver resolver(sock.get_executor());
  auto [ec, endpoints] = co_await resolver.async_resolve(a.host, a.port, tuple_awaitable);
  if (ec) co_return error("dial " + a.text + ": " + ec.message());
  std::string why = "no address";
  for (const auto& e : endpoints) {
    auto [cec] = co_await sock.async_connect(e.endpoint(), tuple_awaitable);
    if (!cec) co_return Status{};
    why = cec.message();
    std::error_code ignored;
    sock.close(ignored);
  }
  co_return error("dial " + a.text + ": " + why);
}

void log_failure(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    spdlog::error("9p client: {}", x.what());
  }
}

}  // namespace

/// The bytes of a connection: its socket and what waits to be written, touched only on the
/// socket's executor. The reader coroutine and each write hold it, so it outlives the client.
struct AsyncClient::Wire : std::enable_shared_from_this<Wire> {
  explicit Wire(const asio::any_io_executor& ex) : sock(ex), hold_timer(ex) {}

  /// Queues frames behind the held Tclunks (they were made first) and writes them.
  void send(std::vector<std::uint8_t> frames, std::shared_ptr<Mux> m) {
    if (!held.empty()) {
      frames.insert(frames.begin(), held.begin(), held.end());
      held.clear();
    }
    if (queued.empty()) queued.swap(frames);
    else queued.insert(queued.end(), frames.begin(), frames.end());
    if (!writing) write_queued(std::move(m));
  }

  /// Holds Tclunk frames until the next request (an agent's call is clunked just before its
  /// next request to the same server: one message each way instead of two), or clunk_hold.
  void hold(std::vector<std::uint8_t> frames, std::shared_ptr<Mux> m) {
    if (writing) return send(std::move(frames), std::move(m));
    held.insert(held.end(), frames.begin(), frames.end());
    if (hold_armed) return;
    hold_armed = true;
    hold_timer.expires_after(clunk_hold);
    hold_timer.async_wait([w = shared_from_this(), m = std::move(m)](std::error_code) {
      w->hold_armed = false;
      if (!w->held.empty()) w->send({}, m);
    });
  }

  /// Writes what is queued, then what was queued meanwhile, until nothing is.
  void write_queued(std::shared_ptr<Mux> m) {
    sending.swap(queued);
    writing = true;
    asio::async_write(sock, asio::buffer(sending), [w = shared_from_this(), m](std::error_code ec, std::size_t) {
      w->sending.clear();
      w->writing = false;
      if (ec) {
        m->close(hang_up_reason(ec));
        w->sock.close(ec);
      } else if (!w->queued.empty()) {
        w->write_queued(m);
      }
    });
  }

  /// Hands every byte read to the Mux until the connection ends, then fails what is in flight.
  static asio::awaitable<void> read_replies(std::shared_ptr<Wire> w, std::shared_ptr<Mux> m) {
    std::vector<std::uint8_t> buf(MAX_MSIZE);
    std::string why;
    for (;;) {
      auto [ec, n] = co_await w->sock.async_read_some(asio::buffer(buf), tuple_awaitable);
      if (ec) {
        why = hang_up_reason(ec);
        break;
      }
      if (auto st = m->received({buf.data(), n}); !st) {
        why = st.ename();
        break;
      }
    }
    m->close(why);
    std::error_code ignored;
    w->sock.close(ignored);
  }

  Socket sock;
  std::vector<std::uint8_t> queued, sending;
  bool writing = false;
  std::vector<std::uint8_t> held;  // Tclunks waiting for the next write
  asio::steady_timer hold_timer;
  bool hold_armed = false;
};

AsyncClient::AsyncClient(asio::any_io_executor ex) : mux_(std::make_shared<Mux>()), wire_(std::make_shared<Wire>(std::move(ex))) {}

AsyncClient::~AsyncClient() { close(); }

asio::awaitable<Result<std::shared_ptr<AsyncClient>>> AsyncClient::dial(asio::any_io_executor ex, std::string address,
                                                                       std::uint32_t msize) {
  auto a = parse_address(address);
  if (!a) co_return a.error();
  std::shared_ptr<AsyncClient> c(new AsyncClient(ex));
  if (auto st = co_await connect(c->wire_->sock, *a); !st) co_return st.error();
  asio::co_spawn(ex, Wire::read_replies(c->wire_, c->mux_), log_failure);
  auto r = co_await c->rpc(c->mux_->version_request(msize));
  if (auto st = c->mux_->version_reply(r); !st) co_return st.error();
  co_return c;
}

void AsyncClient::close() {
  mux_->close(err::hung_up);
  asio::dispatch(wire_->sock.get_executor(), [w = wire_] {
    w->held.clear();
    w->hold_timer.cancel();
    std::error_code ignored;
    w->sock.close(ignored);
  });
}

void AsyncClient::write(std::vector<std::uint8_t> frames) {
  if (frames.empty()) return;
  asio::dispatch(wire_->sock.get_executor(),
                 [w = wire_, m = mux_, frames = std::move(frames)]() mutable { w->send(std::move(frames), std::move(m)); });
}

AsyncClient::Sent AsyncClient::start(Fcall t, std::vector<std::uint8_t>& out, std::function<void()> after_flush) {
  auto reply = std::make_shared<Handoff<Result<Fcall>>>();
  (void)mux_->start(t, [reply](Result<Fcall> r) { reply->set(std::move(r)); }, out);  // a refusal is the reply
  return Sent(shared_from_this(), t.tag, std::move(reply), std::move(after_flush));
}

asio::awaitable<Result<Fcall>> AsyncClient::rpc(Fcall t, std::function<void()> after_flush) {
  std::vector<std::uint8_t> out;
  auto sent = start(std::move(t), out, std::move(after_flush));
  write(std::move(out));
  co_return co_await sent.reply();
}

void AsyncClient::clunk_later(std::uint32_t fid) {
  std::vector<std::uint8_t> out;
  auto t = tmsg::on_fid(Tclunk, fid);
  // The Mux alone calls this completion, so it is alive when it runs.
  (void)mux_->start(t, [m = mux_.get(), fid](Result<Fcall>) { m->release_fid(fid); }, out);
  if (out.empty()) return;
  asio::dispatch(wire_->sock.get_executor(),
                 [w = wire_, m = mux_, frames = std::move(out)]() mutable { w->hold(std::move(frames), std::move(m)); });
}

std::function<void()> AsyncClient::clunk_after_flush(std::uint32_t fid) {
  return [w = weak_from_this(), fid] {
    if (auto c = w.lock()) c->clunk_later(fid);
  };
}

asio::awaitable<Result<AsyncFid>> AsyncClient::new_fid_rpc(Fcall t, std::uint32_t fid) {
  auto r = co_await rpc(std::move(t), clunk_after_flush(fid));
  if (!r) {
    mux_->release_fid(fid);
    co_return r.error();
  }
  co_return AsyncFid(shared_from_this(), fid, r->type == Rauth ? r->aqid : r->qid);
}

asio::awaitable<Result<AsyncFid>> AsyncClient::auth(std::string uname, std::string aname) {
  const std::uint32_t afid = mux_->new_fid();
  co_return co_await new_fid_rpc(tmsg::auth(afid, std::move(uname), std::move(aname)), afid);
}

asio::awaitable<Result<AsyncFid>> AsyncClient::attach(std::string uname, std::string aname, const AsyncFid* afid) {
  const std::uint32_t fid = mux_->new_fid();
  co_return co_await new_fid_rpc(tmsg::attach(fid, afid ? afid->num() : NOFID, std::move(uname), std::move(aname)), fid);
}

asio::awaitable<Result<AsyncFid>> AsyncClient::attach_with_secret(std::string uname, std::string secret, std::string aname) {
  auto afid = co_await auth(uname, aname);
  if (!afid) co_return afid.error();
  if (auto w = co_await afid->write(std::move(secret)); !w) co_return w.error();
  co_return co_await attach(std::move(uname), std::move(aname), &*afid);
}

// ---- Sent -------------------------------------------------------------------------------

AsyncClient::Sent::Sent(std::shared_ptr<AsyncClient> c, std::uint16_t tag, std::shared_ptr<Handoff<Result<Fcall>>> reply,
                        std::function<void()> after_flush)
    : c_(std::move(c)), tag_(tag), reply_(std::move(reply)), after_flush_(std::move(after_flush)) {}

AsyncClient::Sent::Sent(Sent&& o) noexcept
    : c_(std::move(o.c_)), tag_(o.tag_), reply_(std::move(o.reply_)), after_flush_(std::move(o.after_flush_)),
      answered_(o.answered_) {}

AsyncClient::Sent::~Sent() {
  if (!c_ || answered_) return;
  if (tag_ == NOTAG) {  // never went out (refused), or a Tversion: nothing to flush
    if (after_flush_) after_flush_();
    return;
  }
  std::vector<std::uint8_t> out;
  c_->mux_->flush(tag_, std::move(after_flush_), out);
  c_->write(std::move(out));
}

asio::awaitable<Result<Fcall>> AsyncClient::Sent::reply() {
  auto r = co_await reply_->get();  // cancellation throws here, and ~Sent flushes
  answered_ = true;
  co_return r;
}

// ---- AsyncFid ---------------------------------------------------------------------------

AsyncFid& AsyncFid::operator=(AsyncFid&& o) noexcept {
  if (this != &o) {
    if (c_ && fid_ != NOFID) c_->clunk_later(fid_);
    c_ = std::move(o.c_);
    fid_ = std::exchange(o.fid_, NOFID);
    qid_ = o.qid_;
    offset_ = o.offset_;
  }
  return *this;
}

AsyncFid::~AsyncFid() {
  if (c_ && fid_ != NOFID) c_->clunk_later(fid_);
}

asio::awaitable<Result<AsyncFid>> AsyncFid::walk(std::string path) const {
  Walk w(path, fid_, c_->mux_->new_fid(), qid_);
  do {
    if (auto st = w.take(co_await c_->rpc(w.next(), c_->clunk_after_flush(w.newfid()))); !st) {
      if (w.created()) c_->clunk_later(w.newfid());
      else c_->mux_->release_fid(w.newfid());
      co_return st.error();
    }
  } while (!w.done());
  co_return AsyncFid(c_, w.newfid(), w.qid());
}

asio::awaitable<Status> AsyncFid::open(std::uint8_t mode) {
  auto r = co_await c_->rpc(tmsg::open(fid_, mode));
  if (!r) co_return r.error();
  qid_ = r->qid;
  co_return Status{};
}

asio::awaitable<Result<std::string>> AsyncFid::pread(std::uint64_t offset, std::uint32_t count) {
  const std::uint32_t most = c_->iounit();
  auto r = co_await c_->rpc(tmsg::read(fid_, offset, count ? std::min(count, most) : most));
  if (!r) co_return r.error();
  co_return std::move(r->data);
}

asio::awaitable<Result<std::string>> AsyncFid::read(std::uint32_t count) {
  auto r = co_await pread(offset_, count);
  if (r) offset_ += r->size();
  co_return r;
}

asio::awaitable<Result<std::string>> AsyncFid::read_all(std::size_t max) {
  std::string all;
  for (;;) {
    auto r = co_await read();
    if (!r) co_return r;
    if (r->empty()) co_return all;
    if (r->size() > max - all.size()) co_return error("reply too large");
    all += *r;
  }
}

asio::awaitable<Result<std::size_t>> AsyncFid::write(std::string data) {
  std::size_t done = 0;
  do {
    auto piece = data.substr(done, c_->iounit());
    auto r = co_await c_->rpc(tmsg::write(fid_, offset_, piece));
    if (!r) co_return r.error();
    if (r->count == 0 && !piece.empty()) co_return error("short write");
    offset_ += r->count;
    done += r->count;
  } while (done < data.size());
  co_return done;
}

asio::awaitable<Result<Dir>> AsyncFid::stat() const {
  auto r = co_await c_->rpc(tmsg::on_fid(Tstat, fid_));
  if (!r) co_return r.error();
  co_return decode_dir(r->stat);
}

asio::awaitable<Status> AsyncFid::clunk() {
  if (!c_ || fid_ == NOFID) co_return Status{};
  const std::uint32_t fid = std::exchange(fid_, NOFID);
  // A clunk the flush dropped left the fid in place: clunk it again then.
  auto r = co_await c_->rpc(tmsg::on_fid(Tclunk, fid), c_->clunk_after_flush(fid));
  c_->mux_->release_fid(fid);
  if (!r) co_return r.error();
  co_return Status{};
}

asio::awaitable<Result<std::string>> AsyncFid::call(std::string path, std::string request, std::size_t max) const {
  AsyncClient& c = *c_;
  Walk w(path, fid_, c.mux_->new_fid(), qid_);
  if (!w.single()) {  // a path of more than 16 elements: walk there first
    c.mux_->release_fid(w.newfid());
    auto f = co_await walk(std::move(path));
    if (!f) co_return f.error();
    co_return co_await f->call("", std::move(request), max);
  }
  std::vector<std::uint8_t> out;
  std::vector<AsyncClient::Sent> sent;
  sent.push_back(c.start(w.next(), out, c.clunk_after_flush(w.newfid())));
  sent.push_back(c.start(tmsg::open(w.newfid(), ORDWR), out));
  std::vector<std::size_t> pieces;
  for (std::size_t at = 0; at < request.size(); at += c.iounit()) {
    pieces.push_back(std::min<std::size_t>(c.iounit(), request.size() - at));
    sent.push_back(c.start(tmsg::write(w.newfid(), at, request.substr(at, pieces.back())), out));
  }
  sent.push_back(c.start(tmsg::read(w.newfid(), 0, c.iounit()), out));
  c.write(std::move(out));

  Status st = w.take(co_await sent[0].reply());
  AsyncFid f;
  // Requests are taken in order, so the number is free for whatever is sent after the open.
  if (w.created()) f = AsyncFid(c_, w.newfid(), w.qid());
  else c.mux_->release_fid(w.newfid());
  std::string reply;
  for (std::size_t i = 1; i < sent.size(); i++) {
    auto r = co_await sent[i].reply();
    if (!st) continue;
    if (!r) st = r.error();
    else if (i == sent.size() - 1) reply = std::move(r->data);
    else if (i >= 2 && r->count != pieces[i - 2]) st = error("short write");
  }
  if (!st) co_return st.error();
  // The reply is held whole once the first read returns (spec §1.7): a read shorter than asked
  // for reached its end.
  if (reply.size() > max) co_return error("reply too large");
  if (reply.size() < c.iounit()) co_return reply;
  f.seek(reply.size());
  auto rest = co_await f.read_all(max - reply.size());
  if (!rest) co_return rest;
  co_return reply + *rest;
}

}  // namespace p9
