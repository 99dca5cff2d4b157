// 9p-bench: olliesrv's 9P server against the physical limit of this machine, in one run.
//
//   (0) bare Unix-socket ping-pong: 23 bytes out, 75 back (a Tread and an Rread of 64 bytes)
//   (1) one 64-byte Tread at a time on an open fid
//   (2) 16 Treads in flight on one fid
//   (3) Twalk+Topen+Tread+Tclunk cycles
//
// Rounds are interleaved 0,1,0,2,0,3,... because this machine's speed drifts by a third from
// minute to minute; each figure is compared with the mean of its neighbouring (0) rounds.
// A raw pipelining client is used, not the convenience client, which would hide the server.
//
//   9p-bench [seconds-per-round] [repetitions] [io-threads]

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "lib9p/codec.hpp"
#include "lib9p/dial.hpp"
#include "lib9p/dirs.hpp"
#include "olliesrv/olliesrv.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int dial(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) throw std::runtime_error("connect " + path);
  return fd;
}

void write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0) throw std::runtime_error("write failed");
    p += w;
    n -= w;
  }
}

// Frames in from one socket, with as few copies and syscalls as the kernel allows.
class Reader {
 public:
  explicit Reader(int fd) : fd_(fd), buf_(1 << 16) {}
  // The next frame's type and tag.
  std::pair<std::uint8_t, std::uint16_t> next() {
    for (;;) {
      if (end_ - beg_ >= 7) {
        std::uint32_t size = buf_[beg_] | buf_[beg_ + 1] << 8 | buf_[beg_ + 2] << 16 | std::uint32_t(buf_[beg_ + 3]) << 24;
        if (end_ - beg_ >= size) {
          auto r = std::make_pair(buf_[beg_ + 4], std::uint16_t(buf_[beg_ + 5] | buf_[beg_ + 6] << 8));
          beg_ += size;
          return r;
        }
      }
      if (beg_ == end_) beg_ = end_ = 0;
      if (end_ == buf_.size()) {
        std::memmove(buf_.data(), buf_.data() + beg_, end_ - beg_);
        end_ -= beg_;
        beg_ = 0;
      }
      ssize_t n = ::read(fd_, buf_.data() + end_, buf_.size() - end_);
      if (n <= 0) throw std::runtime_error("server hung up");
      end_ += n;
    }
  }
  void read_exact(std::size_t n) {  // for the ping-pong
    while (end_ - beg_ < n) {
      ssize_t r = ::read(fd_, buf_.data() + end_, buf_.size() - end_);
      if (r <= 0) throw std::runtime_error("peer hung up");
      end_ += r;
    }
    beg_ += n;
    if (beg_ == end_) beg_ = end_ = 0;
  }

 private:
  int fd_;
  std::vector<std::uint8_t> buf_;
  std::size_t beg_ = 0, end_ = 0;
};

std::vector<std::uint8_t> frame(p9::Fcall f) { return *p9::encode(f); }

p9::Fcall tread(std::uint32_t fid, std::uint16_t tag) {
  p9::Fcall f;
  f.type = p9::Tread;
  f.tag = tag;
  f.fid = fid;
  f.count = 64;
  return f;
}

struct Figures {
  double ops_per_s = 0;
  double p50_us = 0, p99_us = 0;
};

Figures summarize(std::vector<double>& lat_us, double seconds, std::size_t ops) {
  std::sort(lat_us.begin(), lat_us.end());
  Figures f;
  f.ops_per_s = ops / seconds;
  if (!lat_us.empty()) {
    f.p50_us = lat_us[lat_us.size() / 2];
    f.p99_us = lat_us[std::min(lat_us.size() - 1, lat_us.size() * 99 / 100)];
  }
  return f;
}

// A 9P connection to olliesrv, attached, with `help` open on fid 1.
struct Conn {
  int fd;
  Reader in;
  explicit Conn(const std::string& sock) : fd(dial(sock)), in(fd) {
    p9::Fcall v;
    v.type = p9::Tversion;
    v.tag = p9::NOTAG;
    v.msize = 8192;
    v.version = "9P2000";
    rpc(v);
    p9::Fcall a;
    a.type = p9::Tattach;
    a.fid = 0;
    a.afid = p9::NOFID;
    a.uname = p9::login_name();
    rpc(a);
    p9::Fcall w;
    w.type = p9::Twalk;
    w.fid = 0;
    w.newfid = 1;
    w.wname = {"help"};
    rpc(w);
    p9::Fcall o;
    o.type = p9::Topen;
    o.fid = 1;
    rpc(o);
  }
  ~Conn() { ::close(fd); }
  void rpc(const p9::Fcall& t) {
    auto b = frame(t);
    write_all(fd, b.data(), b.size());
    auto [type, tag] = in.next();
    if (type != t.type + 1) throw std::runtime_error(std::string("bench setup: ") + p9::type_name(t.type) + " failed");
  }
};

Figures pingpong(const std::string& sock, double seconds) {
  std::vector<double> lat;
  int fd = dial(sock);
  Reader in(fd);
  std::uint8_t req[23] = {23, 0, 0, 0, p9::Tread};
  std::size_t ops = 0;
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (auto now = start; now < end; ops++) {
    write_all(fd, req, sizeof req);
    in.read_exact(75);
    auto t = Clock::now();
    lat.push_back(std::chrono::duration<double, std::micro>(t - now).count());
    now = t;
  }
  ::close(fd);
  return summarize(lat, std::chrono::duration<double>(Clock::now() - start).count(), ops);
}

Figures one_at_a_time(const std::string& sock, double seconds) {
  Conn c(sock);
  auto req = frame(tread(1, 0));
  std::vector<double> lat;
  std::size_t ops = 0;
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (auto now = start; now < end; ops++) {
    write_all(c.fd, req.data(), req.size());
    if (c.in.next().first != p9::Rread) throw std::runtime_error("Tread failed");
    auto t = Clock::now();
    lat.push_back(std::chrono::duration<double, std::micro>(t - now).count());
    now = t;
  }
  return summarize(lat, std::chrono::duration<double>(Clock::now() - start).count(), ops);
}

Figures sixteen_in_flight(const std::string& sock, double seconds) {
  Conn c(sock);
  constexpr int N = 16;
  std::vector<std::vector<std::uint8_t>> reqs;
  std::vector<Clock::time_point> sent(N);
  for (int i = 0; i < N; i++) reqs.push_back(frame(tread(1, static_cast<std::uint16_t>(i))));
  std::vector<double> lat;
  std::size_t ops = 0;
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int i = 0; i < N; i++) {
    sent[i] = Clock::now();
    write_all(c.fd, reqs[i].data(), reqs[i].size());
  }
  int outstanding = N;
  bool stopping = false;
  while (outstanding) {
    auto [type, tag] = c.in.next();
    if (type != p9::Rread || tag >= N) throw std::runtime_error("Tread failed");
    auto t = Clock::now();
    lat.push_back(std::chrono::duration<double, std::micro>(t - sent[tag]).count());
    ops++;
    outstanding--;
    if (!stopping && t >= end) stopping = true;
    if (!stopping) {
      sent[tag] = t;
      write_all(c.fd, reqs[tag].data(), reqs[tag].size());
      outstanding++;
    }
  }
  return summarize(lat, std::chrono::duration<double>(Clock::now() - start).count(), ops);
}

Figures walk_open_read_clunk(const std::string& sock, double seconds) {
  Conn c(sock);
  p9::Fcall w;
  w.type = p9::Twalk;
  w.fid = 0;
  w.newfid = 2;
  w.wname = {"help"};
  p9::Fcall o;
  o.type = p9::Topen;
  o.fid = 2;
  p9::Fcall k;
  k.type = p9::Tclunk;
  k.fid = 2;
  std::vector<std::vector<std::uint8_t>> steps = {frame(w), frame(o), frame(tread(2, 0)), frame(k)};
  std::vector<double> lat;
  std::size_t ops = 0;
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (auto now = start; now < end; ops++) {
    for (auto& s : steps) {
      write_all(c.fd, s.data(), s.size());
      if (c.in.next().first == p9::Rerror) throw std::runtime_error("cycle failed");
    }
    auto t = Clock::now();
    lat.push_back(std::chrono::duration<double, std::micro>(t - now).count());
    now = t;
  }
  return summarize(lat, std::chrono::duration<double>(Clock::now() - start).count(), ops);
}

// The baseline's server: one thread answering each 23-byte request with 75 bytes.
struct PingPongServer {
  std::string path;
  int lfd;
  std::thread th;
  explicit PingPongServer(std::string p) : path(std::move(p)) {
    lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || ::listen(lfd, 16)) throw std::runtime_error("bind");
    th = std::thread([this] {
      for (;;) {
        int fd = ::accept(lfd, nullptr, nullptr);
        if (fd < 0) return;
        Reader in(fd);
        std::uint8_t reply[75] = {75, 0, 0, 0, p9::Rread};
        try {
          for (;;) {
            in.read_exact(23);
            write_all(fd, reply, sizeof reply);
          }
        } catch (...) {
        }
        ::close(fd);
      }
    });
  }
  ~PingPongServer() {
    ::shutdown(lfd, SHUT_RDWR);
    ::close(lfd);
    th.join();
  }
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  unsigned threads = argc > 3 ? std::atoi(argv[3]) : 0;
  spdlog::set_level(spdlog::level::warn);
  auto dir = std::filesystem::temp_directory_path() / ("ollie-bench." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);  // olliesrv wants it private
  std::string sock = (dir / "ollie").string(), pp = (dir / "pingpong").string();

  ::setenv("XDG_DATA_HOME", (dir / "data").c_str(), 1);  // not the user's sessions
  ollie::Olliesrv srv(ollie::Options{{"unix!" + sock}, false, threads});
  if (auto st = srv.start(); !st) {
    std::fprintf(stderr, "9p-bench: %s\n", st.ename().c_str());
    return 1;
  }
  PingPongServer pps(pp);

  struct Test {
    const char* name;
    Figures (*run)(const std::string&, double);
    double reference;  // plan9port's lib9p on this kind of machine, as a ratio to ping-pong
    double aim;
  };
  Test tests[] = {{"(1) one read at a time", one_at_a_time, 0.78, 0.9},
                  {"(2) 16 reads in flight", sixteen_in_flight, 3.2, 5.0},
                  {"(3) walk+open+read+clunk", walk_open_read_clunk, 0.17, 0.22}};
  std::printf("9p-bench: olliesrv over a Unix socket, %u io threads, 64-byte reads; %d repetitions of %.1f s rounds\n",
              threads ? threads : std::max(1u, std::thread::hardware_concurrency()), reps, seconds);
  std::printf("%-28s %12s %9s %9s %9s\n", "round", "ops/s", "p50 us", "p99 us", "vs (0)");
  std::map<int, std::vector<double>> ratios;
  Figures before = pingpong(pp, seconds);
  std::printf("%-28s %12.0f %9.1f %9.1f\n", "(0) ping-pong 23/75 bytes", before.ops_per_s, before.p50_us, before.p99_us);
  for (int r = 0; r < reps; r++) {
    for (int i = 0; i < 3; i++) {
      Figures f = tests[i].run(sock, seconds);
      Figures after = pingpong(pp, seconds);
      double base = (before.ops_per_s + after.ops_per_s) / 2;
      double ratio = f.ops_per_s / base;
      ratios[i].push_back(ratio);
      std::printf("%-28s %12.0f %9.1f %9.1f %8.2fx\n", tests[i].name, f.ops_per_s, f.p50_us, f.p99_us, ratio);
      std::printf("%-28s %12.0f %9.1f %9.1f\n", "(0) ping-pong 23/75 bytes", after.ops_per_s, after.p50_us, after.p99_us);
      before = after;
    }
  }
  std::printf("\nmedian ratio to ping-pong (plan9port lib9p here / aim):\n");
  for (int i = 0; i < 3; i++) {
    auto& v = ratios[i];
    std::sort(v.begin(), v.end());
    std::printf("  %-28s %6.2fx   (%.2fx / %.2fx)\n", tests[i].name, v[v.size() / 2], tests[i].reference, tests[i].aim);
  }
  srv.shutdown();
  srv.wait();
  std::filesystem::remove_all(dir);
  return 0;
}
