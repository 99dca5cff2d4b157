// remote-bench: the price of the forward (issue 13, spec §6.11): the same tool call on a local
// session and on a remote session over loopback ssh (a real sshd, tests/olliesrv/sshd.hpp),
// interleaved in one run. The call is a `!` prompt (the shell tool without a model), timed from
// the prompt's write to its exec block on the agent's chat.raw; a bare fork+exec of sh for scale.
//
//   remote-bench [repetitions]

#include <spawn.h>

#include <algorithm>
#include <cstdio>

#include "olliesrv/sshd.hpp"
#include "support/bench.hpp"

extern char** environ;

namespace {

using Clock = testing_support::BenchClock;
using testing_support::ms_since;

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

/// One `!printf` through the agent, until its output is on chat.raw; ms.
double call(convo::World& w, const std::string& agent, p9::CFid& raw, int n) {
  const std::string want = "x" + std::to_string(n) + "y";
  const auto t0 = Clock::now();
  if (!w.write(agent + "/prompt", "!printf 'x%sy' " + std::to_string(n))) throw std::runtime_error("prompt failed");
  // The exec block comes whatever happened: its content says whether the call ran.
  auto got = convo::World::read_until(raw, "\"role\":\"exec\"");
  if (got.find(want) == std::string::npos) throw std::runtime_error("the exec block is not " + want + ":\n" + got);
  return ms_since(t0);
}

double bare_sh() {
  const auto t0 = Clock::now();
  pid_t pid;
  const char* argv[] = {"/bin/sh", "-c", "printf x", nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (posix_spawn(&pid, argv[0], &fa, nullptr, const_cast<char* const*>(argv), environ) != 0) throw std::runtime_error("spawn");
  posix_spawn_file_actions_destroy(&fa);
  ::waitpid(pid, nullptr, 0);
  return ms_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  ::setenv("OLLIE_BUILD_DIR", OLLIE_BENCH_BUILD_DIR, 0);
  ::setenv("OLLIE_SOURCE_DIR", OLLIE_BENCH_SOURCE_DIR, 0);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 100;
  convo::Sshd sshd;
  if (!sshd.why_not.empty()) {
    std::printf("remote-bench: skipped: %s\n", sshd.why_not.c_str());
    return 0;
  }
  convo::RemoteWorld w(sshd);
  const auto t0 = Clock::now();
  const std::string far_session = w.remote_session("far", "ollie-good", sshd);  // its cwd check bootstraps
  const double bootstrap = ms_since(t0);
  const std::string far = w.agent(far_session, "main");
  const std::string near = w.agent(w.session("near"), "main");
  auto far_raw = w.open(far + "/chat.raw"), near_raw = w.open(near + "/chat.raw");
  call(w, far, far_raw, 0);
  call(w, near, near_raw, 0);
  std::vector<double> local, remote, sh;
  for (int i = 1; i <= reps; i++) {
    local.push_back(call(w, near, near_raw, i));
    remote.push_back(call(w, far, far_raw, i));
    sh.push_back(bare_sh());
  }
  std::printf("remote-bench: %d interleaved `!printf` calls each (bin/olliesrv of %s)\n", reps, std::getenv("OLLIE_BUILD_DIR"));
  std::printf("%-34s %9s %9s\n", "", "p50 ms", "p90 ms");
  std::printf("%-34s %9.2f %9.2f\n", "bare sh -c (fork+exec+wait)", pct(sh, 0.5), pct(sh, 0.9));
  std::printf("%-34s %9.2f %9.2f\n", "local session", pct(local, 0.5), pct(local, 0.9));
  std::printf("%-34s %9.2f %9.2f\n", "remote session (loopback ssh)", pct(remote, 0.5), pct(remote, 0.9));
  std::printf("price of the forward (p50): +%.2f ms, %.2fx\n", pct(remote, 0.5) - pct(local, 0.5),
              pct(remote, 0.5) / std::max(pct(local, 0.5), 1e-9));
  std::printf("session/new of the remote session (the bootstrap: tar, ssh, unpack, forwards, the cwd check): %.0f ms\n",
              bootstrap);
  return 0;
}
