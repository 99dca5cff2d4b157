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
#include "tmsg.hpp"
#include "walk.hpp"

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
  if (auto st = c->mux_.version_reply(c->rpc(c->mux_.version_request(msize))); !st) return st.error();
  return c;
}

void Client::send(const std::vector<std::uint8_t>& frames) {
  if (frames.empty()) return;
  std::lock_guard lk(write_mu_);
  if (!write_full(fd_, frames.data(), frames.size())) close();
}

std::uint16_t Client::start(Fcall t, Mux::Done done) {
  std::vector<std::uint8_t> out;
  (void)mux_.start(t, std::move(done), out);
  send(out);
  return t.tag;
}

Result<Fcall> Client::rpc(Fcall t) {
  std::promise<Result<Fcall>> p;
  auto fut = p.get_future();
  start(std::move(t), [&p](Result<Fcall> r) { p.set_value(std::move(r)); });
  return fut.get();
}

void Client::flush(std::uint16_t tag) {
  std::promise<void> p;
  auto settled = p.get_future();
  std::vector<std::uint8_t> out;
  mux_.flush(tag, [&p] { p.set_value(); }, out);
  send(out);
  settled.wait();
}

void Client::reader() {
  std::vector<std::uint8_t> buf(MAX_MSIZE);
  std::string why = err::hung_up;
  for (;;) {
    ssize_t n = ::read(fd_, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (auto st = mux_.received({buf.data(), static_cast<std::size_t>(n)}); !st) {
      why = st.ename();
      break;
    }
  }
  mux_.close(why);
  ::shutdown(fd_, SHUT_RDWR);
}

void Client::close() {
  mux_.close(err::hung_up);
  ::shutdown(fd_, SHUT_RDWR);
}

Result<CFid> Client::auth(const std::string& uname, const std::string& aname) {
  const std::uint32_t afid = mux_.new_fid();
  auto r = rpc(tmsg::auth(afid, uname, aname));
  if (!r) {
    mux_.release_fid(afid);
    return r.error();
  }
  return CFid(shared_from_this(), afid, r->aqid);
}

Result<CFid> Client::attach(const std::string& uname, const std::string& aname, const CFid* afid) {
  const std::uint32_t fid = mux_.new_fid();
  auto r = rpc(tmsg::attach(fid, afid ? afid->num() : NOFID, uname, aname));
  if (!r) {
    mux_.release_fid(fid);
    return r.error();
  }
  return CFid(shared_from_this(), fid, r->qid);
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
  Walk w(path, fid_, c_->mux_.new_fid(), qid_);
  do {
    if (auto st = w.take(c_->rpc(w.next())); !st) {
      if (w.created()) CFid(c_, w.newfid(), w.qid());  // clunked at once
      else c_->mux_.release_fid(w.newfid());
      return st.error();
    }
  } while (!w.done());
  return CFid(c_, w.newfid(), w.qid());
}

Status CFid::open(std::uint8_t mode) {
  auto r = c_->rpc(tmsg::open(fid_, mode));
  if (!r) return r.error();
  qid_ = r->qid;
  return {};
}

Status CFid::create(const std::string& name, std::uint32_t perm, std::uint8_t mode) {
  auto r = c_->rpc(tmsg::create(fid_, name, perm, mode));
  if (!r) return r.error();
  qid_ = r->qid;
  return {};
}

Result<std::string> CFid::pread(std::uint64_t offset, std::uint32_t count) {
  const std::uint32_t most = c_->mux_.iounit();
  auto r = c_->rpc(tmsg::read(fid_, offset, count ? std::min(count, most) : most));
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
  auto r = c_->rpc(tmsg::write(fid_, offset, std::string(data)));
  if (!r) return r.error();
  return r->count;
}

Result<std::size_t> CFid::write(std::string_view data) {
  std::size_t done = 0;
  do {
    auto piece = data.substr(done, c_->mux_.iounit());
    auto n = pwrite(offset_, piece);
    if (!n) return n.error();
    if (*n == 0 && !piece.empty()) return error("short write");
    offset_ += *n;
    done += *n;
  } while (done < data.size());
  return done;
}

Result<Dir> CFid::stat() const {
  auto r = c_->rpc(tmsg::on_fid(Tstat, fid_));
  if (!r) return r.error();
  return decode_dir(r->stat);
}

Status CFid::wstat(const Dir& d) {
  auto entry = encode_dir(d);
  if (!entry) return entry.error();
  auto r = c_->rpc(tmsg::wstat(fid_, std::move(*entry)));
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

Status CFid::clunk() { return end(Tclunk); }

Status CFid::remove() {
  if (!c_ || fid_ == NOFID) return error(err::unknown_fid);
  return end(Tremove);
}

Status CFid::end(std::uint8_t type) {
  if (!c_ || fid_ == NOFID) return {};
  auto r = c_->rpc(tmsg::on_fid(type, fid_));
  c_->mux_.release_fid(fid_);
  fid_ = NOFID;
  if (!r) return r.error();
  return {};
}

}  // namespace p9
