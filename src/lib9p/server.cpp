#include "server.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>
#include <unordered_map>
#include <unordered_set>

#include "codec.hpp"
#include "errors.hpp"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5 (asm-generic value); Debian 12's headers predate it
#endif

namespace p9 {

Status FileServer::auth(Fid&, const std::string&, const std::string&) { return error(err::auth_not_required); }
std::optional<Fcall> FileServer::answer_now(Fid&, const Fcall&) { return std::nullopt; }
asio::awaitable<Status> FileServer::clunk(Fid&) { co_return Status{}; }
bool FileServer::ends_at_shutdown(const Fid&) { return true; }
Status FileServer::clone(const Fid&) { return {}; }

Status FileServer::dir_alive(Fid&) { return {}; }

asio::awaitable<Status> FileServer::wstat(Fid&, const Dir& d) {
  if (is_null_wstat(d)) co_return Status{};
  co_return error(err::wstat_not_supported);
}
Status FileServer::create(Fid&, const std::string&, std::uint32_t, std::uint8_t) {
  return error(err::create_not_supported);
}
Status FileServer::remove(Fid&) { return error(err::remove_not_supported); }

bool is_null_wstat(const Dir& d) { return d == Dir::null(); }

std::size_t default_max_connections() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 512;
  return std::max<std::size_t>(1, std::min<rlim_t>(rl.rlim_cur, 1 << 20) / 2);
}

namespace {

using Socket = asio::generic::stream_protocol::socket;
using Strand = asio::strand<asio::any_io_executor>;
using Clock = std::chrono::steady_clock;
constexpr auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

/// Requests a connection may have in flight: each holds memory until it is answered, and a
/// blocked read is answered only when its file has something. A sandboxed peer (a tool: its
/// ollie-9p, a sub-agent request) needs a few; one that sent 65535 reads it never meant to see
/// answered held half a gigabyte of olliesrv per connection. Tflush and Tclunk, which end
/// requests and fids, have as many again on top. A sandboxed principal's requests on fids over
/// all its connections are capped too: a tool that opened thousands of connections, each with
/// its 64 reads blocked on a chat, held hundreds of thousands of them, and each change of that
/// chat then stalled every client for seconds.
constexpr std::size_t max_requests = 1024, max_sandboxed_requests = 64, max_sandboxed_requests_per_uid = 1024;
/// Connections one sandboxed process may hold: below Landlock ABI 9 every tool of a session
/// connects through its toolsrv's connector, one process, so this is a session's share, and one
/// session's tools cannot hold all the sandboxed room (three quarters of max_connections) that
/// every other session's callbacks (ollie-9p, subagent_spawn) need too.
constexpr std::size_t max_sandboxed_per_process = 256;
constexpr const char* too_many_requests = "too many requests in flight";

Fcall rerror(std::uint16_t tag, std::string ename) {
  Fcall r;
  r.type = Rerror;
  r.tag = tag;
  r.ename = std::move(ename);
  return r;
}

// The successful reply's skeleton: type T+1, the request's tag.
Fcall reply_to(const Fcall& t) {
  Fcall r;
  r.type = t.type + 1;
  r.tag = t.tag;
  return r;
}

// What a pending request gets when the server stops: a read of a stream ends as at end of file
// (its producer is gone, so `9p read` ends cleanly; the file server says which reads those are),
// anything else fails.
Fcall shutdown_reply(const Fcall& t, bool eof) {
  return t.type == Tread && eof ? reply_to(t) : rerror(t.tag, err::shutting_down);
}

// The version the server speaks for a client's version string (version(5), spec §1.5).
std::string negotiate_version(const std::string& v) {
  std::string_view base(v);
  base = base.substr(0, base.find('.'));
  return base == VERSION9P ? VERSION9P : "unknown";
}

bool is_auth(const Fid& f) { return f.qid.type & QTAUTH; }

struct Req {
  Fcall t;
  std::shared_ptr<Fid> fid;                  // the fid t.fid names, looked up once
  asio::cancellation_signal cancel;
  bool answered = false;                     // respond() ran: a second reply is refused
  std::optional<std::string> charged;        // the sandboxed principal it is counted for
  bool flushed = false;                      // reply suppressed (flushed, or the connection is gone)
  std::vector<std::shared_ptr<Req>> flushes; // the Tflushes answered when this request ends
};
using ReqPtr = std::shared_ptr<Req>;

// The bytes read from a connection and not yet served, and what is left of a frame being skipped.
class ReadBuffer {
 public:
  std::span<const std::uint8_t> unread() const { return {buf_.data() + beg_, end_ - beg_}; }
  void consume(std::size_t n) { beg_ += n; }
  // Drops a frame of `size` bytes; the part not read yet is dropped as it arrives.
  void skip(std::size_t size) {
    skip_ = size;
    drop_skipped();
  }
  bool skipping() const { return skip_ > 0; }
  void drop_skipped() {
    std::size_t n = std::min(skip_, end_ - beg_);
    beg_ += n;
    skip_ -= n;
  }
  // Where the next read goes, with room for `want` unread bytes from the first one.
  std::span<std::uint8_t> room(std::size_t want) {
    if (beg_ == end_) beg_ = end_ = 0;
    else if (buf_.size() - end_ < 4096 || buf_.size() - beg_ < want) compact();
    if (buf_.size() < want) buf_.resize(std::max(want, 2 * buf_.size()));
    return {buf_.data() + end_, buf_.size() - end_};
  }
  void filled(std::size_t n) { end_ += n; }

 private:
  void compact() {
    std::memmove(buf_.data(), buf_.data() + beg_, end_ - beg_);
    end_ -= beg_;
    beg_ = 0;
  }
  std::vector<std::uint8_t> buf_ = std::vector<std::uint8_t>(16384);
  std::size_t beg_ = 0, end_ = 0, skip_ = 0;
};

}  // namespace

class Conn;

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  std::vector<asio::io_context*> ios;
  std::atomic<std::size_t> next_io{0};
  std::shared_ptr<FileServer> fs;
  ServerOptions opt;
  Strand strand;  // listeners and the connection set
  // Under mu (listen and unlisten may come while it serves); each accept loop shares its acceptor.
  std::vector<std::shared_ptr<asio::local::stream_protocol::acceptor>> unix_acceptors;
  std::vector<std::shared_ptr<asio::ip::tcp::acceptor>> tcp_acceptors;
  std::vector<std::string> unix_paths;  // parallel to unix_acceptors
  std::uint16_t tcp_port = 0;
  std::mutex mu;
  std::unordered_map<Conn*, std::weak_ptr<Conn>> conns;
  std::size_t attached = 0;  // connections with a successful Tattach (on_connections)
  std::size_t sandboxed = 0; // connections of no_new_privs peers
  std::unordered_map<pid_t, std::size_t> sandboxed_by_pid;  // of them, per connecting process
  std::unordered_set<pid_t> refusing_pids;  // at max_sandboxed_per_process: logged once per episode
  std::unordered_map<std::string, std::size_t> uid_fids;  // fids per principal, auth fids not counted
  std::unordered_map<std::string, std::size_t> uid_requests;  // requests in flight on fids, per principal
  bool refusing = false;     // at max_connections: logged once per episode
  bool refusing_sandboxed = false;
  bool stopped = false;

  Impl(std::vector<asio::io_context*> ios, std::shared_ptr<FileServer> fs, ServerOptions opt)
      : ios(std::move(ios)), fs(std::move(fs)), opt(opt), strand(asio::make_strand(asio::any_io_executor(this->ios.front()->get_executor()))) {}

  asio::io_context& io() { return *ios.front(); }
  /// The io_context of the next connection.
  asio::io_context& pick() { return *ios[next_io++ % ios.size()]; }

  void add(Socket sock, Peer peer);
  void count_attached() {
    std::lock_guard lk(mu);
    attached++;
    if (opt.on_connections) opt.on_connections(attached);
  }
  bool uid_room(const std::string& uid) {
    std::lock_guard lk(mu);
    auto it = uid_fids.find(uid);
    return it == uid_fids.end() || it->second < MAX_FIDS_PER_UID;
  }
  void count_fid(const std::string& uid, bool added) {
    std::lock_guard lk(mu);
    count(uid_fids, uid, added);
  }
  /// One more request in flight for principal `uid`, if it has room.
  bool charge_request(const std::string& uid) {
    std::lock_guard lk(mu);
    if (auto it = uid_requests.find(uid); it != uid_requests.end() && it->second >= max_sandboxed_requests_per_uid) return false;
    count(uid_requests, uid, true);
    return true;
  }
  void uncharge_request(const std::string& uid) {
    std::lock_guard lk(mu);
    count(uid_requests, uid, false);
  }
  static void count(std::unordered_map<std::string, std::size_t>& m, const std::string& uid, bool added) {
    if (added) {
      m[uid]++;
    } else if (auto it = m.find(uid); it != m.end() && --it->second == 0) {
      m.erase(it);
    }
  }
  void forget(Conn* c, bool was_attached, const Peer& peer) {
    std::lock_guard lk(mu);
    if (!conns.erase(c)) return;
    if (peer.no_new_privs) sandboxed--;
    if (peer.no_new_privs && peer.known) {
      refusing_pids.erase(peer.pid);
      if (auto it = sandboxed_by_pid.find(peer.pid); it != sandboxed_by_pid.end() && --it->second == 0) sandboxed_by_pid.erase(it);
    }
    if (!was_attached) return;
    attached--;
    if (opt.on_connections) opt.on_connections(attached);
  }
};

// One connection, like plan9port's Srv: the reader takes frames out of the byte stream, each
// T-message has its own function (the table in handler_of), every reply leaves through respond()
// once, and the writer drains the replies. Everything runs on the connection's strand.
class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(std::shared_ptr<Server::Impl> srv, Socket sock, Peer peer)
      : srv_(std::move(srv)), fs_(srv_->fs), sock_(std::move(sock)), strand_(asio::make_strand(sock_.get_executor())),
        peer_(peer), attach_deadline_(strand_), stall_(strand_), drain_(strand_), linger_(strand_) {
    sock_.non_blocking(true);
  }

  ~Conn() { clear_fids(); }  // their principals' counts, however the connection ended

  Strand& strand() { return strand_; }

  void start() {
    asio::co_spawn(strand_, reader(), [self = shared_from_this()](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          spdlog::error("9p: connection reader failed: {}", x.what());
        }
      }
      self->close();
    });
  }

  // Stops serving: pending requests are cancelled and their replies dropped, fids freed; replies
  // already queued are still written (so `ctl kill` gets its `ok`), then the socket closes.
  void close() {
    if (closed_) return;
    closed_ = true;
    abort_requests();
    clear_fids();
    drain_.cancel();
    linger_.cancel();
    std::error_code ec;
    sock_.shutdown(asio::socket_base::shutdown_receive, ec);  // ends the reader
    if (writing_) return;  // the writer closes the socket when it is done
    if (!pending_.empty()) return start_write();
    close_socket();
  }

  // The server is going away: every pending request gets its shutdown reply. Then the
  // connection lingers a moment for the clunks that follow a read's end of file (plan9port's
  // `9p read` sends one, and prints `Broken pipe` when the connection is already gone): a clunk
  // is answered without reaching the file server, anything else gets `server shutting down`.
  // It closes when the client hangs up, or after the linger, as any other connection does.
  void stop() {
    std::vector<ReqPtr> pending;  // respond() edits reqs_: walk a copy
    for (auto& [tag, req] : reqs_)
      if (req->t.type != Tflush) pending.push_back(req);
    for (auto& req : pending) {
      if (closed_) return;  // a failed write closed the connection
      respond(req, shutdown_reply(req->t, req->fid && fs_->ends_at_shutdown(*req->fid)));
      req->cancel.emit(asio::cancellation_type::terminal);
    }
    if (closed_ || pending.empty()) return close();
    stopping_ = true;
    linger_.expires_after(std::chrono::milliseconds(250));
    linger_.async_wait([self = shared_from_this()](std::error_code) { self->close(); });
  }

 private:
  // ---- Reading: frames out of the byte stream --------------------------------------------

  asio::awaitable<void> reader() {
    watch_attach();  // here, on the strand: the timer is the connection's like everything else
    for (;;) {
      Next next = serve_frames();
      if (next.what == Next::End) co_return;
      write_pending();
      if (next.what == Next::Drain) {
        if (backlogged()) co_await drained();
      } else if (!co_await fill(next.want)) {
        co_return;
      }
      if (closed_) co_return;
    }
  }

  // What the reader does once it has served what it could: read (`want` unread bytes are needed
  // for the next decision), wait for the writer to drain the backlog, or end the connection.
  struct Next {
    enum { Read, Drain, End } what;
    std::size_t want = 0;
  };

  // Serves the whole frames read so far, until the replies waiting pass the backlog limit; the
  // replies of one read go out in one write.
  Next serve_frames() {
    batching_ = true;
    rb_.drop_skipped();
    Next next = serve_buffered();
    batching_ = false;
    return next;
  }

  Next serve_buffered() {
    while (!rb_.skipping()) {
      if (backlogged()) return {Next::Drain};
      Framing fr = frame_at(rb_.unread(), frame_limit());
      switch (fr.kind) {
        case Framing::More: return {Next::Read, fr.size};
        case Framing::Bad:
          spdlog::warn("9p: frame of {} bytes: closing the connection", fr.size);
          return {Next::End};
        case Framing::Oversize:
          refuse(tag_of(rb_.unread()), err::message_too_large);
          rb_.skip(fr.size);
          break;
        case Framing::Whole:
          frame(rb_.unread().first(fr.size));
          rb_.consume(fr.size);
          if (closed_) return {Next::End};
          break;
      }
    }
    return {Next::Read};
  }

  asio::awaitable<bool> fill(std::size_t want) {
    auto room = rb_.room(want);
    auto [ec, n] = co_await sock_.async_read_some(asio::buffer(room.data(), room.size()), tuple_awaitable);
    if (ec || closed_) co_return false;
    rb_.filled(n);
    co_return true;
  }

  // The largest frame either side may send: msize once negotiated.
  std::uint32_t frame_limit() const { return msize_ ? msize_ : srv_->opt.max_msize; }

  // Replies not yet written; past two msize the reader stops until the client reads.
  std::size_t unsent() const { return pending_.size() + inflight_.size() - written_; }
  bool backlogged() const { return unsent() > 2 * std::size_t{frame_limit()}; }

  // Returns when the writer has brought the backlog down (or the connection closed).
  asio::awaitable<void> drained() {
    drain_.expires_at(asio::steady_timer::time_point::max());
    co_await drain_.async_wait(tuple_awaitable);
  }

  // ---- Requests: one function per T-message, like srv.c's sversion ... swstat -------------

  struct Handler {
    void (Conn::*serve)(const ReqPtr&);
    bool names_fid;  // t.fid must be a fid of the connection: looked up before serve runs
  };

  static const Handler* handler_of(std::uint8_t type) {
    static constexpr Handler table[] = {
        {&Conn::sversion, false}, {&Conn::sauth, false}, {&Conn::sattach, false},
        {nullptr, false} /* Terror */, {&Conn::sflush, false}, {&Conn::swalk, true},
        {&Conn::sopen, true}, {&Conn::screate, true}, {&Conn::sread, true},
        {&Conn::swrite, true}, {&Conn::sclunk, true}, {&Conn::sremove, true},
        {&Conn::sstat, true}, {&Conn::swstat, true},
    };
    if (type < Tversion || type > Twstat || type % 2) return nullptr;
    const Handler& h = table[(type - Tversion) / 2];
    return h.serve ? &h : nullptr;
  }

  void frame(std::span<const std::uint8_t> bytes) {
    auto t = decode(bytes);
    if (!t) return refuse(tag_of(bytes), t.ename());
    if (spdlog::should_log(spdlog::level::trace)) spdlog::trace("9p <- {} tag {}", type_name(t->type), t->tag);
    request(std::move(*t));
  }

  void request(Fcall t) {
    const Handler* h = handler_of(t.type);
    if (!h) return refuse(t.tag, err::unknown_message);  // an R-message sent to a server
    if (stopping_ && t.type != Tclunk) return refuse(t.tag, err::shutting_down);
    if (t.type != Tversion) {
      if (!msize_) return refuse(t.tag, err::no_version);
      if (reqs_.contains(t.tag)) return refuse(t.tag, err::duplicate_tag);
      const std::size_t cap = peer_.no_new_privs ? max_sandboxed_requests : max_requests;
      if (reqs_.size() >= (t.type == Tflush || t.type == Tclunk ? 2 * cap : cap)) return refuse(t.tag, too_many_requests);
    }
    auto req = std::make_shared<Req>();
    req->t = std::move(t);
    if (req->t.type != Tversion) reqs_[req->t.tag] = req;
    if (h->names_fid && !(req->fid = lookup(req->t.fid))) return fail(req, err::unknown_fid);
    if (req->fid && peer_.no_new_privs && !is_auth(*req->fid) && req->t.type != Tclunk) {
      if (!srv_->charge_request(req->fid->uid)) return fail(req, too_many_requests);
      req->charged = req->fid->uid;
    }
    (this->*h->serve)(req);
  }

  void sversion(const ReqPtr& req) {
    const Fcall& t = req->t;
    abort_requests();
    clear_fids();
    msize_ = 0;
    if (t.msize < MIN_MSIZE) return fail(req, err::msize_too_small);
    Fcall r = reply_to(t);
    r.version = negotiate_version(t.version);
    r.msize = std::min(t.msize, srv_->opt.max_msize);
    if (r.version == VERSION9P) msize_ = r.msize;
    respond(req, std::move(r));
  }

  void sauth(const ReqPtr& req) {
    const Fcall& t = req->t;
    if (fids_.contains(t.afid)) return fail(req, err::duplicate_fid);
    if (auto st = fid_room(true, t.uname); !st) return fail(req, st.ename());
    auto f = new_fid(t.afid, t.uname);
    if (auto st = fs_->auth(*f, t.uname, t.aname); !st) return fail(req, st.ename());
    f->qid.type |= QTAUTH;
    add_fid(f);
    Fcall r = reply_to(t);
    r.aqid = f->qid;
    respond(req, std::move(r));
  }

  void sattach(const ReqPtr& req) {
    const Fcall& t = req->t;
    if (fids_.contains(t.fid)) return fail(req, err::duplicate_fid);
    if (auto st = fid_room(false, t.uname); !st) return fail(req, st.ename());
    std::shared_ptr<Fid> af;
    if (t.afid != NOFID) {
      af = lookup(t.afid);
      if (!af) return fail(req, err::unknown_fid);
      if (!is_auth(*af)) return fail(req, "not an auth fid");
    }
    auto f = new_fid(t.fid, t.uname);
    if (auto st = fs_->attach(*f, af.get(), t.uname, t.aname); !st) return fail(req, st.ename());
    add_fid(f);
    became_attached();
    Fcall r = reply_to(t);
    r.qid = f->qid;
    respond(req, std::move(r));
  }

  // The requests still waiting on the fid a Tclunk or Tremove frees are cancelled, each answered
  // `interrupted`: what they wait for (a sub-agent, an LLM request, toolsrv) ends with the fid,
  // and their tags are free again (a client that clunks without flushing first would otherwise
  // fill its connection's requests in flight with reads nobody can end).
  void abandon(const ReqPtr& gone) {
    if (!gone->fid) return;
    std::vector<ReqPtr> waiting;  // cancelling may answer at once, which edits reqs_
    for (auto& [tag, r] : reqs_)
      if (r != gone && r->fid == gone->fid) waiting.push_back(r);
    for (auto& r : waiting) r->cancel.emit(asio::cancellation_type::terminal);
  }

  // A flush waits for the request it names (directly, or through a pending Tflush of it), which
  // is cancelled and answered by no reply; its Rflush goes out when that request ends.
  void sflush(const ReqPtr& req) {
    auto old = req->t.oldtag == req->t.tag ? nullptr : flush_target(req->t.oldtag);
    if (!old) return respond(req, reply_to(req->t));
    old->flushes.push_back(req);
    if (old->flushed) return;
    old->flushed = true;
    old->cancel.emit(asio::cancellation_type::terminal);
  }

  ReqPtr flush_target(std::uint16_t tag) {
    for (auto it = reqs_.find(tag); it != reqs_.end(); it = reqs_.find(it->second->t.oldtag))
      if (it->second->t.type != Tflush) return it->second;
    return nullptr;
  }

  void swalk(const ReqPtr& req) {
    const Fcall& t = req->t;
    const Fid& f = *req->fid;
    if (f.is_open()) return fail(req, err::cannot_clone_open_fid);
    bool fresh = t.newfid != t.fid;
    if (fresh && fids_.contains(t.newfid)) return fail(req, err::duplicate_fid);
    if (fresh)
      if (auto st = fid_room(is_auth(f), f.uid); !st) return fail(req, st.ename());
    if (!t.wname.empty() && !f.is_dir()) return fail(req, err::walk_in_non_directory);
    if (t.wname.empty() && !is_auth(f))
      if (auto st = fs_->clone(f); !st) return fail(req, st.ename());
    auto w = std::make_shared<Fid>();
    w->num = t.newfid;
    w->qid = f.qid;
    w->uid = f.uid;
    w->file = f.file;
    w->peer = f.peer;
    w->conn_buffered = f.conn_buffered;
    Fcall r = reply_to(t);
    for (std::size_t i = 0; i < t.wname.size(); i++) {
      if (!w->is_dir()) {
        if (i == 0) return fail(req, err::walk_in_non_directory);
        break;
      }
      if (auto st = fs_->walk1(*w, t.wname[i]); !st) {
        if (i == 0) return fail(req, st.ename());
        break;
      }
      r.wqid.push_back(w->qid);
    }
    if (r.wqid.size() == t.wname.size()) add_fid(w);  // partial walks create no fid
    respond(req, std::move(r));
  }

  void sopen(const ReqPtr& req) {
    const Fcall& t = req->t;
    Fid& f = *req->fid;
    if (f.is_open()) return fail(req, err::already_open);
    if (t.mode & ~(3 | OTRUNC | ORCLOSE)) return fail(req, err::bad_mode);
    std::uint8_t rw = t.mode & 3;
    if (f.is_dir() && ((rw != OREAD && rw != OEXEC) || (t.mode & OTRUNC)))  // ORCLOSE: the server's call
      return fail(req, err::is_directory);
    if (is_auth(f)) return fail(req, err::bad_mode);
    if (auto st = fs_->open(f, t.mode); !st) return fail(req, st.ename());
    f.omode = t.mode;
    respond(req, opened(t, f));
  }

  void screate(const ReqPtr& req) {
    const Fcall& t = req->t;
    Fid& f = *req->fid;
    if (f.is_open()) return fail(req, err::already_open);
    if (auto st = fs_->create(f, t.name, t.perm, t.mode); !st) return fail(req, st.ename());
    f.omode = t.mode;
    respond(req, opened(t, f));
  }

  Fcall opened(const Fcall& t, const Fid& f) const {
    Fcall r = reply_to(t);
    r.qid = f.qid;
    r.iounit = msize_ - IOHDRSZ;
    return r;
  }

  void sread(const ReqPtr& req) {
    Fid& f = *req->fid;
    if (!is_auth(f) && (!f.is_open() || (f.omode & 3) == OWRITE)) return fail(req, err::not_open_read);
    req->t.count = std::min(req->t.count, msize_ - IOHDRSZ);
    if (f.is_dir()) return sdirread(req);
    answer(req);
  }

  void sdirread(const ReqPtr& req) {
    const Fcall& t = req->t;
    Fid& f = *req->fid;
    if (t.offset == 0) {
      auto entries = fs_->readdir(f);
      if (!entries) return fail(req, entries.ename());
      f.dir_entries = std::move(*entries);
      f.dir_index = 0;
      f.dir_offset = 0;
    } else if (t.offset != f.dir_offset) {
      return fail(req, err::bad_offset);
    } else if (auto st = fs_->dir_alive(f); !st) {
      return fail(req, st.ename());
    }
    std::vector<std::uint8_t> out;
    while (f.dir_index < f.dir_entries.size()) {  // whole entries only
      const Dir& d = f.dir_entries[f.dir_index];
      if (out.size() + dir_size(d) > t.count || !encode_dir(d, out)) break;
      f.dir_index++;
    }
    f.dir_offset += out.size();
    Fcall r = reply_to(t);
    r.data.assign(out.begin(), out.end());
    respond(req, std::move(r));
  }

  void swrite(const ReqPtr& req) {
    const Fid& f = *req->fid;
    if (!is_auth(f) && (!f.is_open() || ((f.omode & 3) != OWRITE && (f.omode & 3) != ORDWR)))
      return fail(req, err::not_open_write);
    answer(req);
  }

  void sclunk(const ReqPtr& req) {
    drop_fid(req->t.fid);
    abandon(req);
    const Fid& f = *req->fid;
    if (stopping_ || (!f.is_open() && !is_auth(f))) return respond(req, reply_to(req->t));
    answer(req);
  }

  void sremove(const ReqPtr& req) {
    drop_fid(req->t.fid);  // removed or not, the fid is gone (remove(5))
    abandon(req);
    if (auto st = fs_->remove(*req->fid); !st) return fail(req, st.ename());
    respond(req, reply_to(req->t));
  }

  void sstat(const ReqPtr& req) {
    auto d = fs_->stat(*req->fid);
    if (!d) return fail(req, d.ename());
    auto bytes = encode_dir(*d);
    if (!bytes) return fail(req, bytes.ename());
    Fcall r = reply_to(req->t);
    r.stat = std::move(*bytes);
    respond(req, std::move(r));  // send() refuses it if it does not fit msize
  }

  // The stat is decoded once, where the wstat may wait (wait()).
  void swstat(const ReqPtr& req) { answer(req); }

  // Read, write, clunk and wstat: answered at once when the file system can, else a coroutine waits.
  void answer(const ReqPtr& req) {
    if (auto r = fs_->answer_now(*req->fid, req->t)) {
      if (r->type == Rread && r->data.size() > req->t.count) r->data.resize(req->t.count);
      return respond(req, std::move(*r));
    }
    asio::co_spawn(strand_, run(shared_from_this(), req),
                   asio::bind_cancellation_slot(req->cancel.slot(), [req](std::exception_ptr) {}));
  }

  // The waiting part of read, write, clunk and wstat. Never lets an exception escape: every path responds.
  // `self` keeps the connection alive while the request waits.
  asio::awaitable<void> run([[maybe_unused]] std::shared_ptr<Conn> self, ReqPtr req) {
    Fcall r;
    try {
      r = co_await wait(*req);
    } catch (const std::system_error& e) {
      r = rerror(req->t.tag, e.code() == asio::error::operation_aborted ? err::interrupted : e.what());
    } catch (const std::exception& e) {
      spdlog::error("9p: {} handler failed: {}", type_name(req->t.type), e.what());
      r = rerror(req->t.tag, e.what());
    }
    respond(req, std::move(r));
  }

  asio::awaitable<Fcall> wait(Req& req) {
    Fcall& t = req.t;
    Fid& f = *req.fid;
    Fcall r = reply_to(t);
    if (t.type == Tread) {
      auto data = co_await fs_->read(f, t.offset, t.count);
      if (!data) co_return rerror(t.tag, data.ename());
      r.data = std::move(*data);
      if (r.data.size() > t.count) r.data.resize(t.count);
    } else if (t.type == Twrite) {
      auto n = co_await fs_->write(f, t.offset, std::move(t.data));
      if (!n) co_return rerror(t.tag, n.ename());
      r.count = *n;
    } else if (t.type == Twstat) {
      const auto d = decode_dir(t.stat);
      if (!d) co_return rerror(t.tag, d.ename());
      if (auto st = co_await fs_->wstat(f, *d); !st) co_return rerror(t.tag, st.ename());
    } else if (auto st = co_await fs_->clunk(f); !st) {
      co_return rerror(t.tag, st.ename());
    }
    co_return r;
  }

  // ---- Fids ---------------------------------------------------------------------------------

  std::shared_ptr<Fid> lookup(std::uint32_t num) {
    auto it = fids_.find(num);
    return it == fids_.end() ? nullptr : it->second;
  }

  std::shared_ptr<Fid> new_fid(std::uint32_t num, const std::string& uname) {
    auto f = std::make_shared<Fid>();
    f->num = num;
    f->uid = uname;
    f->peer = peer_;
    f->conn_buffered = buffered_;
    return f;
  }

  // Whether one more fid (an auth fid when `auth`, else one of principal `uid`) fits the caps.
  Status fid_room(bool auth, const std::string& uid) const {
    if (auth && nauth_ >= MAX_AUTH_FIDS) return error(err::too_many_auth_fids);
    if (fids_.size() >= MAX_FIDS) return error(err::too_many_fids);
    if (!auth && peer_.no_new_privs && !srv_->uid_room(uid)) return error(err::too_many_fids);
    return {};
  }

  // Auth fids are not their claimed principal's: its count is of fids attached as it. Only
  // sandboxed connections count: the user's own clients (the hostowner's, not no_new_privs) are
  // capped per connection, and one that leaks fids never locks the user's others out.
  void counted(const Fid& f, bool added) {
    if (is_auth(f)) nauth_ += added ? 1 : -1;
    else if (peer_.no_new_privs) srv_->count_fid(f.uid, added);
  }

  void add_fid(std::shared_ptr<Fid> f) {
    auto& slot = fids_[f->num];
    if (slot) counted(*slot, false);
    counted(*f, true);
    slot = std::move(f);
  }

  void drop_fid(std::uint32_t num) {
    auto it = fids_.find(num);
    if (it == fids_.end()) return;
    counted(*it->second, false);
    fids_.erase(it);
  }

  void clear_fids() {
    for (const auto& [num, f] : fids_) counted(*f, false);
    fids_.clear();
  }

  // ---- Replies: one respond path; every frame that goes out obeys 9P's limits ---------------

  // The single exit of every request: refuses a second reply, drops the reply of a flushed
  // request, then answers the flushes that waited for it.
  void respond(const ReqPtr& req, Fcall r) {
    if (req->answered) {
      // stop() answered the pending requests itself: their handlers' own ends are expected.
      if (!closed_ && !stopping_) spdlog::error("9p: second reply to {} tag {} refused", type_name(req->t.type), req->t.tag);
      return;
    }
    req->answered = true;
    uncharge(*req);
    if (auto it = reqs_.find(req->t.tag); it != reqs_.end() && it->second == req) reqs_.erase(it);
    r.tag = req->t.tag;
    if (!req->flushed) send(std::move(r));
    for (auto& f : req->flushes) respond(f, reply_to(f->t));
    req->flushes.clear();
    req->fid.reset();
  }

  void fail(const ReqPtr& req, std::string ename) { respond(req, rerror(req->t.tag, std::move(ename))); }

  void uncharge(Req& req) {
    if (!req.charged) return;
    srv_->uncharge_request(*req.charged);
    req.charged.reset();
  }

  // The Rerror of a frame that never became a request (undecodable, duplicate tag, ...).
  void refuse(std::uint16_t tag, std::string ename) { send(rerror(tag, std::move(ename))); }

  // An Rerror's text is made one line and cut to ERRMAX-1 bytes (err::cut); any other reply
  // over msize becomes `message larger than msize`; a reply the codec cannot encode becomes the
  // codec's reason.
  void send(Fcall r) {
    if (closed_) return;
    if (r.type == Rerror) r.ename = err::cut(r.ename);
    else if (encoded_size(r) > frame_limit()) r = rerror(r.tag, err::message_too_large);
    if (spdlog::should_log(spdlog::level::trace)) spdlog::trace("9p -> {} tag {}", type_name(r.type), r.tag);
    if (auto st = encode(r, pending_); !st) {
      spdlog::error("9p: {} tag {}: {}", type_name(r.type), r.tag, st.ename());
      (void)encode(rerror(r.tag, st.ename()), pending_);
    }
    if (batching_) return;  // serve_frames writes the replies of one read at once
    // A reply of a request that resumed on its own (a blocked read woken by a change) goes out
    // once the handlers queued on this strand have run: the thousand readers of one stream on a
    // connection, woken together, get one write instead of a thousand.
    if (flush_posted_) return;
    flush_posted_ = true;
    asio::post(strand_, [self = shared_from_this()] {
      self->flush_posted_ = false;
      self->write_pending();
    });
  }

  // ---- Writing --------------------------------------------------------------------------------

  // Most replies fit the socket buffer: write them now, and go async only for what is left.
  void write_pending() {
    if (writing_ || pending_.empty() || !sock_.is_open()) return;
    std::error_code ec;
    std::size_t n = sock_.write_some(asio::buffer(pending_), ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) return hang_up();
    pending_.erase(pending_.begin(), pending_.begin() + n);
    if (!pending_.empty()) start_write();
  }

  void start_write() {
    writing_ = true;
    std::swap(pending_, inflight_);
    pending_.clear();
    written_ = 0;
    watch_writes();
    write_more();
  }

  void write_more() {
    sock_.async_write_some(asio::buffer(inflight_.data() + written_, inflight_.size() - written_),
                           asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t n) {
                             self->wrote(ec, n);
                           }));
  }

  void wrote(std::error_code ec, std::size_t n) {
    if (ec) {
      writing_ = false;
      return hang_up();
    }
    last_write_ = Clock::now();
    written_ += n;
    if (!backlogged()) drain_.cancel();  // the reader may go on
    if (written_ < inflight_.size()) return write_more();
    writing_ = false;
    inflight_.clear();
    written_ = 0;
    if (!pending_.empty()) start_write();
    else if (closed_) close_socket();
  }

  // A write in flight that makes no progress for write_timeout ends the connection.
  void watch_writes() {
    last_write_ = Clock::now();
    if (watching_) return;
    watching_ = true;
    stall_.expires_at(last_write_ + srv_->opt.write_timeout);
    stall_.async_wait([self = shared_from_this()](std::error_code ec) { self->watched(ec); });
  }

  void watched(std::error_code ec) {
    watching_ = false;
    if (ec || !writing_ || !sock_.is_open()) return;
    if (Clock::now() - last_write_ < srv_->opt.write_timeout) {
      watching_ = true;
      stall_.expires_at(last_write_ + srv_->opt.write_timeout);
      stall_.async_wait([self = shared_from_this()](std::error_code ec) { self->watched(ec); });
      return;
    }
    spdlog::warn("9p: replies unread for {} ms: closing the connection", srv_->opt.write_timeout.count());
    hang_up();
  }

  // ---- Attach and the end of a connection ---------------------------------------------------

  // A connection that has not attached by attach_timeout is closed.
  void watch_attach() {
    attach_deadline_.expires_after(srv_->opt.attach_timeout);
    attach_deadline_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec || self->attached_ || self->closed_) return;
      spdlog::info("9p: no attach within {} ms: closing the connection", self->srv_->opt.attach_timeout.count());
      self->hang_up();
    });
  }

  void became_attached() {
    if (attached_) return;
    attached_ = true;
    attach_deadline_.cancel();
    srv_->count_attached();
  }

  void abort_requests() {
    for (auto& [tag, req] : reqs_) {
      req->flushed = true;
      uncharge(*req);
      req->flushes.clear();
      req->cancel.emit(asio::cancellation_type::terminal);
    }
    reqs_.clear();
  }

  // Ends the connection without writing what is still queued.
  void hang_up() {
    pending_.clear();
    close();
    close_socket();
  }

  void close_socket() {
    if (!sock_.is_open()) return;
    std::error_code ec;
    sock_.shutdown(asio::socket_base::shutdown_both, ec);
    sock_.close(ec);
    attach_deadline_.cancel();
    stall_.cancel();
    drain_.cancel();
    srv_->forget(this, attached_, peer_);
  }

  std::shared_ptr<Server::Impl> srv_;
  std::shared_ptr<FileServer> fs_;
  Socket sock_;
  Strand strand_;
  Peer peer_;
  std::uint32_t msize_ = 0;  // 0 until a Tversion succeeds
  bool closed_ = false;
  bool attached_ = false;    // a Tattach has succeeded (sticky: the connection has proved itself)
  std::unordered_map<std::uint32_t, std::shared_ptr<Fid>> fids_;
  std::size_t nauth_ = 0;    // auth fids among fids_
  std::shared_ptr<std::size_t> buffered_ = std::make_shared<std::size_t>(0);  // every Fid's conn_buffered
  std::unordered_map<std::uint16_t, ReqPtr> reqs_;  // pending requests by tag, Tflushes included
  ReadBuffer rb_;
  bool batching_ = false;  // the reader is serving the frames of one read
  bool flush_posted_ = false;  // a write_pending is queued on the strand
  std::vector<std::uint8_t> pending_, inflight_;
  std::size_t written_ = 0;  // bytes of inflight_ written
  bool writing_ = false;
  bool watching_ = false;    // the stall timer is armed
  Clock::time_point last_write_;
  asio::steady_timer attach_deadline_, stall_, drain_, linger_;
  bool stopping_ = false;  // stop() ran: only clunks are answered until the linger ends
};

namespace {

// The `NoNewPrivs:` line of /proc/<pid>/status is `0`: false; anything else, or no such line or file: true.
bool status_says_no_new_privs(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  std::string text;
  char buf[4096];
  ssize_t n;
  while (text.size() < (1 << 16) && (n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const std::string key = "\nNoNewPrivs:";
  auto at = text.find(key);
  if (at == std::string::npos) return true;
  at += key.size();
  while (at < text.size() && (text[at] == ' ' || text[at] == '\t')) at++;
  return text.compare(at, 2, "0\n") != 0;
}

// Whether the process at the other end runs with no_new_privs. A pidfd pins that process
// (SO_PEERPIDFD, Linux 6.5; else pidfd_open of the SO_PEERCRED pid, which leaves only the moment
// between connect and accept): while it is not reaped its pid names no other process, so a
// status read before the pidfd is seen to name a live process is that process's.
bool peer_no_new_privs(int sock, pid_t pid) {
  int pidfd = -1;
  socklen_t len = sizeof pidfd;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0) pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return errno == ENOSYS ? status_says_no_new_privs(pid) : true;
  const bool nnp = status_says_no_new_privs(pid);
  // (glibc 2.36 declares the pidfd calls without C linkage: the system calls themselves)
  const bool alive = ::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) == 0;
  ::close(pidfd);
  return nnp || !alive;
}

Peer peer_of(int fd) {
  Peer p;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    p.known = true;
    p.pid = cred.pid;
    p.uid = cred.uid;
    p.gid = cred.gid;
    p.no_new_privs = peer_no_new_privs(fd, cred.pid);
  }
  return p;
}

// Failed accepts (EMFILE above all: the connection stays queued) are retried after a pause that
// doubles up to half a second, and logged once per episode: no spinning, no flooded log.
class AcceptBackoff {
 public:
  std::chrono::milliseconds failed(const std::error_code& ec) {
    if (failures_++ == 0) spdlog::warn("9p: accept: {}: retrying", ec.message());
    pause_ = std::min(pause_ * 2, max_pause);
    return pause_;
  }
  void succeeded() {
    if (failures_) spdlog::warn("9p: accepting again after {} failed accepts", failures_);
    failures_ = 0;
    pause_ = first_pause;
  }

 private:
  static constexpr std::chrono::milliseconds first_pause{5}, max_pause{500};
  std::chrono::milliseconds pause_ = first_pause;
  std::size_t failures_ = 0;
};

template <class Acceptor>
asio::awaitable<void> accept_loop(std::shared_ptr<Server::Impl> impl, std::shared_ptr<Acceptor> shared, bool unix_socket,
                                  std::uint64_t tag) {
  Acceptor& acceptor = *shared;
  AcceptBackoff backoff;
  asio::steady_timer pause(co_await asio::this_coro::executor);
  for (;;) {
    auto [ec, sock] = co_await acceptor.async_accept(impl->pick(), tuple_awaitable);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      pause.expires_after(backoff.failed(ec));
      co_await pause.async_wait(tuple_awaitable);
      continue;
    }
    backoff.succeeded();
    Peer peer = unix_socket ? peer_of(sock.native_handle()) : Peer{};
    peer.listener = tag;
    impl->add(Socket(std::move(sock)), peer);
  }
}

}  // namespace

// Past max_connections a connection is closed as soon as it is accepted (logged once per episode).
void Server::Impl::add(Socket sock, Peer peer) {
  std::shared_ptr<Conn> c;
  {
    std::lock_guard lk(mu);
    if (stopped) return;
    if (conns.size() >= opt.max_connections) {
      if (!refusing) spdlog::warn("9p: {} connections open: refusing new ones", conns.size());
      refusing = true;
      return;  // sock closes here
    }
    // Sandboxed peers (no_new_privs: tools) hold at most three quarters: a tool that opens
    // connections until it is refused leaves room for the user's clients, and for the ctl
    // that stops it.
    if (peer.no_new_privs && sandboxed >= opt.max_connections - opt.max_connections / 4) {
      if (!refusing_sandboxed) spdlog::warn("9p: {} connections of sandboxed processes open: refusing theirs", sandboxed);
      refusing_sandboxed = true;
      return;
    }
    if (peer.no_new_privs && peer.known) {
      auto& mine = sandboxed_by_pid[peer.pid];
      if (mine >= max_sandboxed_per_process) {
        if (refusing_pids.insert(peer.pid).second)
          spdlog::warn("9p: sandboxed process {} holds {} connections: refusing its next", peer.pid, mine);
        return;
      }
      mine++;
    }
    if (peer.no_new_privs) {
      refusing_sandboxed = false;
      sandboxed++;
    }
    if (refusing) spdlog::warn("9p: {} connections open: accepting again", conns.size());
    refusing = false;
    c = std::make_shared<Conn>(shared_from_this(), std::move(sock), peer);
    conns[c.get()] = c;
  }
  c->start();
}

Server::Server(asio::io_context& io, std::shared_ptr<FileServer> fs, ServerOptions opt)
    : Server(std::vector<asio::io_context*>{&io}, std::move(fs), opt) {}

Server::Server(std::vector<asio::io_context*> ios, std::shared_ptr<FileServer> fs, ServerOptions opt)
    : impl_(std::make_shared<Impl>(std::move(ios), std::move(fs), opt)) {}

Server::~Server() { stop(); }

std::uint16_t Server::tcp_port() const { return impl_->tcp_port; }

namespace {

void spawn_logged(const Strand& strand, asio::awaitable<void> a) {
  asio::co_spawn(strand, std::move(a), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      spdlog::error("9p: accept loop failed: {}", x.what());
    }
  });
}

Status make_socket_dir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return error(dir + ": not a directory");
    return {};
  }
  auto slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0)
    if (auto s = make_socket_dir(dir.substr(0, slash)); !s) return s;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return error(dir + ": " + std::strerror(errno));
  return {};
}

}  // namespace

Status Server::listen(const Address& a, std::uint64_t tag) {
  auto& impl = *impl_;
  std::error_code ec;
  if (a.kind == Address::Tcp) {
    asio::ip::tcp::resolver resolver(impl.io());
    auto results = resolver.resolve(a.host, a.port, ec);
    if (ec || results.empty()) return error(a.text + ": " + (ec ? ec.message() : "no address"));
    auto acc = std::make_shared<asio::ip::tcp::acceptor>(impl.strand);
    asio::ip::tcp::endpoint ep = *results.begin();
    acc->open(ep.protocol(), ec);
    if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acc->bind(ep, ec);
    if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return error(a.text + ": " + ec.message());
    impl.tcp_port = acc->local_endpoint().port();
    spawn_logged(impl.strand, accept_loop(impl_, acc, false, tag));
    std::lock_guard lk(impl.mu);
    impl.tcp_acceptors.push_back(std::move(acc));
    return {};
  }
  if (a.path.size() >= sizeof(sockaddr_un::sun_path)) return error(a.path + ": socket path too long");
  auto slash = a.path.rfind('/');
  if (slash != std::string::npos && slash > 0)
    if (auto s = make_socket_dir(a.path.substr(0, slash)); !s) return s;
  {
    asio::local::stream_protocol::socket probe(impl.io());
    probe.connect(asio::local::stream_protocol::endpoint(a.path), ec);
    if (!ec) return error(a.path + ": address in use by a live server");
    struct stat st;
    if (::lstat(a.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(a.path.c_str());
  }
  ec.clear();
  auto acc = std::make_shared<asio::local::stream_protocol::acceptor>(impl.strand);
  asio::local::stream_protocol::endpoint ep(a.path);
  acc->open(ep.protocol(), ec);
  // Linux makes the socket file with the mode of the socket's inode: set it before bind, so the
  // file never exists with a wider mode (a chmod after bind leaves a window).
  if (!ec && ::fchmod(acc->native_handle(), 0600) != 0) ec = std::error_code(errno, std::generic_category());
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return error(a.path + ": " + ec.message());
  std::lock_guard lk(impl.mu);
  if (impl.stopped) {
    ::unlink(a.path.c_str());
    return error(a.path + ": server stopped");
  }
  spawn_logged(impl.strand, accept_loop(impl_, acc, true, tag));
  impl.unix_paths.push_back(a.path);
  impl.unix_acceptors.push_back(std::move(acc));
  return {};
}

void Server::unlisten(const std::string& path) {
  auto impl = impl_;
  std::shared_ptr<asio::local::stream_protocol::acceptor> acc;
  {
    std::lock_guard lk(impl->mu);
    for (std::size_t k = 0; k < impl->unix_paths.size(); k++)
      if (impl->unix_paths[k] == path) {
        acc = impl->unix_acceptors[k];
        impl->unix_paths.erase(impl->unix_paths.begin() + static_cast<std::ptrdiff_t>(k));
        impl->unix_acceptors.erase(impl->unix_acceptors.begin() + static_cast<std::ptrdiff_t>(k));
        break;
      }
  }
  if (!acc) return;
  ::unlink(path.c_str());
  asio::post(impl->strand, [acc] {
    std::error_code ec;
    acc->close(ec);
  });
}

void Server::stop() {
  auto impl = impl_;
  std::vector<std::shared_ptr<Conn>> live;
  {
    std::lock_guard lk(impl->mu);
    if (impl->stopped) return;
    impl->stopped = true;
    for (auto& [p, w] : impl->conns)
      if (auto c = w.lock()) live.push_back(c);
  }
  std::vector<std::string> paths;
  {
    std::lock_guard lk(impl->mu);
    paths = impl->unix_paths;
  }
  for (auto& path : paths) ::unlink(path.c_str());
  asio::post(impl->strand, [impl] {
    std::error_code ec;
    std::lock_guard lk(impl->mu);
    for (auto& a : impl->unix_acceptors) a->close(ec);
    for (auto& a : impl->tcp_acceptors) a->close(ec);
  });
  for (auto& c : live) asio::post(c->strand(), [c] { c->stop(); });
}

}  // namespace p9
