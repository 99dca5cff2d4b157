// toolsrv -a unix!<socket> -cwd <dir> [-config <dir>] | toolsrv -version
#include <linux/limits.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lib9p/dirs.hpp"
#include "lib9p/stdfds.hpp"
#include "toolsrv/auth.hpp"
#include "toolsrv/toolsrv.hpp"

namespace {

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: toolsrv -a unix!<socket> -cwd <dir> [-config <dir>]\n       toolsrv -version\n");
  std::exit(2);
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string executable_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string path(buf, n);
  return path.substr(0, path.rfind('/'));
}

}  // namespace

int main(int argc, char** argv) {
  p9::fill_standard_fds();  // before the secret's descriptor 3 is read and the socket is made
  toolsrv::Options opt;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-version") {
      std::printf("toolsrv %s\n", OLLIE_VERSION);
      return 0;
    }
    if (a == "-a" && i + 1 < argc) opt.address = argv[++i];
    else if (a == "-cwd" && i + 1 < argc) opt.cwd = argv[++i];
    else if (a == "-config" && i + 1 < argc) opt.config_root = argv[++i];
    else usage();
  }
  if (opt.address.empty() || opt.cwd.empty()) usage();
  if (opt.config_root.empty()) opt.config_root = p9::config_root();
  opt.bin_path = executable_dir();

  // Dies with olliesrv (spec §6.1); a parent already gone left us to init.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() == 1) {
    std::fprintf(stderr, "toolsrv: parent exited before start\n");
    return 1;
  }

  auto logger = spdlog::stderr_color_mt("toolsrv");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(env("OLLIE_LOG").empty() ? "warn" : env("OLLIE_LOG")));

  // The secret comes before the socket exists, so no attach can race it.
  auto secret = toolsrv::read_secret(3, std::chrono::milliseconds(std::chrono::seconds(toolsrv::startup_grace_default)));
  if (!secret) {
    std::fprintf(stderr, "toolsrv: %s\n", secret.ename().c_str());
    return 1;
  }
  opt.secret = std::move(*secret);
  return toolsrv::run(std::move(opt));
}
