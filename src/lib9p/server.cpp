#include "server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <atomic>
#include <cstring>
#include <mutex>
#include <spdlog/spdlog.h>
#include <unordered_map>

#include "codec.hpp"
#include "errors.hpp"

namespace p9 {

Status FileServer::auth(Fid&, const std::string&, const std::string&) { return error(err::auth_not_required); }
std::optional<Fcall> FileServer::answer_now(Fid&, const Fcall&) { return std::nullopt; }
asio::awaitable<Status> FileServer::clunk(Fid&) { co_return Status{}; }
Status FileServer::wstat(Fid&, const Dir& d) {
  if (is_null_wstat(d)) return {};
  return error(err::wstat_not_supported);
}
Status FileServer::create(Fid&, const std::string&, std::uint32_t, std::uint8_t) {
  return error(err::create_not_supported);
}
Status FileServer::remove(Fid&) { return error(err::remove_not_supported); }

bool is_null_wstat(const Dir& d) { return d == Dir::null(); }

namespace {

using Socket = asio::generic::stream_protocol::socket;
using Strand = asio::strand<asio::any_io_executor>;
constexpr auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);
constexpr std::uint32_t MAX_SKIP = 16u << 20;  // an oversized frame up to this is skipped, not fatal

std::uint32_t le32(const std::uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | std::uint32_t(p[3]) << 24; }

Fcall rerror(std::uint16_t tag, std::string ename) {
  Fcall r;
  r.type = Rerror;
  r.tag = tag;
  r.ename = std::move(ename);
  return r;
}

// The version the server speaks for a client's version string (version(5), spec §1.5).
std::string negotiate_version(const std::string& v) {
  std::string_view base(v);
  base = base.substr(0, base.find('.'));
  return base == VERSION9P ? VERSION9P : "unknown";
}

struct Req {
  Fcall t;
  std::shared_ptr<Fid> fid;
  asio::cancellation_signal cancel;
  bool flushed = false;                 // reply suppressed (flushed, or the connection is gone)
  std::vector<std::uint16_t> flushes;   // Tflush tags answered when this request ends
};

}  // namespace

class Conn;

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  std::vector<asio::io_context*> ios;
  std::atomic<std::size_t> next_io{0};
  std::shared_ptr<FileServer> fs;
  ServerOptions opt;
  Strand strand;  // listeners and the connection set
  std::vector<std::unique_ptr<asio::local::stream_protocol::acceptor>> unix_acceptors;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> tcp_acceptors;
  std::vector<std::string> unix_paths;
  std::uint16_t tcp_port = 0;
  std::mutex mu;
  std::unordered_map<Conn*, std::weak_ptr<Conn>> conns;
  bool stopped = false;

  Impl(std::vector<asio::io_context*> ios, std::shared_ptr<FileServer> fs, ServerOptions opt)
      : ios(std::move(ios)), fs(std::move(fs)), opt(opt), strand(asio::make_strand(asio::any_io_executor(this->ios.front()->get_executor()))) {}

  asio::io_context& io() { return *ios.front(); }
  /// The io_context of the next connection.
  asio::io_context& pick() { return *ios[next_io++ % ios.size()]; }

  void add(Socket sock, Peer peer);
  void forget(Conn* c) {
    std::lock_guard lk(mu);
    if (conns.erase(c) && opt.on_connections) opt.on_connections(conns.size());
  }
};

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(std::shared_ptr<Server::Impl> srv, Socket sock, Peer peer)
      : srv_(std::move(srv)), fs_(srv_->fs), sock_(std::move(sock)), strand_(asio::make_strand(sock_.get_executor())), peer_(peer) {
    sock_.non_blocking(true);
  }

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
    fids_.clear();
    std::error_code ec;
    sock_.shutdown(asio::socket_base::shutdown_receive, ec);  // ends the reader
    if (writing_) return;  // the writer closes the socket when it is done
    if (!pending_.empty()) return start_write();
    close_socket();
  }

  // The server is going away: a pending read ends as at end of file (the producer of a stream
  // is gone, so `9p read` and `ollie-9p read` finish cleanly), any other pending request fails;
  // then the connection closes as any other does.
  void stop() {
    // A failed write closes the connection, which clears reqs_: walk a copy.
    std::vector<std::shared_ptr<Req>> pending;
    for (auto& [tag, req] : reqs_)
      if (!req->flushed) pending.push_back(req);
    for (auto& req : pending) {
      if (closed_) return;
      Fcall r = req->t.type == Tread ? Fcall{} : rerror(req->t.tag, err::shutting_down);
      if (req->t.type == Tread) r.type = Rread;
      r.tag = req->t.tag;
      send(r);
      req->flushed = true;  // its own reply, should it still come, is dropped
    }
    close();
  }

 private:
  asio::awaitable<void> reader() {
    std::vector<std::uint8_t> buf(16384);
    std::size_t beg = 0, end = 0, skip = 0;
    for (;;) {
      if (skip) {
        std::size_t n = std::min(skip, end - beg);
        beg += n;
        skip -= n;
      }
      while (!skip && end - beg >= 4) {
        std::uint32_t size = le32(&buf[beg]);
        std::uint32_t limit = msize_ ? msize_ : srv_->opt.max_msize;
        if (size < 7) {
          spdlog::warn("9p: frame of {} bytes: closing the connection", size);
          co_return;
        }
        if (size > limit) {
          if (size > MAX_SKIP || end - beg < 7) {
            if (size > MAX_SKIP) {
              spdlog::warn("9p: frame of {} bytes: closing the connection", size);
              co_return;
            }
            break;
          }
          send(rerror(tag_of({&buf[beg], 7}), err::message_too_large));
          skip = size;
          std::size_t n = std::min<std::size_t>(skip, end - beg);
          beg += n;
          skip -= n;
          continue;
        }
        if (end - beg < size) {
          if (buf.size() < size) buf.resize(std::max<std::size_t>(size, buf.size() * 2));
          break;
        }
        batching_ = true;  // replies of this read's frames go out in one write
        frame({&buf[beg], size});
        beg += size;
        if (closed_) co_return;
      }
      batching_ = false;
      write_pending();
      if (beg == end) {
        beg = end = 0;
      } else if (beg > 0 && buf.size() - end < 4096) {
        std::memmove(buf.data(), buf.data() + beg, end - beg);
        end -= beg;
        beg = 0;
      }
      if (end == buf.size()) buf.resize(buf.size() * 2);
      auto [ec, n] = co_await sock_.async_read_some(asio::buffer(buf.data() + end, buf.size() - end), tuple_awaitable);
      if (ec || closed_) co_return;
      end += n;
    }
  }

  void frame(std::span<const std::uint8_t> bytes) {
    auto t = decode(bytes);
    if (!t) {
      send(rerror(tag_of(bytes), t.ename()));
      return;
    }
    if (spdlog::should_log(spdlog::level::trace)) spdlog::trace("9p <- {} tag {}", type_name(t->type), t->tag);
    if (t->type % 2 == 1) {  // an R-message sent to a server
      send(rerror(t->tag, err::unknown_message));
      return;
    }
    if (t->type == Tversion) return version(*t);
    if (!msize_) return send(rerror(t->tag, err::no_version));
    if (reqs_.contains(t->tag) || flushing_.contains(t->tag)) return send(rerror(t->tag, err::duplicate_tag));
    if (t->type == Tflush) return flush(*t);
    auto req = std::make_shared<Req>();
    req->t = std::move(*t);
    reqs_[req->t.tag] = req;
    dispatch(req);
  }

  void version(const Fcall& t) {
    abort_requests();
    fids_.clear();
    msize_ = 0;
    if (t.msize < MIN_MSIZE) return send(rerror(t.tag, err::msize_too_small));
    Fcall r;
    r.type = Rversion;
    r.tag = t.tag;
    r.version = negotiate_version(t.version);
    r.msize = std::min(t.msize, srv_->opt.max_msize);
    if (r.version == VERSION9P) msize_ = r.msize;
    send(r);
  }

  void flush(const Fcall& t) {
    if (auto it = reqs_.find(t.oldtag); it != reqs_.end()) {
      auto& old = it->second;
      old->flushes.push_back(t.tag);
      flushing_[t.tag] = old;
      if (!old->flushed) {
        old->flushed = true;
        old->cancel.emit(asio::cancellation_type::terminal);
      }
      return;
    }
    if (auto it = flushing_.find(t.oldtag); it != flushing_.end()) {  // a flush of a pending flush
      auto old = it->second;
      old->flushes.push_back(t.tag);
      flushing_[t.tag] = old;
      return;
    }
    Fcall r;
    r.type = Rflush;
    r.tag = t.tag;
    send(r);
  }

  void abort_requests() {
    for (auto& [tag, req] : reqs_) {
      req->flushed = true;
      req->flushes.clear();
      req->cancel.emit(asio::cancellation_type::terminal);
    }
    reqs_.clear();
    flushing_.clear();
  }

  std::shared_ptr<Fid> lookup(std::uint32_t num) {
    auto it = fids_.find(num);
    return it == fids_.end() ? nullptr : it->second;
  }

  void fail(const std::shared_ptr<Req>& req, std::string ename) { respond(req, rerror(req->t.tag, std::move(ename))); }

  void dispatch(const std::shared_ptr<Req>& req) {
    const Fcall& t = req->t;
    Fcall r;
    r.type = t.type + 1;
    r.tag = t.tag;
    switch (t.type) {
      case Tauth: {
        if (fids_.contains(t.afid)) return fail(req, err::duplicate_fid);
        auto f = new_fid(t.afid, t.uname);
        if (auto st = fs_->auth(*f, t.uname, t.aname); !st) return fail(req, st.ename());
        f->qid.type |= QTAUTH;
        fids_[t.afid] = f;
        r.aqid = f->qid;
        return respond(req, r);
      }
      case Tattach: {
        if (fids_.contains(t.fid)) return fail(req, err::duplicate_fid);
        std::shared_ptr<Fid> af;
        if (t.afid != NOFID) {
          af = lookup(t.afid);
          if (!af) return fail(req, err::unknown_fid);
          if (!(af->qid.type & QTAUTH)) return fail(req, "not an auth fid");
        }
        auto f = new_fid(t.fid, t.uname);
        if (auto st = fs_->attach(*f, af.get(), t.uname, t.aname); !st) return fail(req, st.ename());
        fids_[t.fid] = f;
        r.qid = f->qid;
        return respond(req, r);
      }
      case Twalk: return walk(req, r);
      case Topen: {
        auto f = lookup(t.fid);
        if (!f) return fail(req, err::unknown_fid);
        if (f->is_open()) return fail(req, err::already_open);
        if (t.mode & ~(3 | OTRUNC | ORCLOSE)) return fail(req, err::bad_mode);
        std::uint8_t rw = t.mode & 3;
        if (f->is_dir() && ((rw != OREAD && rw != OEXEC) || (t.mode & (OTRUNC | ORCLOSE)))) return fail(req, err::is_directory);
        if (f->qid.type & QTAUTH) return fail(req, err::bad_mode);
        if (auto st = fs_->open(*f, t.mode); !st) return fail(req, st.ename());
        f->omode = t.mode;
        r.qid = f->qid;
        r.iounit = msize_ - IOHDRSZ;
        return respond(req, r);
      }
      case Tcreate: {
        auto f = lookup(t.fid);
        if (!f) return fail(req, err::unknown_fid);
        if (f->is_open()) return fail(req, err::already_open);
        if (!f->is_dir()) return fail(req, "create in non-directory");
        if (t.name == "." || t.name == "..") return fail(req, "illegal name: " + t.name);
        if (auto st = fs_->create(*f, t.name, t.perm, t.mode); !st) return fail(req, st.ename());
        f->omode = t.mode;
        r.qid = f->qid;
        r.iounit = msize_ - IOHDRSZ;
        return respond(req, r);
      }
      case Tread: {
        auto f = lookup(t.fid);
        if (!f) return fail(req, err::unknown_fid);
        bool auth = f->qid.type & QTAUTH;
        if (!auth && (!f->is_open() || (f->omode & 3) == OWRITE)) return fail(req, err::not_open_read);
        req->fid = f;
        if (f->is_dir()) return dirread(req, r);
        return answer(req);
      }
      case Twrite: {
        auto f = lookup(t.fid);
        if (!f) return fail(req, err::unknown_fid);
        bool auth = f->qid.type & QTAUTH;
        if (!auth && (!f->is_open() || ((f->omode & 3) != OWRITE && (f->omode & 3) != ORDWR)))
          return fail(req, err::not_open_write);
        req->fid = f;
        return answer(req);
      }
      case Tclunk: {
        auto f = lookup(t.fid);
        if (!f) return fail(req, err::unknown_fid);
        fids_.erase(t.fid);
        if (!f->is_open() && !(f->qid.type & QTAUTH)) return respond(req, r);
        req->fid = f;
        return answer(req);
      }
      case Tremove: {
        auto f = lookup(t.fid);
        if (!f) return fail(req, err::unknown_fid);
        fids_.erase(t.fid);
        if (auto st = fs_->remove(*f); !st) return fail(req, st.ename());
        return respond(req, r);
      }
      case Tstat: {
        auto f = lookup(t.fid);
        if (!f) return fail(req, err::unknown_fid);
        auto d = fs_->stat(*f);
        if (!d) return fail(req, d.ename());
        r.stat = encode_dir(*d);
        if (encoded_size(r) > msize_) return fail(req, err::message_too_large);
        return respond(req, r);
      }
      case Twstat: {
        auto f = lookup(t.fid);
        if (!f) return fail(req, err::unknown_fid);
        auto d = decode_dir(t.stat);
        if (!d) return fail(req, d.ename());
        if (auto st = fs_->wstat(*f, *d); !st) return fail(req, st.ename());
        return respond(req, r);
      }
    }
    fail(req, err::unknown_message);
  }

  std::shared_ptr<Fid> new_fid(std::uint32_t num, const std::string& uname) {
    auto f = std::make_shared<Fid>();
    f->num = num;
    f->uid = uname;
    f->peer = peer_;
    return f;
  }

  void walk(const std::shared_ptr<Req>& req, Fcall& r) {
    const Fcall& t = req->t;
    auto f = lookup(t.fid);
    if (!f) return fail(req, err::unknown_fid);
    if (f->is_open()) return fail(req, err::cannot_clone_open_fid);
    if (t.newfid != t.fid && fids_.contains(t.newfid)) return fail(req, err::duplicate_fid);
    if (!t.wname.empty() && !f->is_dir()) return fail(req, err::walk_in_non_directory);
    auto w = std::make_shared<Fid>();
    w->num = t.newfid;
    w->qid = f->qid;
    w->uid = f->uid;
    w->file = f->file;
    w->peer = f->peer;
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
    if (r.wqid.size() == t.wname.size()) fids_[t.newfid] = w;  // partial walks create no fid
    respond(req, r);
  }

  void dirread(const std::shared_ptr<Req>& req, Fcall& r) {
    Fid& f = *req->fid;
    const Fcall& t = req->t;
    if (t.offset == 0) {
      auto entries = fs_->readdir(f);
      if (!entries) return fail(req, entries.ename());
      f.dir_entries = std::move(*entries);
      f.dir_index = 0;
      f.dir_offset = 0;
    } else if (t.offset != f.dir_offset) {
      return fail(req, err::bad_offset);
    }
    std::uint32_t count = std::min(t.count, msize_ - IOHDRSZ);
    std::vector<std::uint8_t> out;
    while (f.dir_index < f.dir_entries.size()) {
      const Dir& d = f.dir_entries[f.dir_index];
      if (out.size() + dir_size(d) > count) break;
      encode_dir(d, out);
      f.dir_index++;
    }
    f.dir_offset += out.size();
    r.data.assign(out.begin(), out.end());
    respond(req, r);
  }

  // Read, write and clunk: answered at once when the file system can, else a coroutine waits.
  void answer(const std::shared_ptr<Req>& req) {
    const Fcall& t = req->t;
    Fcall tt = t;
    if (t.type == Tread) tt.count = std::min(t.count, msize_ - IOHDRSZ);
    if (auto r = fs_->answer_now(*req->fid, tt)) {
      r->tag = t.tag;
      if (r->type == Rread && r->data.size() > tt.count) r->data.resize(tt.count);
      return respond(req, *r);
    }
    spawn(req);
  }

  void spawn(const std::shared_ptr<Req>& req) {
    asio::co_spawn(strand_, run(shared_from_this(), req),
                   asio::bind_cancellation_slot(req->cancel.slot(), [req](std::exception_ptr) {}));
  }

  // The waiting part of read, write and clunk. Never lets an exception escape: every path responds.
  // `self` keeps the connection alive while the request waits.
  asio::awaitable<void> run([[maybe_unused]] std::shared_ptr<Conn> self, std::shared_ptr<Req> req) {
    const Fcall& t = req->t;
    Fcall r;
    r.type = t.type + 1;
    r.tag = t.tag;
    try {
      Fid& f = *req->fid;
      switch (t.type) {
        case Tread: {
          auto data = co_await fs_->read(f, t.offset, std::min(t.count, msize_ - IOHDRSZ));
          if (!data) r = rerror(t.tag, data.ename());
          else r.data = std::move(*data);
          if (r.data.size() > t.count) r.data.resize(t.count);
          break;
        }
        case Twrite: {
          auto n = co_await fs_->write(f, t.offset, t.data);
          if (!n) r = rerror(t.tag, n.ename());
          else r.count = *n;
          break;
        }
        case Tclunk: {
          auto st = co_await fs_->clunk(f);
          if (!st) r = rerror(t.tag, st.ename());
          break;
        }
      }
    } catch (const std::system_error& e) {
      r = rerror(t.tag, e.code() == asio::error::operation_aborted ? err::interrupted : e.what());
    } catch (const std::exception& e) {
      spdlog::error("9p: {} handler failed: {}", type_name(t.type), e.what());
      r = rerror(t.tag, e.what());
    }
    respond(req, r);
  }

  // The single exit of every request: drops the reply of a flushed request, then answers its flushes.
  void respond(const std::shared_ptr<Req>& req, const Fcall& r) {
    if (auto it = reqs_.find(req->t.tag); it != reqs_.end() && it->second == req) reqs_.erase(it);
    if (!req->flushed) send(r);
    for (std::uint16_t ft : req->flushes) {
      flushing_.erase(ft);
      Fcall rf;
      rf.type = Rflush;
      rf.tag = ft;
      send(rf);
    }
    req->flushes.clear();
    req->fid.reset();
  }

  void close_socket() {
    if (!sock_.is_open()) return;
    std::error_code ec;
    sock_.shutdown(asio::socket_base::shutdown_both, ec);
    sock_.close(ec);
    srv_->forget(this);
  }

  void send(const Fcall& r) {
    if (closed_) return;
    if (spdlog::should_log(spdlog::level::trace)) spdlog::trace("9p -> {} tag {}", type_name(r.type), r.tag);
    encode(r, pending_);
    if (!batching_) write_pending();
  }

  // Most replies fit the socket buffer: write them now, and go async only for what is left.
  void write_pending() {
    if (writing_ || pending_.empty() || !sock_.is_open()) return;
    std::error_code ec;
    std::size_t n = sock_.write_some(asio::buffer(pending_), ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
      close();
      return close_socket();
    }
    pending_.erase(pending_.begin(), pending_.begin() + n);
    if (!pending_.empty()) start_write();
  }

  void start_write() {
    writing_ = true;
    std::swap(pending_, inflight_);
    pending_.clear();
    asio::async_write(sock_, asio::buffer(inflight_),
                      asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec, std::size_t) {
                        self->writing_ = false;
                        self->inflight_.clear();
                        if (ec) {
                          self->close();
                          return self->close_socket();
                        }
                        if (!self->pending_.empty()) self->start_write();
                        else if (self->closed_) self->close_socket();
                      }));
  }

  std::shared_ptr<Server::Impl> srv_;
  std::shared_ptr<FileServer> fs_;
  Socket sock_;
  Strand strand_;
  Peer peer_;
  std::uint32_t msize_ = 0;  // 0 until a Tversion succeeds
  bool closed_ = false;
  std::unordered_map<std::uint32_t, std::shared_ptr<Fid>> fids_;
  std::unordered_map<std::uint16_t, std::shared_ptr<Req>> reqs_;
  std::unordered_map<std::uint16_t, std::shared_ptr<Req>> flushing_;  // Tflush tag -> the request it waits on
  std::vector<std::uint8_t> pending_, inflight_;
  bool writing_ = false;
  bool batching_ = false;  // the reader is dispatching the frames of one read
};

namespace {

Peer peer_of(int fd) {
  Peer p;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    p.known = true;
    p.pid = cred.pid;
    p.uid = cred.uid;
    p.gid = cred.gid;
  }
  return p;
}

template <class Acceptor>
asio::awaitable<void> accept_loop(std::shared_ptr<Server::Impl> impl, Acceptor& acceptor, bool unix_socket) {
  for (;;) {
    auto [ec, sock] = co_await acceptor.async_accept(impl->pick(), tuple_awaitable);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      spdlog::warn("9p: accept: {}", ec.message());
      continue;
    }
    Peer peer = unix_socket ? peer_of(sock.native_handle()) : Peer{};
    impl->add(Socket(std::move(sock)), peer);
  }
}

}  // namespace

void Server::Impl::add(Socket sock, Peer peer) {
  auto c = std::make_shared<Conn>(shared_from_this(), std::move(sock), peer);
  {
    std::lock_guard lk(mu);
    if (stopped) return;
    conns[c.get()] = c;
    if (opt.on_connections) opt.on_connections(conns.size());
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

Status Server::listen(const Address& a) {
  auto& impl = *impl_;
  std::error_code ec;
  if (a.kind == Address::Tcp) {
    asio::ip::tcp::resolver resolver(impl.io());
    auto results = resolver.resolve(a.host, a.port, ec);
    if (ec || results.empty()) return error(a.text + ": " + (ec ? ec.message() : "no address"));
    auto acc = std::make_unique<asio::ip::tcp::acceptor>(impl.strand);
    asio::ip::tcp::endpoint ep = *results.begin();
    acc->open(ep.protocol(), ec);
    if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acc->bind(ep, ec);
    if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return error(a.text + ": " + ec.message());
    impl.tcp_port = acc->local_endpoint().port();
    spawn_logged(impl.strand, accept_loop(impl_, *acc, false));
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
  auto acc = std::make_unique<asio::local::stream_protocol::acceptor>(impl.strand);
  asio::local::stream_protocol::endpoint ep(a.path);
  acc->open(ep.protocol(), ec);
  // Linux makes the socket file with the mode of the socket's inode: set it before bind, so the
  // file never exists with a wider mode (a chmod after bind leaves a window).
  if (!ec && ::fchmod(acc->native_handle(), 0600) != 0) ec = std::error_code(errno, std::generic_category());
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return error(a.path + ": " + ec.message());
  impl.unix_paths.push_back(a.path);
  spawn_logged(impl.strand, accept_loop(impl_, *acc, true));
  impl.unix_acceptors.push_back(std::move(acc));
  return {};
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
  for (auto& path : impl->unix_paths) ::unlink(path.c_str());
  asio::post(impl->strand, [impl] {
    std::error_code ec;
    for (auto& a : impl->unix_acceptors) a->close(ec);
    for (auto& a : impl->tcp_acceptors) a->close(ec);
  });
  for (auto& c : live) asio::post(c->strand(), [c] { c->stop(); });
}

}  // namespace p9
