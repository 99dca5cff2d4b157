// unixsock-bench: what the Unix-socket seccomp filter (unixsock.hpp) costs, measured in one run
// with rounds interleaved (this machine's speed drifts):
//
//   (spawn)     toolsrv's spawn of /bin/true under Landlock, with and without the filter
//               (the filter adds one seccomp(2) call and the child's unshare of its descriptor table)
//   (connects)  one spawned process that makes N connects to an allowed pathname socket
//               (socket, connect, close), with and without the filter: with it, every connect
//               is a notification that UnixGuard checks and its connector performs
//
//   unixsock-bench [rounds] [connects-per-process]
//
// The process that connects is this binary again (`unixsock-bench --connect <path> <n>`).

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "support/bench.hpp"
#include "toolsrv/landlock.hpp"
#include "toolsrv/policy.hpp"
#include "toolsrv/sandbox.hpp"
#include "toolsrv/spawn.hpp"
#include "toolsrv/unixsock.hpp"

using namespace toolsrv;
using Clock = std::chrono::steady_clock;
using testing_support::median;

namespace {

sockaddr_un address(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  return sa;
}

int connect_loop(const char* path, int n) {
  const auto sa = address(path);
  for (int i = 0; i < n; ++i) {
    const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || ::connect(s, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
      std::perror("connect");
      return 1;
    }
    ::close(s);
  }
  return 0;
}

// Runs `argv` under `ruleset` (and the filter, served by `guard`, when given) to its end.
double run(const std::vector<std::string>& argv, int ruleset, UnixGuard* guard, const std::shared_ptr<const UnixAccess>& access) {
  SpawnSpec spec;
  spec.argv = argv;
  spec.cwd.push_back('/');  // not = "/": GCC 12 -O3 warns falsely (-Wrestrict, PR 105329)
  spec.ruleset_fd = ruleset;
  spec.unix_filter = guard != nullptr;
  const auto t0 = Clock::now();
  static const std::uint64_t resets = non_default_signals();
  auto s = spawn(spec, resets);
  if (!s) throw std::runtime_error(s.ename());
  if (guard) guard->adopt(std::move(s->unix_listener), access);
  s->stdin_w.reset();
  siginfo_t info{};
  if (::waitid(P_PIDFD, static_cast<id_t>(s->pidfd.get()), &info, WEXITED) != 0 || info.si_code != CLD_EXITED || info.si_status != 0) {
    char err[512] = {};
    (void)!::read(s->stderr_r.get(), err, sizeof err - 1);
    std::string what = argv[0];
    what.append(" failed: ").append(err);
    throw std::runtime_error(what);
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--connect") == 0) return connect_loop(argv[2], std::atoi(argv[3]));
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10;
  const int connects = argc > 2 ? std::atoi(argv[2]) : 10000;
  spdlog::set_level(spdlog::level::err);
  if (!unix_notify_available()) throw std::runtime_error("no seccomp user notification on this kernel");
  const int abi = landlock_abi();
  if (abi <= 0) throw std::runtime_error("no Landlock on this kernel");

  std::string root = "/tmp/unixsock-bench-XXXXXX";
  if (!::mkdtemp(root.data())) throw std::runtime_error("mkdtemp");
  const std::string sock = root + "/allowed.sock";

  // The server: accepts and closes, on its own thread.
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const auto sa = address(sock);
  if (::bind(listener, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 || ::listen(listener, 4096) != 0) {
    throw std::runtime_error("listen");
  }
  std::atomic<bool> stop = false;
  std::thread server([&] {
    while (!stop) {
      const int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) ::close(c);
    }
  });

  // The rules of a tool call under the shipped policy (cwd "/"), the binary itself granted rox.
  char self[4096] = {};
  if (::readlink("/proc/self/exe", self, sizeof self - 1) <= 0) throw std::runtime_error("readlink");
  auto policy_file = load_policy(TOOLSRV_BENCH_POLICY);
  if (!policy_file) throw std::runtime_error(policy_file.ename());
  auto policy = effective_policy(*policy_file, nullptr);
  policy.unix_sockets = {sock};
  const auto vars = TemplateVars::for_call(root, root, root, root, "/usr/bin");
  const auto plan = plan_sandbox(policy, vars, writable_paths(policy, vars), {std::filesystem::path(self).parent_path().string()}, "", self);
  auto ruleset = build_ruleset(plan, abi);
  if (!ruleset) throw std::runtime_error(ruleset.ename());
  auto access = std::make_shared<UnixAccess>();
  access->sockets = plan.unix_sockets;

  UnixGuard guard;
  const std::vector<std::string> truth = {"/bin/true"};
  const std::vector<std::string> loop = {self, "--connect", sock, std::to_string(connects)};
  for (int i = 0; i < 20; ++i) {  // warm up
    run(truth, ruleset->get(), nullptr, access);
    run(truth, ruleset->get(), &guard, access);
  }
  run(loop, ruleset->get(), &guard, access);

  std::vector<double> spawn_plain, spawn_filter, conn_plain, conn_filter;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < 50; ++i) {
      spawn_plain.push_back(run(truth, ruleset->get(), nullptr, access));
      spawn_filter.push_back(run(truth, ruleset->get(), &guard, access));
    }
    conn_plain.push_back(run(loop, ruleset->get(), nullptr, access));
    conn_filter.push_back(run(loop, ruleset->get(), &guard, access));
  }
  stop = true;
  ::shutdown(listener, SHUT_RDWR);
  const int wake = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  (void)::connect(wake, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
  server.join();

  std::printf("unixsock-bench: Landlock ABI %d, %d interleaved rounds (50 spawns, 1 process of %d connects each)\n\n",
              abi, rounds, connects);
  std::printf("%-40s %12s %12s %8s\n", "median", "no filter", "filter", "ratio");
  std::printf("%-40s %9.3f ms %9.3f ms %7.2fx\n", "spawn of /bin/true under Landlock", median(spawn_plain),
              median(spawn_filter), median(spawn_filter) / median(spawn_plain));
  std::printf("%-40s %9.1f ms %9.1f ms %7.2fx\n", ("process making " + std::to_string(connects) + " connects").c_str(),
              median(conn_plain), median(conn_filter), median(conn_filter) / median(conn_plain));
  std::printf("%-40s %9.2f us %9.2f us %+7.2f us\n", "per connect", 1000 * median(conn_plain) / connects,
              1000 * median(conn_filter) / connects, 1000 * (median(conn_filter) - median(conn_plain)) / connects);
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  return 0;
}
