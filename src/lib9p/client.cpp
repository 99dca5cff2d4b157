#include "client.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "codec.hpp"
#include "dial.hpp"
#include "errors.hpp"

namespace p9 {

namespace {

Result<int> connect_address(const Address& a) {
  if (a.kind == Address::Unix) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (a.path.size() >= sizeof sa.sun_path) return error(a.path + ": socket path too long");
    std::memcpy(sa.sun_path, a.path.c_str(), a.path.size() + 1);
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return error(std::string("socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      std::string e = std::strerror(errno);
      ::close(fd);
      return error("dial " + a.path + ": " + e);
    }
    return fd;
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(a.host.c_str(), a.port.c_str(), &hints, &res); rc != 0)
    return error("dial " + a.text + ": " + gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      freeaddrinfo(res);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(res);
  return error("dial " + a.text + ": " + why);
}

bool read_full(int fd, std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= r;
  }
  return true;
}

bool write_full(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= r;
  }
  return true;
}

}  // namespace

Client::Client(int fd) : fd_(fd) {}

Client::~Client() {
  close();
  if (reader_.joinable()) {
    if (reader_.get_id() == std::this_thread::get_id()) reader_.detach();
    else reader_.join();
  }
  ::close(fd_);
}

Result<std::shared_ptr<Client>> Client::dial(std::string_view address, std::uint32_t msize) {
  auto a = parse_address(address);
  if (!a) return a.error();
  auto fd = connect_address(*a);
  if (!fd) return fd.error();
  return from_fd(*fd, msize);
}

Result<std::shared_ptr<Client>> Client::from_fd(int fd, std::uint32_t msize) {
  std::shared_ptr<Client> c(new Client(fd));
  c->reader_ = std::thread([p = c.get()] { p->reader(); });
  if (auto st = c->version(msize); !st) return st.error();
  return c;
}

Status Client::version(std::uint32_t msize) {
  Fcall t;
  t.type = Tversion;
  t.msize = msize;
  t.version = VERSION9P;
  // Tversion carries NOTAG; start() would pick a tag, so register NOTAG by hand.
  std::promise<Result<Fcall>> p;
  auto fut = p.get_future();
  {
    std::lock_guard lk(mu_);
    tags_[NOTAG] = [&p](Result<Fcall> r) { p.set_value(std::move(r)); };
  }
  t.tag = NOTAG;
  if (auto st = send(t); !st) return st;
  auto r = fut.get();
  if (!r) return r.error();
  if (r->version != VERSION9P) return error("server speaks " + r->version + ", not 9P2000");
  if (r->msize < MIN_MSIZE || r->msize > msize) return error("bad msize from server: " + std::to_string(r->msize));
  msize_ = r->msize;
  return {};
}

Status Client::send(const Fcall& t) {
  auto bytes = encode(t);
  std::lock_guard lk(write_mu_);
  if (!write_full(fd_, bytes.data(), bytes.size())) return error(err::hung_up);
  return {};
}

std::uint16_t Client::start(Fcall t, std::function<void(Result<Fcall>)> done) {
  {
    std::unique_lock lk(mu_);
    if (closed_) {
      lk.unlock();
      done(error(close_reason_.empty() ? err::hung_up : close_reason_));
      return NOTAG;
    }
    while (tags_.contains(next_tag_) || next_tag_ == NOTAG) next_tag_++;
    t.tag = next_tag_++;
    tags_[t.tag] = std::move(done);
  }
  if (!send(t)) {
    std::function<void(Result<Fcall>)> cb;
    {
      std::lock_guard lk(mu_);
      if (auto it = tags_.find(t.tag); it != tags_.end()) {
        cb = std::move(it->second);
        tags_.erase(it);
      }
    }
    if (cb) cb(error(err::hung_up));
  }
  return t.tag;
}

Result<Fcall> Client::rpc(Fcall t) {
  std::promise<Result<Fcall>> p;
  auto fut = p.get_future();
  start(std::move(t), [&p](Result<Fcall> r) { p.set_value(std::move(r)); });
  return fut.get();
}

void Client::flush(std::uint16_t tag) {
  Fcall t;
  t.type = Tflush;
  t.oldtag = tag;
  (void)rpc(t);
  // The server sends nothing more for the old tag after Rflush: finish it here if it is still waiting.
  std::function<void(Result<Fcall>)> cb;
  {
    std::lock_guard lk(mu_);
    if (auto it = tags_.find(tag); it != tags_.end()) {
      cb = std::move(it->second);
      tags_.erase(it);
    }
  }
  if (cb) cb(error(err::interrupted));
}

void Client::reader() {
  std::vector<std::uint8_t> buf;
  std::string why = err::hung_up;
  for (;;) {
    std::uint8_t hdr[4];
    if (!read_full(fd_, hdr, 4)) break;
    std::uint32_t size = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | std::uint32_t(hdr[3]) << 24;
    if (size < 7 || size > std::max<std::uint32_t>(msize_, MAX_MSIZE)) {
      why = "bad frame size from server: " + std::to_string(size);
      break;
    }
    buf.resize(size);
    std::memcpy(buf.data(), hdr, 4);
    if (!read_full(fd_, buf.data() + 4, size - 4)) break;
    auto r = decode(buf);
    if (!r) {
      why = "bad reply from server: " + r.ename();
      break;
    }
    std::function<void(Result<Fcall>)> cb;
    {
      std::lock_guard lk(mu_);
      auto it = tags_.find(r->tag);
      if (it == tags_.end()) continue;  // a reply to a flushed request
      cb = std::move(it->second);
      tags_.erase(it);
    }
    if (r->type == Rerror) cb(error(r->ename));
    else cb(std::move(*r));
  }
  fail_all(why);
}

void Client::fail_all(const std::string& why) {
  std::map<std::uint16_t, std::function<void(Result<Fcall>)>> pending;
  {
    std::lock_guard lk(mu_);
    closed_ = true;
    if (close_reason_.empty()) close_reason_ = why;
    pending.swap(tags_);
  }
  for (auto& [tag, cb] : pending) cb(error(why));
}

void Client::close() {
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    closed_ = true;
    close_reason_ = err::hung_up;
  }
  ::shutdown(fd_, SHUT_RDWR);
}

std::uint32_t Client::new_fid() {
  std::lock_guard lk(mu_);
  if (!free_fids_.empty()) {
    auto f = free_fids_.back();
    free_fids_.pop_back();
    return f;
  }
  return next_fid_++;
}

void Client::release_fid(std::uint32_t fid) {
  std::lock_guard lk(mu_);
  free_fids_.push_back(fid);
}

Result<CFid> Client::auth(const std::string& uname, const std::string& aname) {
  Fcall t;
  t.type = Tauth;
  t.afid = new_fid();
  t.uname = uname;
  t.aname = aname;
  auto r = rpc(t);
  if (!r) {
    release_fid(t.afid);
    return r.error();
  }
  return CFid(shared_from_this(), t.afid, r->aqid);
}

Result<CFid> Client::attach(const std::string& uname, const std::string& aname, const CFid* afid) {
  Fcall t;
  t.type = Tattach;
  t.fid = new_fid();
  t.afid = afid ? afid->num() : NOFID;
  t.uname = uname;
  t.aname = aname;
  auto r = rpc(t);
  if (!r) {
    release_fid(t.fid);
    return r.error();
  }
  return CFid(shared_from_this(), t.fid, r->qid);
}

// ---- CFid -------------------------------------------------------------------------------

CFid& CFid::operator=(CFid&& o) noexcept {
  if (this != &o) {
    (void)clunk();
    c_ = std::move(o.c_);
    fid_ = o.fid_;
    qid_ = o.qid_;
    offset_ = o.offset_;
    o.fid_ = NOFID;
  }
  return *this;
}

CFid::~CFid() { (void)clunk(); }

Result<CFid> CFid::walk(std::string_view path) const {
  std::vector<std::string> names;
  for (std::size_t i = 0; i <= path.size();) {
    auto j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    auto e = path.substr(i, j - i);
    if (!e.empty() && e != ".") names.emplace_back(e);
    i = j + 1;
  }
  std::uint32_t newfid = c_->new_fid();
  CFid nf(c_, NOFID, qid_);
  std::size_t done = 0;
  do {
    Fcall t;
    t.type = Twalk;
    t.fid = done == 0 ? fid_ : newfid;
    t.newfid = newfid;
    std::size_t n = std::min(names.size() - done, MAXWELEM);
    t.wname.assign(names.begin() + done, names.begin() + done + n);
    auto r = c_->rpc(t);
    if (!r || r->wqid.size() < n) {
      if (done == 0) c_->release_fid(newfid);
      else nf.fid_ = newfid;  // clunked by nf's destructor
      if (!r) return r.error();
      return error(t.wname[r->wqid.size()] + ": " + err::file_not_found);
    }
    nf.fid_ = newfid;
    if (n) nf.qid_ = r->wqid.back();
    done += n;
  } while (done < names.size());
  return nf;
}

Status CFid::open(std::uint8_t mode) {
  Fcall t;
  t.type = Topen;
  t.fid = fid_;
  t.mode = mode;
  auto r = c_->rpc(t);
  if (!r) return r.error();
  qid_ = r->qid;
  return {};
}

Status CFid::create(const std::string& name, std::uint32_t perm, std::uint8_t mode) {
  Fcall t;
  t.type = Tcreate;
  t.fid = fid_;
  t.name = name;
  t.perm = perm;
  t.mode = mode;
  auto r = c_->rpc(t);
  if (!r) return r.error();
  qid_ = r->qid;
  return {};
}

Result<std::string> CFid::pread(std::uint64_t offset, std::uint32_t count) {
  Fcall t;
  t.type = Tread;
  t.fid = fid_;
  t.offset = offset;
  t.count = count ? std::min(count, c_->iounit()) : c_->iounit();
  auto r = c_->rpc(t);
  if (!r) return r.error();
  return std::move(r->data);
}

Result<std::string> CFid::read(std::uint32_t count) {
  auto r = pread(offset_, count);
  if (r) offset_ += r->size();
  return r;
}

Result<std::string> CFid::read_all() {
  std::string all;
  for (;;) {
    auto r = read();
    if (!r) return r;
    if (r->empty()) return all;
    all += *r;
  }
}

Result<std::uint32_t> CFid::pwrite(std::uint64_t offset, std::string_view data) {
  Fcall t;
  t.type = Twrite;
  t.fid = fid_;
  t.offset = offset;
  t.data = std::string(data);
  auto r = c_->rpc(std::move(t));
  if (!r) return r.error();
  return r->count;
}

Result<std::size_t> CFid::write(std::string_view data) {
  std::size_t done = 0;
  do {
    auto piece = data.substr(done, c_->iounit());
    auto n = pwrite(offset_, piece);
    if (!n) return n.error();
    if (*n == 0 && !piece.empty()) return error("short write");
    offset_ += *n;
    done += *n;
  } while (done < data.size());
  return done;
}

Result<Dir> CFid::stat() const {
  Fcall t;
  t.type = Tstat;
  t.fid = fid_;
  auto r = c_->rpc(t);
  if (!r) return r.error();
  return decode_dir(r->stat);
}

Status CFid::wstat(const Dir& d) {
  Fcall t;
  t.type = Twstat;
  t.fid = fid_;
  t.stat = encode_dir(d);
  auto r = c_->rpc(std::move(t));
  if (!r) return r.error();
  return {};
}

Result<std::vector<Dir>> CFid::dirread_all() {
  std::vector<Dir> all;
  for (;;) {
    auto r = read();
    if (!r) return r.error();
    if (r->empty()) return all;
    auto dirs = decode_dirs({reinterpret_cast<const std::uint8_t*>(r->data()), r->size()});
    if (!dirs) return dirs.error();
    for (auto& d : *dirs) all.push_back(std::move(d));
  }
}

Status CFid::clunk() {
  if (!c_ || fid_ == NOFID) return {};
  Fcall t;
  t.type = Tclunk;
  t.fid = fid_;
  auto r = c_->rpc(t);
  c_->release_fid(fid_);
  fid_ = NOFID;
  if (!r) return r.error();
  return {};
}

Status CFid::remove() {
  if (!c_ || fid_ == NOFID) return error(err::unknown_fid);
  Fcall t;
  t.type = Tremove;
  t.fid = fid_;
  auto r = c_->rpc(t);
  c_->release_fid(fid_);
  fid_ = NOFID;
  if (!r) return r.error();
  return {};
}

}  // namespace p9
