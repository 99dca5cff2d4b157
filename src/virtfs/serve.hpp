#pragma once
/// The one adapter that serves any virtfs tree through lib9p (spec §1.5-§1.7): generic walk,
/// stat and directory reads over the declaration; per-fid state for each file kind; mode bits
/// checked at walk and open against the fid's principal.

#include <algorithm>
#include <cassert>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <utility>

#include "buffer.hpp"
#include "dsl.hpp"
#include "lib9p/errors.hpp"
#include "lib9p/server.hpp"

namespace virtfs {

/// What Tattach presents, for the application to decide who the client is.
struct AttachRequest {
  std::string uname;
  std::string aname;
  bool has_afid = false;
  std::string afid_uname;  ///< the uname of the Tauth that made the afid
  std::string secret;      ///< the bytes written to the afid
  p9::Peer peer;
};

/// The application's side of authentication and the root context.
template <class Ctx>
struct Access {
  std::string hostowner;  ///< uid of every node without an Owner
  /// Tauth: ok hands out an auth fid (whose writes carry a secret); an error is the Rerror.
  std::function<p9::Status(const std::string& uname, const std::string& aname, const p9::Peer& peer)> auth =
      [](const std::string&, const std::string&, const p9::Peer&) { return p9::Status(p9::error(p9::err::auth_not_required)); };
  /// Tattach: the principal, or the error to answer.
  std::function<p9::Result<Principal>(const AttachRequest&)> attach;
  /// The context handlers of the root see for a principal.
  std::function<Ctx(const Principal&)> root;
  /// Whether the object a context stands in is gone (spec §1.5): every operation on its fids
  /// answers this error, but a Stream read (EOF, from its cursor), a reply an Rdwr fid already
  /// holds (served to its end) and Tclunk (always frees the fid).
  std::function<p9::Status(const Ctx&)> gone = [](const Ctx&) { return p9::Status{}; };
};

inline constexpr auto BLOCKONCE_HEARTBEAT = std::chrono::seconds(5);

template <class Ctx>
class Adapter : public p9::FileServer {
 public:
  Adapter(Tree<Ctx> tree, Access<Ctx> access) : tree_(std::move(tree)), access_(std::move(access)), start_(std::time(nullptr)) {}

  const Tree<Ctx>& tree() const { return tree_; }

  p9::Status auth(p9::Fid& afid, const std::string& uname, const std::string& aname) override {
    if (auto st = access_.auth(uname, aname, afid.peer); !st) return st;
    auto a = std::make_shared<AuthFile>();
    a->uname = uname;
    afid.file = a;
    afid.qid = {p9::QTAUTH, 0, AUTH_QID_PATH};
    return {};
  }

  p9::Status attach(p9::Fid& fid, p9::Fid* afid, const std::string& uname, const std::string& aname) override {
    AttachRequest req{uname, aname, afid != nullptr, {}, {}, fid.peer};
    if (afid) {
      auto a = std::static_pointer_cast<AuthFile>(afid->file);
      req.afid_uname = a->uname;
      req.secret = a->secret;
    }
    auto who = access_.attach(req);
    if (!who) return who.error();
    auto h = std::make_shared<Handle>();
    h->node = &tree_.root();
    h->who = std::make_shared<const Principal>(*who);
    h->ctx = access_.root(*who);
    h->name = "/";
    fid.file = h;
    fid.qid = qid_of(*h);
    return {};
  }

  p9::Status walk1(p9::Fid& fid, const std::string& name) override {
    auto h = handle(fid);
    if (auto st = access_.gone(h->ctx); !st) return st;
    if (!(perm(*h) & 1)) return p9::error(p9::err::permission_denied);
    std::shared_ptr<Handle> next;
    if (name == "..") {
      next = h->parent ? h->parent : h;
    } else if (auto* c = h->node->child(name)) {
      next = std::make_shared<Handle>(Handle{c, h->ctx, h->key, name, h, h->who});
    } else if (auto* t = h->node->template_child()) {
      auto inst = t->lookup(h->ctx, name);
      if (!inst) return p9::error(name + ": " + p9::err::file_not_found);
      auto key = intern(t, h->key, inst->object, inst->id);
      next = std::make_shared<Handle>(Handle{t, std::move(inst->ctx), key, name, h, h->who});
    } else {
      return p9::error(name + ": " + p9::err::file_not_found);
    }
    fid.file = next;
    fid.qid = qid_of(*next);
    return {};
  }

  p9::Status clone(const p9::Fid& fid) override { return access_.gone(handle(fid)->ctx); }

  p9::Status open(p9::Fid& fid, std::uint8_t mode) override {
    auto h = handle(fid);
    if (auto st = access_.gone(h->ctx); !st) return st;
    const auto& n = *h->node;
    std::uint8_t rw = mode & 3;
    int p = perm(*h);
    if (mode & p9::ORCLOSE) return p9::error(p9::err::permission_denied);
    // OTRUNC changes nothing here (§1.5) but asks for write permission, as open(9p) says.
    bool wants_read = rw != p9::OWRITE, wants_write = rw == p9::OWRITE || rw == p9::ORDWR || (mode & p9::OTRUNC);
    if ((wants_read && !(p & 4)) || (wants_write && !(p & 2))) return p9::error(p9::err::permission_denied);
    auto o = std::make_shared<Open>(fid.conn_buffered, h->who->hostowner);
    if (wants_read && n.block_read) {
      auto v = n.block_read(h->ctx);
      if (v) o->seen = *v;
    }
    if (wants_read && n.stream) {
      auto c = n.stream(h->ctx);
      if (!c) return c.error();
      o->cursor = std::move(*c);
    }
    fid.aux = o;
    fid.qid = qid_of(*h);  // Ropen's qid carries the version of now
    return {};
  }

  p9::Status dir_alive(p9::Fid& fid) override { return access_.gone(handle(fid)->ctx); }

  p9::Result<std::vector<p9::Dir>> readdir(p9::Fid& fid) override {
    auto h = handle(fid);
    if (auto st = access_.gone(h->ctx); !st) return st.error();
    std::vector<p9::Dir> out;
    for (auto& c : h->node->children) {
      if (c.is_template) {
        for (auto& name : c.list(h->ctx)) {
          auto inst = c.lookup(h->ctx, name);
          if (!inst) continue;  // gone between List and Lookup
          auto key = intern(&c, h->key, inst->object, inst->id);
          out.push_back(dir_of(Handle{&c, std::move(inst->ctx), key, name, h, h->who}));
        }
      } else {
        out.push_back(dir_of(Handle{&c, h->ctx, h->key, c.name, h, h->who}));
      }
    }
    return out;
  }

  std::optional<p9::Fcall> answer_now(p9::Fid& fid, const p9::Fcall& t) override {
    p9::Fcall r;
    r.type = t.type + 1;
    auto fail = [&](const std::string& ename) {
      r.type = p9::Rerror;
      r.ename = ename;
      return r;
    };
    switch (t.type) {
      case p9::Tread: {
        auto d = read_now(fid, t.offset, t.count);
        if (!d) return std::nullopt;
        if (!*d) return fail(d->ename());
        r.data = std::move(**d);
        return r;
      }
      case p9::Twrite: {
        auto n = write_now(fid, t.data);
        if (!n) return fail(n.ename());
        r.count = *n;
        return r;
      }
      case p9::Tclunk: {
        auto st = clunk_now(fid);
        if (!st) return std::nullopt;
        if (!*st) return fail(st->ename());
        return r;
      }
    }
    return std::nullopt;
  }

  asio::awaitable<p9::Result<std::string>> read(p9::Fid& fid, std::uint64_t offset, std::uint32_t count) override {
    if (auto now = read_now(fid, offset, count)) co_return std::move(*now);
    auto h = handle(fid);
    auto o = std::static_pointer_cast<Open>(fid.aux);
    const auto& n = *h->node;
    if (n.rdwr && o->running) co_return co_await await_run(*o, o->running, offset, count);
    if (n.rdwr) co_return co_await run_rdwr(*h, o, count);
    if (n.stream) co_return co_await wait_stream(*o, count);
    if (n.read_co) co_return co_await read_waiting(*h, o, offset, count);
    co_return co_await wait_blockonce(*h, *o, count);
  }

  asio::awaitable<p9::Result<std::uint32_t>> write(p9::Fid& fid, std::uint64_t, std::string data) override {
    co_return write_now(fid, data);
  }

  // A stream ends at the stop (readers of chat see their end of file); a reply still to come
  // (Rdwr, statewait, a waiting Read) is an error, never an empty answer.
  bool ends_at_shutdown(const p9::Fid& fid) override {
    const auto h = handle(fid);
    return !h || !h->node || h->node->stream;
  }

  asio::awaitable<p9::Status> clunk(p9::Fid& fid) override {
    if (auto now = clunk_now(fid)) co_return *now;
    auto h = handle(fid);
    auto& o = *std::static_pointer_cast<Open>(fid.aux);
    if (h->node->write_co) co_return co_await h->node->write_co(h->ctx, o.request.take());
    auto r = co_await h->node->rdwr(h->ctx, o.request.take());  // a pending Rdwr request runs at clunk
    if (!r) co_return r.error();
    co_return p9::Status{};
  }

  /// Template instances that have a qid number: the live ones and the dead not yet swept.
  std::size_t instances() {
    std::lock_guard lk(instances_mu_);
    return instances_.size();
  }

  /// Accepts a wstat that changes nothing, and one that only sets length 0 and/or the times of a
  /// file the principal may write (what Linux v9fs sends for O_TRUNC and touch, spec §1.5); one
  /// that changes only the name of a template directory with a Rename handler is a rename, the
  /// hostowner's alone (§1.6), and the fid's stat shows the new name.
  asio::awaitable<p9::Status> wstat(p9::Fid& fid, const p9::Dir& asked) override {
    if (fid.qid.type & p9::QTAUTH) co_return p9::is_null_wstat(asked) ? p9::Status{} : p9::error(p9::err::wstat_not_supported);
    auto h = handle(fid);
    if (auto st = access_.gone(h->ctx); !st) co_return st;  // a sync of a killed agent's file too (§1.5)
    // A field set to its current value changes nothing (§1.5): `chmod 644` of a 0644 file, `cp -p`.
    const p9::Dir now = dir_of(*h), none = p9::Dir::null();
    p9::Dir d = asked;
    if (d.mode == now.mode) d.mode = none.mode;
    // Length 0 stays a truncate (v9fs's O_TRUNC) where the principal may write; where it may not,
    // the current 0 of a synthetic file written back with the rest of its stat changes nothing.
    if (d.length == now.length && (d.length != 0 || !(perm(*h) & 2))) d.length = none.length;
    if (d.atime == now.atime) d.atime = none.atime;
    if (d.mtime == now.mtime) d.mtime = none.mtime;
    if (d.uid == now.uid) d.uid = none.uid;
    if (d.gid == now.gid) d.gid = none.gid;
    if (d.muid == now.muid) d.muid = none.muid;
    if (d.qid == now.qid) d.qid = none.qid;
    if (d.type == now.type) d.type = none.type;
    if (d.dev == now.dev) d.dev = none.dev;
    if (d.name == now.name) d.name = none.name;
    if (p9::is_null_wstat(d)) co_return p9::Status{};
    p9::Dir only_name = p9::Dir::null();
    only_name.name = d.name;
    if (!d.name.empty() && d == only_name) {
      if (!h->node->rename) co_return p9::error(p9::err::wstat_not_supported);
      if (!h->who->hostowner) co_return p9::error(p9::err::permission_denied);
      if (auto st = co_await h->node->rename(h->ctx, d.name); !st) co_return st;
      h->name = d.name;
      co_return p9::Status{};
    }
    p9::Dir only_truncate = p9::Dir::null();
    only_truncate.length = d.length;
    only_truncate.atime = d.atime;
    only_truncate.mtime = d.mtime;
    bool truncate_or_touch = d == only_truncate && (d.length == 0 || d.length == p9::Dir::null().length);
    if (!truncate_or_touch || (h->node->is_dir && d.length == 0)) co_return p9::error(p9::err::wstat_not_supported);
    if (!(perm(*h) & 2)) co_return p9::error(p9::err::permission_denied);
    co_return p9::Status{};
  }

  p9::Result<p9::Dir> stat(p9::Fid& fid) override {
    if (fid.qid.type & p9::QTAUTH) {
      p9::Dir d;
      d.qid = fid.qid;
      d.mode = p9::DMAUTH | 0600;
      d.name = "#a";
      d.uid = d.gid = d.muid = fid.uid;
      return d;
    }
    auto h = handle(fid);
    if (auto st = access_.gone(h->ctx); !st) return st.error();
    return dir_of(*h);
  }

 private:
  static constexpr std::uint64_t AUTH_QID_PATH = ~std::uint64_t{0};

  struct AuthFile {
    std::string uname;
    std::string secret;
  };

  struct Handle {
    const Node<Ctx>* node = nullptr;
    Ctx ctx;
    std::uint64_t key = 0;  // identity of the nearest template instance
    std::string name;
    std::shared_ptr<Handle> parent;
    std::shared_ptr<const Principal> who;
  };

  using Reply = std::shared_ptr<const std::string>;

  // One run of a Rdwr handler. Every read that arrives while it runs waits for its outcome, so
  // the handler runs once and all of them see its reply (or its error).
  struct Run {
    Signal done;
    std::optional<p9::Result<Reply>> outcome;
  };

  struct Open {
    Open(std::shared_ptr<std::size_t> conn_buffered, bool hostowner)
        : conn(conn_buffered), hostowner(hostowner), request(std::move(conn_buffered), hostowner) {}
    std::shared_ptr<std::size_t> conn;    // the connection's count of bytes held
    bool hostowner;
    // What the server made for this fid's reads is held as long as the fid: another principal's
    // is charged like written bytes (an agent reading a 4 MB log.raw from 4,096 fids pinned
    // 16 GB). The hostowner's is not: a long conversation's log.raw stays readable.
    Charge snapshot_held, reply_held;
    std::optional<std::string> snapshot;  // Read
    Buffer request;                       // Write payload, Rdwr pending request, StreamRdwr filter
    bool pending = false;                 // Rdwr: written since the last reply
    Reply reply;                          // Rdwr
    std::optional<p9::Error> failed;      // Rdwr: the last request's error, its reply to every read
    std::size_t reply_pos = 0;
    std::shared_ptr<Run> running;         // Rdwr: the handler is running for a read
    std::string seen, delivered;          // BlockOnce
    std::shared_ptr<Cursor> cursor;       // Stream
    bool started = false;                 // Stream: first read done
    // Why the request being written was cut off: a piece was refused after others were taken.
    // That request never takes effect (spec §1.7): its read or clunk answers this instead.
    std::string broken;
    std::string refused;                  // Stream: why its cursor refused the request (a bad filter)
  };

  static std::shared_ptr<Handle> handle(const p9::Fid& fid) { return std::static_pointer_cast<Handle>(fid.file); }

  static p9::Status hold(Open& o, Charge& c, std::size_t n) {
    c.clear();
    if (o.hostowner) return {};
    return c.add(o.conn, false, n, conn_reads_full, all_reads_full);
  }

  static std::string slice(const std::string& s, std::uint64_t offset, std::uint32_t count) {
    if (offset >= s.size()) return {};
    return s.substr(offset, count);
  }

  // The Rdwr reply by the read rules of spec §1.7: offset 0 restarts, any other continues.
  static std::string serve_reply(Open& o, std::uint64_t offset, std::uint32_t count) {
    if (offset == 0) o.reply_pos = 0;
    std::string out = slice(*o.reply, o.reply_pos, count);
    o.reply_pos += out.size();
    return out;
  }

  // What a read can answer without waiting; nullopt when it must wait (a Rdwr handler to run or
  // running, a stream without bytes, a BlockOnce value that has not changed). A read of count 0
  // never waits (read(5)): on a Stream or BlockOnce it answers 0 bytes and moves nothing.
  std::optional<p9::Result<std::string>> read_now(p9::Fid& fid, std::uint64_t offset, std::uint32_t count) {
    if (fid.qid.type & p9::QTAUTH) return std::string();
    auto h = handle(fid);
    auto& o = *std::static_pointer_cast<Open>(fid.aux);
    const auto& n = *h->node;
    if (!o.broken.empty() && (n.rdwr || (n.stream && !o.started))) {  // the request ends here
      o.pending = false;
      return p9::Result<std::string>(p9::error(std::exchange(o.broken, {})));
    }
    const bool held = n.rdwr && o.reply && !o.pending && !o.running;  // served to its end
    if (!n.stream && !held)
      if (auto st = access_.gone(h->ctx); !st) return p9::Result<std::string>(st.error());
    if (n.rdwr) {
      if (o.running || o.pending) return std::nullopt;
      if (o.failed) return p9::Result<std::string>(*o.failed);  // re-read: the same Rerror (§1.7)
      if (!o.reply && n.default_request) return std::nullopt;
      if (!o.reply) return std::string();  // never written, no default request
      return serve_reply(o, offset, count);
    }
    if ((n.stream || n.block_read) && count == 0) return std::string();
    if (n.stream) {
      if (!o.refused.empty()) return p9::Result<std::string>(p9::error(o.refused));
      if (!o.started) {
        o.started = true;
        if (!o.request.empty()) {
          const auto st = o.cursor->request(o.request.view());
          o.request.clear();
          if (!st) {
            o.refused = st.ename();  // every later read says it too, never the stream unfiltered
            return p9::Result<std::string>(st.error());
          }
        }
      }
      Chunk c = o.cursor->read(count);
      if (!c.error.empty()) return p9::Result<std::string>(p9::error(std::move(c.error)));
      if (c.data.empty() && !c.eof) return std::nullopt;
      return std::move(c.data);
    }
    if (n.block_read) {
      if (offset > 0) return slice(o.delivered, offset, count);
      auto v = n.block_read(h->ctx);
      if (!v) return v;
      if (*v == o.seen) return std::nullopt;
      o.seen = o.delivered = std::move(*v);
      return slice(o.delivered, 0, count);
    }
    if (!o.snapshot) {
      if (n.read_co) return std::nullopt;  // read_waiting makes it
      auto r = n.read(h->ctx);
      if (!r) return r;
      if (auto st = hold(o, o.snapshot_held, r->size()); !st) return p9::Result<std::string>(st.error());
      o.snapshot = std::move(*r);
    }
    return slice(*o.snapshot, offset, count);
  }

  p9::Result<std::uint32_t> write_now(p9::Fid& fid, const std::string& data) {
    if (fid.qid.type & p9::QTAUTH) {
      auto a = std::static_pointer_cast<AuthFile>(fid.file);
      if (a->secret.size() + data.size() > 4096) return p9::error(p9::err::write_too_large);
      a->secret += data;
      return static_cast<std::uint32_t>(data.size());
    }
    auto h = handle(fid);
    if (auto st = access_.gone(h->ctx); !st) return st.error();
    auto& o = *std::static_pointer_cast<Open>(fid.aux);
    if (h->node->stream && o.started) return p9::error("filter already set");
    o.failed.reset();
    if (o.reply) {  // a new request after a reply: the old reply is gone
      o.reply.reset();
      o.reply_held.clear();
      // Bytes written while the handler ran are the new request's start (§1.7), not the old's.
      if (!o.pending) o.request.clear();
    }
    if (!o.broken.empty()) return p9::error(o.broken);
    if (auto st = o.request.append(data); !st) {
      if (!o.request.empty()) {  // pieces were taken: the request is cut off, and its bytes go
        o.broken = st.ename();
        o.request.clear();
      }
      return st.error();
    }
    o.pending = true;
    // The cursor sees the request as it grows (event, §5.2): a buffer that fills before the first
    // read gives up what no pattern written so far selects, not what the filter asks for.
    if (o.cursor) (void)o.cursor->request(o.request.view());  // none on a fid opened to write only
    return static_cast<std::uint32_t>(data.size());
  }

  // Everything but a pending Rdwr request, whose handler is a coroutine.
  std::optional<p9::Status> clunk_now(p9::Fid& fid) {
    if (fid.qid.type & p9::QTAUTH || !fid.aux) return p9::Status{};
    auto h = handle(fid);
    auto& o = *std::static_pointer_cast<Open>(fid.aux);
    const auto& n = *h->node;
    if (!o.broken.empty()) return p9::Status(p9::error(o.broken));  // the handler never sees it
    if (n.rdwr && o.pending) return std::nullopt;
    if (n.write_co && !o.request.empty()) return std::nullopt;  // clunk runs it
    if (n.write && !o.request.empty()) return n.write(h->ctx, o.request.take());
    return p9::Status{};
  }

  // Runs the handler for this read; the reply is served from its start, whatever the offset.
  asio::awaitable<p9::Result<std::string>> run_rdwr(Handle& h, std::shared_ptr<Open> op, std::uint32_t count) {
    // Publishes the run's outcome to the reads waiting on it, also when this read is flushed
    // (the handler was cancelled: they get `interrupted`).
    struct Publish {
      std::shared_ptr<Open> o;
      std::shared_ptr<Run> run;
      ~Publish() {
        if (!run->outcome) run->outcome = p9::Result<Reply>(p9::error(p9::err::interrupted));
        if (o->running == run) o->running.reset();
        run->done.notify();
      }
    } publish{op, std::make_shared<Run>()};
    Open& o = *op;
    o.running = publish.run;
    std::string req = o.pending ? o.request.take() : *h.node->default_request;
    o.pending = false;
    auto r = co_await h.node->rdwr(h.ctx, std::move(req));
    if (r)
      if (auto st = hold(o, o.reply_held, r->size()); !st) r = st.error();
    if (!r) {  // the request's reply is its error: a read at offset 0 gets it again
      if (!o.pending) o.failed = r.error();
      publish.run->outcome = p9::Result<Reply>(r.error());
      co_return r.error();
    }
    o.reply = std::make_shared<const std::string>(std::move(*r));
    publish.run->outcome = o.reply;
    co_return serve_reply(o, 0, count);
  }

  // A read that arrived while the handler ran for another: the same run's reply or error.
  asio::awaitable<p9::Result<std::string>> await_run(Open& o, std::shared_ptr<Run> run, std::uint64_t offset, std::uint32_t count) {
    for (;;) {
      auto ver = run->done.version();
      if (run->outcome) break;
      co_await run->done.wait(ver);
    }
    const auto& out = *run->outcome;
    if (!out) co_return out.error();
    if (o.reply == *out) co_return serve_reply(o, offset, count);
    co_return slice(**out, 0, count);  // a later write already discarded it from the fid
  }

  asio::awaitable<p9::Result<std::string>> wait_stream(Open& o, std::uint32_t count) {
    auto cursor = o.cursor;
    Chunk c = co_await cursor->wait(count);
    if (!c.error.empty()) co_return p9::error(std::move(c.error));
    co_return std::move(c.data);
  }

  // The first read of a Read whose handler waits makes the snapshot (two first reads in flight
  // at once both run it; the first result is kept); later reads are served from it.
  asio::awaitable<p9::Result<std::string>> read_waiting(Handle& h, std::shared_ptr<Open> o, std::uint64_t offset,
                                                        std::uint32_t count) {
    if (!o->snapshot) {
      auto r = co_await h.node->read_co(h.ctx);
      if (!r) co_return r.error();
      if (!o->snapshot) {
        if (auto st = hold(*o, o->snapshot_held, r->size()); !st) co_return st.error();
        o->snapshot = std::move(*r);
      }
    }
    co_return slice(*o->snapshot, offset, count);
  }

  asio::awaitable<p9::Result<std::string>> wait_blockonce(Handle& h, Open& o, std::uint32_t count) {
    auto deadline = std::chrono::steady_clock::now() + BLOCKONCE_HEARTBEAT;
    auto sig = h.node->block_signal(h.ctx);
    for (;;) {
      auto ver = sig->version();
      auto v = h.node->block_read(h.ctx);
      if (!v) co_return v.error();
      if (*v != o.seen) {
        o.seen = o.delivered = std::move(*v);
        co_return slice(o.delivered, 0, count);
      }
      auto left = deadline - std::chrono::steady_clock::now();
      bool changed = left > decltype(left)::zero() && co_await sig->wait(ver, left);
      if (changed || std::chrono::steady_clock::now() < deadline) continue;
      // Nothing changed for 5 s: the heartbeat is the plain Read content, or nothing.
      if (!h.node->read) co_return std::string();
      auto r = h.node->read(h.ctx);
      if (!r) co_return r.error();
      o.seen = o.delivered = std::move(*r);
      co_return slice(o.delivered, 0, count);
    }
  }

  // The permission bits (rwx) the fid's principal has on its node (spec §1.6).
  int perm(const Handle& h) const {
    std::uint32_t m = h.node->mode;
    if (h.who->hostowner) return (m >> 6) & 7;
    if (h.who->uname == uid_of(h)) return (m >> 6) & 7;
    if (h.who->group == h.node->gid) return (m >> 3) & 7;
    return m & 7;
  }

  std::string uid_of(const Handle& h) const { return h.node->owner ? h.node->owner(h.ctx) : access_.hostowner; }

  p9::Qid qid_of(const Handle& h) const {
    p9::Qid q;
    q.type = h.node->is_dir ? p9::QTDIR : p9::QTFILE;
    q.path = (std::uint64_t(h.node->index) << 40) | (h.key & ((std::uint64_t{1} << 40) - 1));
    q.vers = h.node->vers ? h.node->vers(h.ctx) : 0;
    return q;
  }

  p9::Dir dir_of(const Handle& h) const {
    p9::Dir d;
    d.qid = qid_of(h);
    d.mode = (h.node->is_dir ? p9::DMDIR : 0) | (h.node->mode & 0777);
    d.length = h.node->length ? h.node->length(h.ctx) : 0;
    const std::int64_t changed = h.node->mtime ? h.node->mtime(h.ctx) : 0;
    d.atime = d.mtime = static_cast<std::uint32_t>(changed > 0 ? changed : start_);
    d.name = h.node->current_name ? h.node->current_name(h.ctx) : h.name;
    d.uid = d.muid = uid_of(h);
    d.gid = h.node->gid;
    return d;
  }

  // A template instance: its template, the number of its parent instance, and its object, held
  // weakly. Ordered by the object's control block, which stays distinct while the entry lives
  // (so a dead object's entry never matches a new object at the same address).
  struct InstanceKey {
    std::uint32_t node;
    std::uint64_t parent;
    std::weak_ptr<const void> object;
  };
  struct InstanceOrder {
    bool operator()(const InstanceKey& a, const InstanceKey& b) const {
      if (a.node != b.node) return a.node < b.node;
      if (a.parent != b.parent) return a.parent < b.parent;
      return a.object.owner_before(b.object);
    }
  };

  // The number a template instance's qids carry (40 bits), for as long as its object lives. An
  // object with an immutable id gets a hash of it and of its parent's number (the top bit
  // clear), the same in every run; one without, or whose hash a live object already has, the
  // next number of a counter (the top bit set), never reused. Entries of dead objects are
  // swept when the table has doubled since the last sweep, so it holds at most about twice the
  // live instances.
  std::uint64_t intern(const Node<Ctx>* t, std::uint64_t parent_key, const std::shared_ptr<const void>& object,
                       const std::string& id) {
    assert(object && "Lookup must bind an object");
    constexpr std::uint64_t counted = std::uint64_t{1} << 39;
    std::lock_guard lk(instances_mu_);
    InstanceKey k{t->index, parent_key, object};
    if (auto it = instances_.find(k); it != instances_.end()) return it->second;
    if (instances_.size() >= sweep_at_) {
      std::erase_if(instances_, [](const auto& e) { return e.first.object.expired(); });
      std::erase_if(hashed_, [](const auto& e) { return e.second.expired(); });
      sweep_at_ = std::max(MIN_SWEEP, 2 * instances_.size());
    }
    std::uint64_t key = 0;
    if (!id.empty()) {
      const auto h = std::hash<std::string>{}(std::to_string(t->index) + "/" + std::to_string(parent_key) + "/" + id) &
                     (counted - 1);
      auto& holder = hashed_[{t->index, h}];
      if (holder.expired()) {
        holder = object;
        key = h;
      }
    }
    if (!key) key = counted | (next_instance_++ & (counted - 1));
    instances_.emplace(std::move(k), key);
    return key;
  }

  static constexpr std::size_t MIN_SWEEP = 64;

  Tree<Ctx> tree_;
  Access<Ctx> access_;
  std::time_t start_;
  std::mutex instances_mu_;
  std::map<InstanceKey, std::uint64_t, InstanceOrder> instances_;
  std::uint64_t next_instance_ = 1;
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::weak_ptr<const void>> hashed_;  // (template, hash) → its object
  std::size_t sweep_at_ = MIN_SWEEP;
};

}  // namespace virtfs
