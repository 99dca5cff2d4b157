// engine-bench: the five engine figures of issue 8, against the real bin/olliesrv (its real
// toolsrv, the shipped tools, profiles and prompts) in a private HOME, with the fake provider
// in-process as an openai backend (tests/olliesrv/world.hpp). Each figure comes with a baseline
// measured in the same run, interleaved where it applies. Figures only, no assertions.
//
//   rounds   engine overhead per tool round (a meta-only `true` tool) vs fork+exec of /bin/true
//   readers  1,000 readers of one agent's chat: latency from the provider's stamp to each Rread
//   memory   olliesrv's RSS with 0 and with 1,000 restored idle sessions
//   restore  10,000 persisted sessions listed in session/idx vs the same start with none
//   tokens   bytes of a default agent's first request, and added per tool round
//
//   engine-bench [rounds|readers|memory|restore|tokens]...   (none: all five)

#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lib9p/codec.hpp"
#include "olliesrv/ids.hpp"
#include "olliesrv/store.hpp"
#include "olliesrv/world.hpp"
#include "support/bench.hpp"

extern char** environ;

namespace {

using Clock = testing_support::BenchClock;
using testing_support::median;
using testing_support::ms_since;
using json = nlohmann::json;
namespace fs = std::filesystem;

/// The last bytes of the world's olliesrv log, for failures.
std::string log_tail(const convo::World& w) {
  const std::string t = w.log_text();
  return t.substr(t.size() > 1500 ? t.size() - 1500 : 0);
}

/// Prints the olliesrv log tail when a benchmark leaves by an exception.
struct LogOnThrow {
  const convo::World& w;
  int n = std::uncaught_exceptions();
  ~LogOnThrow() {
    if (std::uncaught_exceptions() > n) std::printf("olliesrv log tail:\n%s\n", log_tail(w).c_str());
  }
};


double pct(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  auto i = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1));
  return sorted[i];
}

/// fork+exec (or posix_spawn, a vfork whose cost does not grow with this process's memory) of
/// argv, waited for; the baseline of a tool round.
void spawn_wait(const std::vector<std::string>& args, bool use_fork) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (use_fork) {
    pid = ::fork();
    if (pid == 0) {
      ::execve(argv[0], argv.data(), environ);
      ::_exit(127);
    }
  } else if (::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
    return;
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
}

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

/// olliesrv's pid in world w (its command line names w's socket).
pid_t server_pid(const convo::World& w) {
  const auto p = convo::servers("bin/olliesrv ", w.sock);
  return p.empty() ? -1 : p.front();
}

/// A field of /proc/<pid>/status in KiB (VmRSS, VmHWM, RssAnon).
long status_kib(pid_t pid, const std::string& field) {
  const std::string st = convo::read_file("/proc/" + std::to_string(pid) + "/status");
  auto p = st.find(field + ":");
  if (p == std::string::npos) return -1;
  return std::strtol(st.c_str() + p + field.size() + 1, nullptr, 10);
}

/// Context switches (voluntary and not) of every thread of a process so far: each hand-over
/// between threads or processes is one at least, and costs a wake-up.
long switches(pid_t pid) {
  long n = 0;
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    const std::string st = convo::read_file(t.path().string() + "/status");
    for (const char* field : {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"})
      if (auto p = st.find(field); p != std::string::npos) n += std::strtol(st.c_str() + p + std::strlen(field), nullptr, 10);
  }
  return n;
}

/// CPU time (user + system) of this process's children waited for so far, ms.
double children_cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1000.0 + static_cast<double>(t.tv_usec) / 1000.0; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

/// CPU time (user + system) of a process so far, ms: its own, and that of its children waited for.
struct Cpu {
  double self = 0, children = 0;
};

Cpu cpu_ms(pid_t pid) {
  const std::string st = convo::read_file("/proc/" + std::to_string(pid) + "/stat");
  auto p = st.rfind(')');
  if (p == std::string::npos) return {};
  std::vector<std::string> f;
  std::size_t i = p + 2;
  while (i < st.size()) {
    auto j = st.find(' ', i);
    if (j == std::string::npos) j = st.size();
    f.push_back(st.substr(i, j - i));
    i = j + 1;
  }
  // fields after the comm: state is f[0]; utime f[11], stime f[12], cutime f[13], cstime f[14]
  if (f.size() < 15) return {};
  const double tick = 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return {(std::stod(f[11]) + std::stod(f[12])) * tick, (std::stod(f[13]) + std::stod(f[14])) * tick};
}

/// Replaces the world's tools/ link by a directory linking every built tool, plus `true`.
void add_true_tool(convo::World& w) {
  const std::string dir = w.own_dir("tools");
  // Distinct arguments per call keep the per-turn read cache (§8.3.3) from answering a round.
  convo::write_file(dir + "/true.meta",
                    R"({"description":"does nothing","cmd":"true","scope":"read",)"
                    R"("args":{"type":"object","properties":{"i":{"type":"integer"}}}})"
                    "\n");
}

// ---- 1. engine overhead per tool round ----

void bench_rounds() {
  const int rounds = 200, reps = 5;
  std::printf("\n== 1. engine overhead per tool round ==\n");
  std::printf("a turn of %d rounds, each one call of a meta-only `true` tool (sh -c true under toolsrv),\n"
              "fake provider answering at once, history cleared between turns; turns nobody reads (ended by the\n"
              "provider's last answer) and turns a reader of chat follows, interleaved with %d posix_spawns\n"
              "of /bin/true and of /bin/sh -c true (and fork+execs of /bin/true)\n",
              rounds, rounds);
  convo::World w;
  LogOnThrow keep_log{w};
  w.fake.keep_bodies(false);
  add_true_tool(w);
  auto s = w.session("bench");
  auto a = w.agent(s, "main");
  if (auto st = w.rdwr(a + "/ctl", "tool_load true"); !st) {
    std::printf("ctl tool_load true failed: %s\n", st.ename().c_str());
    return;
  }
  auto chat = w.open(a + "/chat");
  std::vector<double> per_round, per_true, per_sh, per_fork, per_save, srv_cpu, tsrv_cpu, tool_cpu, sh_cpu, fake_cpu,
      srv_cs, tsrv_cs;
  // §7.7 saves session.json after every tool round: the same save (temp, fsync, rename) of a
  // session in mid-turn (100 rounds of history), in the same data directory, as a baseline.
  ollie::Store store(w.data + "/bench-store");
  ollie::SessionRecord mid_turn;
  mid_turn.id = ollie::new_uuid();
  mid_turn.name = "mid";
  mid_turn.cwd = w.project;
  {
    ollie::AgentRecord ar;
    ar.id = ollie::new_uuid();
    ar.name = "main";
    ar.profile = "default";
    ar.params = "{}";
    for (int i = 0; i < 100; i++) {
      ollie::HistoryMessage call, res;
      call.msg.role = ollie::backend::Role::assistant;
      call.msg.tool_calls.push_back({"c_" + std::to_string(i), "true", "{\"i\":" + std::to_string(i) + "}"});
      res.msg.role = ollie::backend::Role::tool;
      res.msg.tool_call_id = "c_" + std::to_string(i);
      res.tool_name = "true";
      ar.messages.push_back(call);
      ar.messages.push_back(res);
    }
    mid_turn.agents.push_back(std::move(ar));
  }
  // Each rep runs two turns, in alternating order: one watched by a reader of chat (it wakes at
  // every line the agent writes there, as a person's terminal would), one watched by nobody
  // (its end is the provider's last answer): the engine alone.
  struct Turn {
    double ms = 0, srv_cpu = 0, srv_cs = 0, tsrv_cpu = 0, tsrv_cs = 0, tool_cpu = 0, fake_cpu = 0;
  };
  int turn_no = 0;
  auto run_turn = [&](bool watched) -> std::optional<Turn> {
    const std::string done = "done-" + std::to_string(++turn_no) + "-ok";
    for (int i = 0; i < rounds; i++)
      w.fake.push({{"tool_calls", json::array({{{"id", "c" + std::to_string(turn_no) + "_" + std::to_string(i)},
                                                {"name", "true"},
                                                {"arguments", {{"i", i}}}}})}});
    w.fake.push({{"text", done}});
    const std::size_t last_answer = w.fake.answered() + rounds + 1;
    const pid_t srv = server_pid(w);
    const auto ts = w.toolsrvs();
    const pid_t tsrv = ts.empty() ? -1 : ts.front();
    const Cpu c0 = cpu_ms(srv), t0cpu = tsrv > 0 ? cpu_ms(tsrv) : Cpu{};
    const long s0 = switches(srv), ts0 = tsrv > 0 ? switches(tsrv) : 0;
    const double f0 = w.fake.cpu_ms();
    const auto t0 = Clock::now();
    if (auto st = w.write(a + "/prompt", "go " + std::to_string(turn_no) + "\n"); !st) {
      std::printf("prompt: %s\n", st.ename().c_str());
      return std::nullopt;
    }
    const bool ended = watched ? convo::World::read_until(chat, done, "", std::chrono::seconds(120)).find(done) != std::string::npos
                               : w.fake.wait_answered(last_answer, std::chrono::seconds(120));
    Turn t;
    t.ms = ms_since(t0);
    const Cpu c1 = cpu_ms(srv), t1cpu = tsrv > 0 ? cpu_ms(tsrv) : Cpu{};
    const long s1 = switches(srv), ts1 = tsrv > 0 ? switches(tsrv) : 0;
    const double f1 = w.fake.cpu_ms();
    if (!ended || !convo::eventually([&] { return w.read_state(a) == "idle"; })) {
      std::printf("turn %d did not finish within 120 s (state %s); log tail:\n%s\n", turn_no, w.read_state(a).c_str(),
                  log_tail(w).c_str());
      return std::nullopt;
    }
    if (!watched) (void)convo::World::read_until(chat, done, "", std::chrono::seconds(10));  // the reader catches up
    t.srv_cpu = (c1.self - c0.self) / rounds;
    t.srv_cs = static_cast<double>(s1 - s0) / rounds;
    t.tsrv_cs = static_cast<double>(ts1 - ts0) / rounds;
    t.tsrv_cpu = (t1cpu.self - t0cpu.self) / rounds;
    t.tool_cpu = (t1cpu.children - t0cpu.children) / rounds;
    t.fake_cpu = (f1 - f0) / (rounds + 1);
    t.ms /= rounds;
    // A fresh history for the next turn, so every turn's requests are the same size.
    std::string clear_err;
    if (!convo::eventually([&] {
          auto st = w.rdwr(a + "/ctl", "clear");
          if (!st) clear_err = st.ename();
          return static_cast<bool>(st);
        }))
      std::printf("ctl clear: %s\n", clear_err.c_str());
    else if (!clear_err.empty())
      std::printf("(agent/idx said idle but ctl clear answered `%s` first)\n", clear_err.c_str());
    return t;
  };
  std::vector<double> per_round_watched;
  std::size_t got_turns = 0;
  if (!run_turn(true)) return;  // warm-up: starts the toolsrv
  for (int rep = 0; rep < reps; rep++) {
    std::optional<Turn> quiet, seen;
    for (bool watched : {rep % 2 == 1, rep % 2 == 0}) {
      (watched ? seen : quiet) = run_turn(watched);
      if (!(watched ? seen : quiet)) return;
    }
    got_turns += 2;
    per_round.push_back(quiet->ms);
    per_round_watched.push_back(seen->ms);
    srv_cpu.push_back(quiet->srv_cpu);
    srv_cs.push_back(quiet->srv_cs);
    tsrv_cs.push_back(quiet->tsrv_cs);
    tsrv_cpu.push_back(quiet->tsrv_cpu);
    tool_cpu.push_back(quiet->tool_cpu);
    fake_cpu.push_back(quiet->fake_cpu);
    auto t1 = Clock::now();
    for (int i = 0; i < rounds; i++) spawn_wait({"/bin/true"}, false);
    per_true.push_back(ms_since(t1) / rounds);
    t1 = Clock::now();
    const double sh0 = children_cpu_ms();
    for (int i = 0; i < rounds; i++) spawn_wait({"/bin/sh", "-c", "true"}, false);
    per_sh.push_back(ms_since(t1) / rounds);
    sh_cpu.push_back((children_cpu_ms() - sh0) / rounds);
    t1 = Clock::now();
    for (int i = 0; i < rounds; i++) spawn_wait({"/bin/true"}, true);
    per_fork.push_back(ms_since(t1) / rounds);
    t1 = Clock::now();
    for (int i = 0; i < rounds; i++) (void)store.save(mid_turn);
    per_save.push_back(ms_since(t1) / rounds);
  }
  // Did every round run the tool? Count the tool blocks of the last turn.
  std::size_t tool_blocks = 0;
  if (auto raw = w.read(a + "/log.raw"))
    for (std::size_t pos = 0; (pos = raw->find("\"role\":\"tool\"", pos)) != std::string::npos; pos++) tool_blocks++;
  const double r = median(per_round), rw = median(per_round_watched), t = median(per_true), sh = median(per_sh);
  std::printf("turns: %zu of %d rounds (tool blocks in log.raw: %zu, expected %d)\n", got_turns, rounds, tool_blocks,
              (2 * reps + 1) * rounds);
  std::printf("per round (median of %d turns), nobody reading chat: %.3f ms = %.0f rounds/s\n", reps, r, 1000 / r);
  std::printf("per round (median of %d turns), a reader of chat:    %.3f ms = %.0f rounds/s\n", reps, rw, 1000 / rw);
  std::printf("spawn+wait /bin/true:          %.3f ms   -> overhead beyond it: %.3f ms per round (%.3f read)\n", t, r - t,
              rw - t);
  std::printf("spawn+wait /bin/sh -c true:    %.3f ms   -> overhead beyond it: %.3f ms per round (%.3f read)\n", sh, r - sh,
              rw - sh);
  // The machine's speed drifts between phases of a run: the overhead paired with the spawns
  // measured right after the same rep's turns is the steadier figure.
  std::vector<double> paired;
  for (std::size_t i = 0; i < per_round.size(); i++) paired.push_back(per_round[i] - per_sh[i]);
  const auto [lo, hi] = std::minmax_element(paired.begin(), paired.end());
  std::printf("overhead beyond sh -c true, paired within each rep, nobody reading: median %.3f ms (%.3f-%.3f over %zu reps)\n",
              median(paired), *lo, *hi, paired.size());
  std::printf("CPU per round of the turns nobody read (user+sys, clock ticks): olliesrv %.3f ms, toolsrv %.3f ms, the tool (sh -c true) %.3f ms\n"
              "  (sh -c true alone, spawned by this bench on a quiet machine: %.3f ms)\n",
              median(srv_cpu), median(tsrv_cpu), median(tool_cpu), median(sh_cpu));
  std::printf("context switches per round (every thread): olliesrv %.1f, toolsrv %.1f\n", median(srv_cs), median(tsrv_cs));
  std::printf("the fake provider's CPU per request (reading it, parsing its JSON body, answering): %.3f ms\n",
              median(fake_cpu));
  std::printf("session.json save (temp, fsync, rename) of a mid-turn session: %.3f ms (%zu bytes)\n", median(per_save),
              ollie::to_json(mid_turn).size());
  std::printf("(fork+exec /bin/true from this bench: %.3f ms; its VmRSS %ld KiB)\n",
              median(per_fork), status_kib(::getpid(), "VmRSS"));
  std::printf("turn-by-turn ms/round, nobody reading / read:");
  for (std::size_t i = 0; i < per_round.size(); i++) std::printf(" %.3f/%.3f", per_round[i], per_round_watched[i]);
  std::printf("\n");
}

// ---- 2. 1,000 readers of one agent's chat ----

struct Reader {
  std::uint32_t fid = 0;
  std::uint64_t offset = 0;
  std::string text;
  std::size_t stamps = 0;  // complete stamps seen
  bool eof = false, failed = false;
};

/// One connection's readers, served by one thread with a raw 9P client over a blocking socket:
/// each socket read is stamped with the clock once, every whole Rread in it is decoded and its
/// reader's next Tread queued, and the Treads of one socket read go out in one write. The time
/// measured is the server's (and the kernel's), not a client library's: on 2 cores an
/// asynchronous client's own work per Rread was most of what the figure measured.
class RawReaders {
 public:
  RawReaders(const std::string& sock, std::vector<Reader>& rs, std::size_t first, std::size_t count)
      : rs_(rs), first_(first), count_(count) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock.c_str());
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) error = "connect: " + sock;
  }
  ~RawReaders() {
    if (fd_ >= 0) ::close(fd_);
  }

  /// Version, attach, and a walk and open of `path` per reader; true when every fid is open.
  bool open(const std::string& user, const std::string& path) {
    if (!error.empty()) return false;
    p9::Fcall v{.type = p9::Tversion, .tag = p9::NOTAG, .msize = 65536, .version = "9P2000"};
    p9::Fcall at{.type = p9::Tattach, .tag = 0, .fid = 0, .afid = p9::NOFID, .uname = user};
    if (!send({v}) || !expect(p9::Rversion) || !send({at}) || !expect(p9::Rattach)) return false;
    std::vector<std::string> names;
    for (std::size_t b = 0, e; b < path.size(); b = e + 1) {
      e = path.find('/', b);
      if (e == std::string::npos) e = path.size();
      names.push_back(path.substr(b, e - b));
    }
    std::vector<p9::Fcall> out;
    for (std::size_t i = 0; i < count_; i++) {
      auto& r = rs_[first_ + i];
      r.fid = static_cast<std::uint32_t>(first_ + i + 1);
      const auto tag = static_cast<std::uint16_t>(2 * i);
      out.push_back({.type = p9::Twalk, .tag = tag, .fid = 0, .newfid = r.fid, .wname = names});
      out.push_back({.type = p9::Topen, .tag = static_cast<std::uint16_t>(tag + 1), .fid = r.fid, .mode = p9::OREAD});
    }
    if (!send(out)) return false;
    for (std::size_t i = 0; i < 2 * count_; i++)
      if (!expect(p9::Rwalk, p9::Ropen)) return false;
    return true;
  }

  /// Reads until each reader has `events` stamps, an end of file or an error, or `until`.
  void run(std::size_t events, std::size_t width, const std::string& marker, Clock::time_point until) {
    std::vector<p9::Fcall> out;
    for (std::size_t i = 0; i < count_; i++) out.push_back(tread(i));
    if (!send(out)) return;
    std::size_t left = count_;
    timeval tv{0, 200000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (left > 0 && Clock::now() < until) {
      const ssize_t n = fill();
      if (n < 0) continue;  // the receive timeout: look at the clock
      if (n == 0) {
        error = "connection closed";
        return;
      }
      const auto now = Clock::now().time_since_epoch().count();
      out.clear();
      for (;;) {
        auto f = next_frame();
        if (!f) break;
        const std::size_t i = f->tag;
        if (i >= count_) continue;
        auto& r = rs_[first_ + i];
        if (f->type != p9::Rread) {
          r.failed = true;
          if (error.empty()) error = f->type == p9::Rerror ? f->ename : "unexpected reply";
          left--;
          continue;
        }
        if (f->data.empty()) {
          r.eof = true;
          left--;
          continue;
        }
        r.offset += f->data.size();
        r.text += f->data;
        count_stamps(r, now, width, marker);
        if (r.stamps >= events) left--;
        else out.push_back(tread(i));
      }
      if (!out.empty() && !send(out)) return;
    }
  }

  std::vector<double> lat;  ///< ms, one per stamp
  std::string error;

 private:
  p9::Fcall tread(std::size_t i) const {
    const auto& r = rs_[first_ + i];
    return {.type = p9::Tread, .tag = static_cast<std::uint16_t>(i), .fid = r.fid, .offset = r.offset, .count = 8192};
  }

  void count_stamps(Reader& r, long long now, std::size_t width, const std::string& marker) {
    auto start = r.text.find(marker);
    if (start == std::string::npos) return;
    start = r.text.find("\n\n", start);
    if (start == std::string::npos) return;
    start += 2;
    std::size_t end = start;
    while (end < r.text.size() && r.text[end] >= '0' && r.text[end] <= '9') end++;
    const std::size_t complete = (end - start) / width;
    for (std::size_t k = r.stamps; k < complete; k++) {
      const long long stamp = std::stoll(r.text.substr(start + k * width, width));
      lat.push_back(static_cast<double>(now - stamp) / 1e6);
    }
    r.stamps = complete;
  }

  bool send(const std::vector<p9::Fcall>& fs) {
    std::vector<std::uint8_t> buf;
    for (const auto& f : fs)
      if (!p9::encode(f, buf)) {
        error = "encode";
        return false;
      }
    for (std::size_t at = 0; at < buf.size();) {
      const ssize_t n = ::write(fd_, buf.data() + at, buf.size() - at);
      if (n <= 0) {
        error = "write failed";
        return false;
      }
      at += static_cast<std::size_t>(n);
    }
    return true;
  }

  ssize_t fill() {
    if (used_ > 0 && used_ == in_.size()) in_.clear(), used_ = 0;
    const std::size_t have = in_.size();
    in_.resize(have + 65536);
    const ssize_t n = ::read(fd_, in_.data() + have, 65536);
    in_.resize(have + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    return n;
  }

  std::optional<p9::Fcall> next_frame() {
    const std::size_t avail = in_.size() - used_;
    if (avail < 4) return compact();
    const std::uint32_t size = in_[used_] | in_[used_ + 1] << 8 | in_[used_ + 2] << 16 | static_cast<std::uint32_t>(in_[used_ + 3]) << 24;
    if (avail < size) return compact();
    auto f = p9::decode(std::span(in_.data() + used_, size));
    used_ += size;
    if (!f) {
      error = "undecodable reply";
      return p9::Fcall{.type = p9::Rerror, .tag = p9::NOTAG};
    }
    return std::move(*f);
  }

  std::nullopt_t compact() {
    in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(used_));
    used_ = 0;
    return std::nullopt;
  }

  /// Reads until a whole reply has come; true when it is of type `want` or `also`.
  bool expect(std::uint8_t want, std::uint8_t also = 0) {
    for (;;) {
      if (auto f = next_frame()) {
        if (f->type == want || (also && f->type == also)) return true;
        error = f->type == p9::Rerror ? f->ename : "unexpected reply";
        return false;
      }
      if (fill() <= 0) {
        error = "no reply";
        return false;
      }
    }
  }

  std::vector<Reader>& rs_;
  std::size_t first_, count_;
  int fd_ = -1;
  std::vector<std::uint8_t> in_;
  std::size_t used_ = 0;
};

void bench_readers(int readers, int delay_ms) {
  const int conns = std::min(4, readers), events = 100;
  std::printf("\n== 2. %d readers of one agent's chat, %d stamped deltas%s ==\n", readers, events,
              delay_ms ? (" " + std::to_string(delay_ms) + " ms apart").c_str() : " sent back to back");
  convo::World w;
  LogOnThrow keep_log{w};
  auto s = w.session("bench");
  auto a = w.agent(s, "main");
  const std::string marker = "stamps please";
  const std::size_t width = std::to_string(Clock::now().time_since_epoch().count()).size();
  const std::string user = convo::World::login();  // runs `id -un`: once, not per reader

  std::vector<Reader> rs(static_cast<std::size_t>(readers));
  std::vector<std::unique_ptr<RawReaders>> cs;
  std::size_t opened = 0;
  for (int k = 0; k < conns; k++) {
    const std::size_t first = static_cast<std::size_t>(readers) * static_cast<std::size_t>(k) / conns;
    const std::size_t last = static_cast<std::size_t>(readers) * static_cast<std::size_t>(k + 1) / conns;
    auto c = std::make_unique<RawReaders>(w.sock, rs, first, last - first);
    if (!c->open(user, a + "/chat")) {
      std::printf("connection %d: %s\n", k, c->error.c_str());
      continue;
    }
    opened += last - first;
    cs.push_back(std::move(c));
  }
  // Every fid is open: one thread per connection reads while the turn streams.
  const auto until = Clock::now() + std::chrono::seconds(60);
  std::vector<std::thread> threads;
  for (auto& c : cs) threads.emplace_back([&, c = c.get()] { c->run(events, width, marker, until); });
  json resp = {{"stamp", true}, {"events", events}};
  if (delay_ms) resp["delay_ms"] = delay_ms;
  w.fake.push(resp);
  if (auto st = w.write(a + "/prompt", marker); !st) std::printf("prompt: %s\n", st.ename().c_str());
  for (auto& t : threads) t.join();

  std::vector<double> lat;
  std::string first_error;
  for (auto& c : cs) {
    lat.insert(lat.end(), c->lat.begin(), c->lat.end());
    if (first_error.empty()) first_error = c->error;
  }
  std::size_t bytes_ok = 0, eofs = 0, errors = 0;
  for (auto& r : rs) {
    if (r.stamps == static_cast<std::size_t>(events)) bytes_ok++;
    if (r.eof) eofs++;
    if (r.failed) errors++;
  }
  std::sort(lat.begin(), lat.end());
  std::printf("fids opened: %zu of %d on %d connections; readers with every stamp: %zu; errors: %zu%s%s; EOFs: %zu\n",
              opened, readers, conns, bytes_ok, errors, first_error.empty() ? "" : " first: ", first_error.c_str(), eofs);
  std::printf("latency stamp -> Rread over %zu samples: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", lat.size(),
              pct(lat, 0.50), pct(lat, 0.99), lat.empty() ? 0 : lat.back());
}

// ---- 3 and 4: persisted sessions ----

/// Writes n persisted sessions of one idle default agent each (a short exchange: two messages,
/// two blocks) into the world's sessions directory, with store.hpp's to_json.
/// Returns the name of the session restore adds last (it loads the directories sorted by id).
std::string write_sessions(const convo::World& w, const std::string& sessions_dir, int n) {
  std::string last_id, last_name;
  for (int i = 0; i < n; i++) {
    ollie::SessionRecord s;
    s.id = ollie::new_uuid();
    s.name = "s" + std::to_string(i);
    s.cwd = w.project;
    s.bypass = "mode ask\n";
    ollie::AgentRecord ar;
    ar.id = ollie::new_uuid();
    ar.name = "main";
    ar.profile = "default";
    ar.created = 1764590000;
    ar.params = "{}";
    ar.block_counter = 2;
    ollie::HistoryMessage u, asst;
    u.msg.role = ollie::backend::Role::user;
    u.msg.content = "hello";
    asst.msg.role = ollie::backend::Role::assistant;
    asst.msg.content = "Hello, how can I help?";
    ar.messages = {u, asst};
    const std::string dir = sessions_dir + "/" + s.id;
    const std::string blocks = json({{"role", "user"}, {"id", ollie::block_id(s.id, ar.id, 1)}, {"content", "hello"}}).dump() +
                               "\n" +
                               json({{"role", "assistant"}, {"id", ollie::block_id(s.id, ar.id, 2)}, {"content", asst.msg.content}})
                                   .dump() +
                               "\n";
    const std::string agent_id = ar.id;
    s.agents.push_back(std::move(ar));
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::owner_all);
    convo::write_file(dir + "/session.json", ollie::to_json(s));
    convo::write_file(dir + "/" + agent_id + ".blocks.jsonl", blocks);
    if (s.id > last_id) {
      last_id = s.id;
      last_name = s.name;
    }
  }
  return last_name;
}

/// Restarts the world's olliesrv; ms from the start until session/idx has `want` lines.
/// With `last`, polls a walk to session/<last> (cheap: names are indexed) rather than idx, so the
/// polling costs the restoring server little; idx is read once at the end.
double restart_until_listed(convo::World& w, std::size_t want, std::size_t* listed, const std::string& last = "") {
  w.stop_server(SIGKILL);
  const auto t0 = Clock::now();
  w.start();
  std::size_t n = 0;
  convo::eventually(
      [&] {
        if (!last.empty() && !w.read("session/" + last + "/name")) return false;
        auto idx = w.read("session/idx");
        n = idx ? lines(*idx) : 0;
        return idx && n >= want;
      },
      std::chrono::seconds(120));
  const double ms = ms_since(t0);
  if (listed) *listed = n;
  return ms;
}

void bench_memory() {
  const int n = 1000;
  std::printf("\n== 3. memory: olliesrv RSS with 0 and %d idle sessions ==\n", n);
  std::printf("the %d sessions are persisted ones (session.json via store.hpp's to_json, one default agent with a\n"
              "two-message history and two blocks each) restored at start: no toolsrv per session\n",
              n);
  convo::World w;
  LogOnThrow keep_log{w};
  const std::string sessions = w.data + "/sessions";
  std::size_t listed = 0;
  restart_until_listed(w, 0, &listed);
  // Touch every file once, so the baseline pays what the loaded server pays for a first read.
  (void)w.read("session/idx");
  const pid_t p0 = server_pid(w);
  const long rss0 = status_kib(p0, "VmRSS"), anon0 = status_kib(p0, "RssAnon");
  write_sessions(w, sessions, n);
  restart_until_listed(w, n, &listed);
  const pid_t p1 = server_pid(w);
  const long rss1 = status_kib(p1, "VmRSS"), anon1 = status_kib(p1, "RssAnon"), hwm1 = status_kib(p1, "VmHWM");
  std::printf("sessions listed: %zu; toolsrv processes: %zu\n", listed, w.toolsrvs().size());
  std::printf("VmRSS   0 sessions: %ld KiB, %d sessions: %ld KiB  -> %.1f KiB per session\n", rss0, n, rss1,
              static_cast<double>(rss1 - rss0) / n);
  std::printf("RssAnon 0 sessions: %ld KiB, %d sessions: %ld KiB  -> %.1f KiB per session (VmHWM %ld KiB)\n", anon0, n,
              anon1, static_cast<double>(anon1 - anon0) / n, hwm1);
}

void bench_restore() {
  const int n = 10000, reps = 3;
  std::printf("\n== 4. restore: %d persisted sessions ==\n", n);
  convo::World w;
  LogOnThrow keep_log{w};
  const std::string sessions = w.data + "/sessions", aside = w.data + "/sessions.aside";
  auto t0 = Clock::now();
  const std::string last = write_sessions(w, aside, n);
  std::printf("wrote %d sessions in %.0f ms; time from olliesrv's fork to session/idx listing them all:\n", n, ms_since(t0));
  std::vector<double> none, full;
  std::size_t listed = 0, tools = 0;
  for (int rep = 0; rep < reps; rep++) {
    none.push_back(restart_until_listed(w, 0, nullptr));
    w.stop_server(SIGKILL);
    fs::rename(aside, sessions);
    full.push_back(restart_until_listed(w, n, &listed, last));
    tools = w.toolsrvs().size();
    w.stop_server(SIGKILL);
    fs::rename(sessions, aside);
  }
  std::printf("none (baseline): ");
  for (double x : none) std::printf("%.0f ", x);
  std::printf("ms; %d sessions: ", n);
  for (double x : full) std::printf("%.0f ", x);
  std::printf("ms\nmedian: none %.0f ms, %d sessions %.0f ms -> restore %.0f ms; listed %zu; toolsrv processes after: %zu\n",
              median(none), n, median(full), median(full) - median(none), listed, tools);
  w.start();
}

// ---- 5. tokens ----

void bench_tokens() {
  std::printf("\n== 5. request bytes of a new default agent ==\n");
  convo::World w;
  LogOnThrow keep_log{w};
  auto s = w.session("bench");
  auto a = w.agent(s, "main");
  w.fake.push({{"tool_calls", json::array({{{"id", "call_1"}, {"name", "shell"}, {"arguments", {{"cmd", "true"}}}}})}});
  w.fake.push({{"tool_calls", json::array({{{"id", "call_2"}, {"name", "shell"}, {"arguments", {{"cmd", "true"}}}}})}});
  w.fake.push({{"text", "done"}});
  auto chat = w.open(a + "/chat");
  if (auto st = w.write(a + "/prompt", "hi"); !st) {
    std::printf("prompt: %s; olliesrv log tail:\n%s\n", st.ename().c_str(), log_tail(w).c_str());
    return;
  }
  convo::World::read_until(chat, "done");
  convo::eventually([&] { return w.read_state(a) == "idle"; });
  auto bodies = convo::chat_texts(w);
  if (bodies.size() < 3) {
    std::printf("only %zu requests reached the provider\n", bodies.size());
    return;
  }
  auto first = json::parse(bodies[0]);
  std::size_t sys = 0, user = 0;
  for (auto& m : first["messages"]) {
    if (m["role"] == "system" && m["content"].is_string()) sys += m["content"].get<std::string>().size();
    if (m["role"] == "user" && m["content"].is_string()) user += m["content"].get<std::string>().size();
  }
  const std::string tools = first.contains("tools") ? first["tools"].dump() : "";
  std::printf("first request: %zu bytes (system prompt %zu, tool schemas %zu as sent in %zu tools, user text %zu, "
              "rest %zu of JSON framing and parameters)\n",
              bodies[0].size(), sys, tools.size(), first.contains("tools") ? first["tools"].size() : 0, user,
              bodies[0].size() - sys - tools.size() - user);
  std::printf("per tool round (one shell call `true`, empty output): +%zd bytes (2nd - 1st), +%zd bytes (3rd - 2nd)\n",
              static_cast<std::ptrdiff_t>(bodies[1].size()) - static_cast<std::ptrdiff_t>(bodies[0].size()),
              static_cast<std::ptrdiff_t>(bodies[2].size()) - static_cast<std::ptrdiff_t>(bodies[1].size()));
  std::printf("for scale: Claude Code's first request 49-76 KB, Codex's 38-56 KB; a quarter is 12-19 KB / 9.5-14 KB\n");
}

}  // namespace

int main(int argc, char** argv) {
  return testing_support::run_bench_parts(
      "engine-bench", argc, argv, OLLIE_BENCH_BUILD_DIR, OLLIE_BENCH_SOURCE_DIR,
      {{"tokens", bench_tokens},
       {"rounds", bench_rounds},
       {"readers",
        [] {
          bench_readers(1, 10);  // baseline: the same stream to one reader
          bench_readers(1000, 10);
          bench_readers(1, 0);
          bench_readers(1000, 0);
        }},
       {"memory", bench_memory},
       {"restore", bench_restore}});
}
