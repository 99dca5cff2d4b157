// olliesrv [-a dialstring]... [-insecure-tcp] [-maxconn n] [-l level]
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <malloc.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lib9p/stdfds.hpp"
#include "olliesrv.hpp"

namespace {

constexpr const char* usage_line =
    "usage: olliesrv [-a dialstring]... [-insecure-tcp] [-maxconn n] [-l trace|debug|info|warn|error]\n";

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "olliesrv: %s\n%s", why.c_str(), usage_line);
  std::exit(2);
}

[[noreturn]] void help() {
  std::fputs(usage_line, stdout);
  std::fputs("  -a dialstring   serve there (unix!path, or tcp!host!port with -insecure-tcp);\n"
             "                  default unix!$NAMESPACE/ollie\n"
             "  -insecure-tcp   allow tcp! addresses (a TCP peer has no credentials: every one is\n"
             "                  the hostowner)\n"
             "  -maxconn n      connections served at once (default half of ulimit -n)\n"
             "  -l level        log level (default $OLLIE_LOG, else warn); trace logs every 9P message\n"
             "Runs in the foreground; SIGINT, SIGTERM and `ctl kill` stop it. See README.md and doc/.\n",
             stdout);
  std::exit(0);
}

// A positive decimal count, else the usage.
std::size_t count(const char* option, const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long n = std::strtoul(s, &end, 10);
  if (*s < '1' || *s > '9' || *end || errno == ERANGE) usage(std::string(option) + ": not a positive count: " + s);
  return n;
}

// Restoring 10,000 sessions touches about 100 MB of new heap, and on a virtual machine a fault
// for every 4 KiB page was a third of the restore (engine-bench restore: 950-1000 ms, 540-690 with
// huge pages). glibc (2.35 and later) backs its heaps with transparent huge pages when its
// tunable asks, and reads the tunable only as a program starts: the first start runs itself
// again with it. The second start puts the user's GLIBC_TUNABLES back (glibc has read it by now),
// so what olliesrv starts (toolsrv, the programs a bypass call runs, prompt entries) gets the
// user's environment and not olliesrv's heap tuning; and it takes the user's name for itself,
// since a program run through /proc/self/exe is named "exe" (ps, pgrep and pkill look for the
// name the user ran).
constexpr const char* tunables_before = "OLLIE_GLIBC_TUNABLES";  // "-": unset; "+<value>": set

void heap_in_huge_pages(char** argv) {
  if (const char* before = std::getenv(tunables_before)) {
    if (before[0] == '+') ::setenv("GLIBC_TUNABLES", before + 1, 1);
    else ::unsetenv("GLIBC_TUNABLES");
    ::unsetenv(tunables_before);
    const char* slash = argv[0] ? std::strrchr(argv[0], '/') : nullptr;
    if (argv[0]) ::prctl(PR_SET_NAME, slash ? slash + 1 : argv[0]);
    return;
  }
  const char* now = std::getenv("GLIBC_TUNABLES");
  std::string t = now ? now : "";
  if (t.find("glibc.malloc.hugetlb") != std::string::npos) return;  // the user's choice
  const std::string was = now ? "+" + t : "-";
  t += (t.empty() ? "" : ":") + std::string("glibc.malloc.hugetlb=1");
  if (::setenv(tunables_before, was.c_str(), 1) != 0 || ::setenv("GLIBC_TUNABLES", t.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // No /proc: go on with small pages.
  ::unsetenv(tunables_before);
  if (now) ::setenv("GLIBC_TUNABLES", was.c_str() + 1, 1);
  else ::unsetenv("GLIBC_TUNABLES");
}

}  // namespace

int main(int argc, char** argv) {
  p9::fill_standard_fds();  // before the listener and the log: neither may become fd 1 or 2
  heap_in_huge_pages(argv);
  // Each tool round builds and frees a request body and a session.json text the size of the
  // history. glibc hands a thread arena's freed top back to the kernel once it passes its
  // threshold (madvise, a TLB shootdown on every CPU) and the next round faults it in again:
  // 22 page faults a round in engine-bench, 0.5 with these fixed thresholds (up to 4 MiB kept
  // per arena, blocks under 1 MiB served from the arenas).
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 4 << 20);
  ollie::Options opt;
  const char* level = std::getenv("OLLIE_LOG");
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const bool valued = a == "-a" || a == "-maxconn" || a == "-l";
    if (valued && i + 1 >= argc) usage(a + ": needs a value");
    if (a == "-a") opt.addresses.push_back(argv[++i]);
    else if (a == "-insecure-tcp") opt.insecure_tcp = true;
    else if (a == "-maxconn") opt.max_connections = count("-maxconn", argv[++i]);
    else if (a == "-l") level = argv[++i];
    else if (a == "-h" || a == "--help") help();
    else usage("unknown option: " + a);
  }
  // Tests shorten the retry waits of §8.2 (a second of the table lasts this many ms).
  if (const char* unit = std::getenv("OLLIE_TEST_RETRY_UNIT_MS")) opt.retry_unit = std::chrono::milliseconds(std::atoi(unit));
  if (const char* idle = std::getenv("OLLIE_TEST_TOOLSRV_IDLE_MS")) opt.toolsrv_idle = std::chrono::milliseconds(std::atoi(idle));
  auto logger = spdlog::stderr_color_mt("olliesrv");
  spdlog::set_default_logger(logger);
  auto lvl = spdlog::level::from_str(level ? level : "warn");
  if (level && lvl == spdlog::level::off && std::strcmp(level, "off") != 0) {
    std::fprintf(stderr, "olliesrv: unknown log level: %s\n", level);
    return 2;
  }
  spdlog::set_level(lvl);
  return ollie::run(std::move(opt));
}
