// toolsrv-bench: the round trip of a trivial tool through proc/new under Landlock, against a bare
// fork+exec+wait of the same executable, measured in the same run.
//
//   (bare)   fork, execve(<tools>/true), waitpid
//   (new)    a call as a client makes it: Twalk proc/new, Topen, Twrite the request, Tread the
//            reply, Tclunk; toolsrv forks, applies Landlock and no_new_privs, execs, reaps,
//            collects, replies
//   (reuse)  the same call on one open Rdwr fid: Twrite, Tread
//
// Rounds are interleaved (bare, new, reuse, bare, ...) because this machine's speed drifts;
// each figure is per call over all rounds. The daemon runs in-process on a real socket, with
// the shipped sandbox.yaml.
//
//   toolsrv-bench [calls-per-round] [rounds]

#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "lib9p/client.hpp"
#include "toolsrv/toolsrv.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
const std::string secret(64, 'a');

std::string make_root() {
  std::string t = "/tmp/toolsrv-bench-XXXXXX";
  if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp");
  return t;
}

void must(const p9::Status& st, const char* what) {
  if (!st) throw std::runtime_error(std::string(what) + ": " + st.ename());
}

// One bare spawn of the tool, as the baseline: no sandbox, no pipes, no 9P.
void bare(const std::string& exe) {
  pid_t pid;
  char* argv[] = {const_cast<char*>(exe.c_str()), nullptr};
  if (::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, environ) != 0) throw std::runtime_error("spawn");
  int st;
  ::waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) throw std::runtime_error("bare true failed");
}

void check_reply(const std::string& r) {
  if (r.rfind("pid=", 0) != 0 || r.find("\nstatus=exited\nexit=0\n") == std::string::npos ||
      r.find("sandbox=none") != std::string::npos)
    throw std::runtime_error("unexpected reply: " + r);
}

const std::string request = "tool=true\nagent=bench\n\n{}";

void call_new_fid(const p9::CFid& root) {
  auto f = root.walk("proc/new");
  if (!f) throw std::runtime_error(f.ename());
  must(f->open(p9::ORDWR), "open");
  if (auto w = f->pwrite(0, request); !w) throw std::runtime_error(w.ename());
  auto r = f->pread(0, 8192);
  if (!r) throw std::runtime_error(r.ename());
  check_reply(*r);
  must(f->clunk(), "clunk");
}

void call_reused_fid(p9::CFid& f) {
  if (auto w = f.pwrite(0, request); !w) throw std::runtime_error(w.ename());
  auto r = f.pread(0, 8192);
  if (!r) throw std::runtime_error(r.ename());
  check_reply(*r);
}

struct Series {
  const char* name;
  std::vector<double> us;  // per-call latency
  double seconds = 0;
  double pct(double p) const {
    auto v = us;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()))];
  }
  double rate() const { return us.size() / seconds; }
};

template <class F>
void round(Series& s, int calls, F f) {
  const auto start = Clock::now();
  for (int i = 0; i < calls; i++) {
    const auto t0 = Clock::now();
    f();
    s.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  s.seconds += std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 200;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 10;
  spdlog::set_level(spdlog::level::err);

  // A private world: HOME, XDG dirs, the shipped policy, one tool `true` (a copy of /bin/true).
  const auto root = make_root();
  for (auto d : {"/home", "/run", "/cwd", "/config", "/tools"}) std::filesystem::create_directories(root + d);
  ::chmod((root + "/run").c_str(), 0700);
  ::setenv("HOME", (root + "/home").c_str(), 1);
  ::setenv("XDG_RUNTIME_DIR", (root + "/run").c_str(), 1);
  ::setenv("XDG_CONFIG_HOME", (root + "/config").c_str(), 1);
  ::setenv("XDG_DATA_HOME", (root + "/data").c_str(), 1);
  ::setenv("OLLIE_TOOLS_PATH", (root + "/tools").c_str(), 1);
  std::filesystem::copy_file(TOOLSRV_BENCH_POLICY, root + "/config/sandbox.yaml");
  const std::string exe = root + "/tools/true";
  std::filesystem::copy_file("/bin/true", exe);
  ::chmod(exe.c_str(), 0755);
  std::ofstream(exe + ".meta") << R"({"description": "Does nothing.", "scope": "read"})";

  toolsrv::Options opt;
  opt.address = "unix!" + root + "/run/toolsrv/bench.sock";
  opt.cwd = root + "/cwd";
  opt.config_root = root + "/config";
  opt.secret = secret;
  opt.bin_path = "/usr/bin";
  toolsrv::Toolsrv srv(opt);
  must(srv.start(), "start");

  auto c = p9::Client::dial(opt.address);
  if (!c) throw std::runtime_error(c.ename());
  auto afid = (*c)->auth("olliesrv");
  if (!afid || !afid->write(secret)) throw std::runtime_error("auth");
  auto rootfid = (*c)->attach("olliesrv", "", &*afid);
  if (!rootfid) throw std::runtime_error(rootfid.ename());
  {
    auto ctl = rootfid->walk("ctl");
    must(ctl->open(p9::OWRITE), "open ctl");
    if (!ctl->write("load bench true\n")) throw std::runtime_error("write ctl");
    must(ctl->clunk(), "load");
  }
  auto info = rootfid->walk("info");
  must(info->open(p9::OREAD), "open info");
  const auto text = *info->read_all();
  const auto at = text.find("landlock=");
  const std::string abi = text.substr(at + 9, text.find('\n', at) - at - 9);
  if (abi == "0") throw std::runtime_error("this kernel has no Landlock: nothing to measure");

  auto reused = rootfid->walk("proc/new");
  must(reused->open(p9::ORDWR), "open proc/new");
  for (int i = 0; i < 20; i++) {  // warm up
    bare(exe);
    call_new_fid(*rootfid);
    call_reused_fid(*reused);
  }
  Series b{"bare fork+exec+wait"}, n{"proc/new, new fid"}, r{"proc/new, one fid"};
  for (int i = 0; i < rounds; i++) {
    round(b, calls, [&] { bare(exe); });
    round(n, calls, [&] { call_new_fid(*rootfid); });
    round(r, calls, [&] { call_reused_fid(*reused); });
  }

  std::printf("toolsrv-bench: tool `true` under Landlock ABI %s, %d rounds x %d calls, interleaved\n\n", abi.c_str(), rounds, calls);
  std::printf("%-22s %10s %10s %10s %10s\n", "", "p50 us", "p99 us", "calls/s", "p50 ratio");
  for (auto* s : {&b, &n, &r})
    std::printf("%-22s %10.0f %10.0f %10.0f %9.2fx\n", s->name, s->pct(0.5), s->pct(0.99), s->rate(), s->pct(0.5) / b.pct(0.5));
  std::printf("\nthroughput ratio (bare calls/s / proc/new calls/s): new fid %.2fx, one fid %.2fx\n", b.rate() / n.rate(), b.rate() / r.rate());

  reused->clunk().ok();
  (*c)->close();
  srv.shutdown();
  srv.wait();
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  return 0;
}
