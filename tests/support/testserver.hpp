#pragma once
// Test support: a real lib9p server on a real Unix socket in a private directory, served by
// io threads of its own, and a raw frame connection for byte-exact protocol tests.

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "lib9p/codec.hpp"
#include "lib9p/iopool.hpp"
#include "lib9p/server.hpp"

namespace testing_support {

/// A Tflush of `oldtag`.
inline p9::Fcall tflush(std::uint16_t tag, std::uint16_t oldtag) {
  p9::Fcall f;
  f.type = p9::Tflush;
  f.tag = tag;
  f.oldtag = oldtag;
  return f;
}

/// A fresh directory under the test's TMPDIR, removed at destruction.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ollie-test.XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// Threads as the daemons have them: one io_context each (lib9p/iopool.hpp).
struct TestServer {
  TempDir dir;
  std::string sock;
  p9::IoPool pool;
  std::unique_ptr<p9::Server> srv;

  explicit TestServer(std::shared_ptr<p9::FileServer> fs, unsigned nthreads = 2, p9::ServerOptions opt = {})
      : pool(nthreads) {
    sock = dir.path + "/ns/ollie";
    srv = std::make_unique<p9::Server>(pool.contexts(), std::move(fs), std::move(opt));
    auto st = srv->listen(*p9::parse_address("unix!" + sock));
    if (!st) throw std::runtime_error(st.ename());
    pool.start();
  }
  ~TestServer() {
    srv->stop();
    pool.release();
    pool.join();
  }
  std::string addr() const { return "unix!" + sock; }
};

/// A raw 9P connection: frames out, frames in, nothing checked, for protocol tests and benches.
class Raw {
 public:
  explicit Raw(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) throw std::runtime_error("connect " + path);
  }
  ~Raw() { ::close(fd_); }
  Raw(const Raw&) = delete;

  int fd() const { return fd_; }
  void send_bytes(const std::vector<std::uint8_t>& b) {
    std::size_t off = 0;
    while (off < b.size()) {
      ssize_t n = ::send(fd_, b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      off += n;
    }
  }
  void send(const p9::Fcall& f) {
    auto bytes = p9::encode(f);
    if (!bytes) throw std::runtime_error("cannot encode: " + bytes.ename());
    send_bytes(*bytes);
  }

  /// The next reply, or nullopt on timeout or hang-up (see closed()).
  std::optional<p9::Fcall> recv(int timeout_ms = 10000) {
    for (;;) {
      if (buf_.size() >= 4) {
        std::uint32_t size = buf_[0] | buf_[1] << 8 | buf_[2] << 16 | std::uint32_t(buf_[3]) << 24;
        if (buf_.size() >= size) {
          std::vector<std::uint8_t> frame(buf_.begin(), buf_.begin() + size);
          buf_.erase(buf_.begin(), buf_.begin() + size);
          auto f = p9::decode(frame);
          if (!f) throw std::runtime_error("bad frame from server: " + f.ename());
          return *f;
        }
      }
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) return std::nullopt;
      std::uint8_t tmp[65536];
      ssize_t n = ::read(fd_, tmp, sizeof tmp);
      if (n <= 0) {
        eof_ = true;
        return std::nullopt;
      }
      buf_.insert(buf_.end(), tmp, tmp + n);
    }
  }
  bool eof() const { return eof_; }

  /// One request and its reply.
  p9::Fcall rpc(p9::Fcall f) {
    send(f);
    auto r = recv();
    if (!r) throw std::runtime_error(std::string("no reply to ") + p9::type_name(f.type));
    return *r;
  }

  // Shorthands for the common opening.
  p9::Fcall version(std::uint32_t msize = 8192, std::string v = "9P2000") {
    p9::Fcall f;
    f.type = p9::Tversion;
    f.tag = p9::NOTAG;
    f.msize = msize;
    f.version = std::move(v);
    return rpc(f);
  }
  p9::Fcall attach(std::uint32_t fid, std::string uname, std::uint32_t afid = p9::NOFID) {
    p9::Fcall f;
    f.type = p9::Tattach;
    f.fid = fid;
    f.afid = afid;
    f.uname = std::move(uname);
    return rpc(f);
  }
  p9::Fcall walk(std::uint32_t fid, std::uint32_t newfid, std::vector<std::string> names, std::uint16_t tag = 0) {
    p9::Fcall f;
    f.type = p9::Twalk;
    f.tag = tag;
    f.fid = fid;
    f.newfid = newfid;
    f.wname = std::move(names);
    return rpc(f);
  }
  p9::Fcall open(std::uint32_t fid, std::uint8_t mode, std::uint16_t tag = 0) {
    p9::Fcall f;
    f.type = p9::Topen;
    f.tag = tag;
    f.fid = fid;
    f.mode = mode;
    return rpc(f);
  }
  static p9::Fcall tread(std::uint32_t fid, std::uint64_t offset, std::uint32_t count, std::uint16_t tag = 0) {
    p9::Fcall f;
    f.type = p9::Tread;
    f.tag = tag;
    f.fid = fid;
    f.offset = offset;
    f.count = count;
    return f;
  }
  p9::Fcall read(std::uint32_t fid, std::uint64_t offset, std::uint32_t count = 4096) { return rpc(tread(fid, offset, count)); }
  p9::Fcall write(std::uint32_t fid, std::uint64_t offset, std::string data) {
    p9::Fcall f;
    f.type = p9::Twrite;
    f.fid = fid;
    f.offset = offset;
    f.data = std::move(data);
    return rpc(f);
  }
  p9::Fcall clunk(std::uint32_t fid) {
    p9::Fcall f;
    f.type = p9::Tclunk;
    f.fid = fid;
    return rpc(f);
  }

 private:
  int fd_ = -1;
  std::vector<std::uint8_t> buf_;
  bool eof_ = false;
};

}  // namespace testing_support
