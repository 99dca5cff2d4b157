#include "toolsrv/landlock.hpp"
#include "toolsrv/unixsock.hpp"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace toolsrv {
namespace {

// The uAPI of ABI 3 to 7 that Debian 12's linux-libc-dev (6.1, ABI 2) lacks. Values are the
// kernel's stable uAPI (include/uapi/linux/landlock.h).
constexpr std::uint64_t fs_execute = 1ULL << 0;
constexpr std::uint64_t fs_write_file = 1ULL << 1;
constexpr std::uint64_t fs_read_file = 1ULL << 2;
constexpr std::uint64_t fs_read_dir = 1ULL << 3;
constexpr std::uint64_t fs_remove_dir = 1ULL << 4;
constexpr std::uint64_t fs_remove_file = 1ULL << 5;
constexpr std::uint64_t fs_make_char = 1ULL << 6;
constexpr std::uint64_t fs_make_dir = 1ULL << 7;
constexpr std::uint64_t fs_make_reg = 1ULL << 8;
constexpr std::uint64_t fs_make_sock = 1ULL << 9;
constexpr std::uint64_t fs_make_fifo = 1ULL << 10;
constexpr std::uint64_t fs_make_block = 1ULL << 11;
constexpr std::uint64_t fs_make_sym = 1ULL << 12;
constexpr std::uint64_t fs_refer = 1ULL << 13;      // ABI 2
constexpr std::uint64_t fs_truncate = 1ULL << 14;   // ABI 3
constexpr std::uint64_t fs_ioctl_dev = 1ULL << 15;  // ABI 5
constexpr std::uint64_t fs_resolve_unix = 1ULL << 16;  // ABI 9 (Linux 7.1): connect/send to pathname sockets
constexpr std::uint64_t net_bind_tcp = 1ULL << 0;     // ABI 4
constexpr std::uint64_t net_connect_tcp = 1ULL << 1;  // ABI 4
constexpr std::uint64_t scope_abstract_unix = 1ULL << 0;  // ABI 6
constexpr std::uint64_t scope_signal = 1ULL << 1;         // ABI 6
constexpr int rule_path_beneath = 1;
constexpr int rule_net_port = 2;

struct RulesetAttr {
  std::uint64_t handled_access_fs;
  std::uint64_t handled_access_net;
  std::uint64_t scoped;
};

struct NetPortAttr {
  std::uint64_t allowed_access;
  std::uint64_t port;
};

constexpr std::uint64_t rights_ro = fs_read_file | fs_read_dir;
constexpr std::uint64_t rights_rw = rights_ro | fs_write_file | fs_truncate | fs_ioctl_dev | fs_remove_file |
                                    fs_remove_dir | fs_make_reg | fs_make_dir | fs_make_sym | fs_make_fifo |
                                    fs_make_sock | fs_refer;
constexpr std::uint64_t rights_file = fs_read_file | fs_write_file | fs_execute | fs_truncate | fs_ioctl_dev | fs_resolve_unix;

std::uint64_t rights_of(Access a) {
  switch (a) {
    case Access::ro: return rights_ro;
    case Access::rox: return rights_ro | fs_execute;
    case Access::rw: return rights_rw;
    case Access::rwx: return rights_rw | fs_execute;
    case Access::sock: return fs_resolve_unix;
  }
  return 0;
}

struct Probe {
  int abi = 0;
  int err = 0;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 0) r.err = errno;
    else r.abi = static_cast<int>(abi);
    return r;
  }();
  return p;
}

}  // namespace

int landlock_abi() { return probe().abi; }

bool landlock_resolves_unix(int abi) { return abi >= landlock_abi_resolve_unix; }

std::string landlock_missing_reason() {
  const auto& p = probe();
  if (p.abi > 0) return {};
  const std::string fallback = "; or set general.best_effort: true in sandbox.yaml to run tools unconfined";
  if (p.err == EOPNOTSUPP) {
    return "Landlock is disabled in this kernel: add \"landlock\" to the lsm= boot parameter" + fallback;
  }
  return "Landlock not supported by this kernel: it needs CONFIG_SECURITY_LANDLOCK=y and \"landlock\" in the "
         "lsm= boot parameter" + fallback;
}

std::optional<std::string> sandbox_unavailable(const SandboxPlan& plan, int abi) {
  if (abi <= 0) {
    return "sandbox unavailable: " + (abi == landlock_abi() ? landlock_missing_reason()
                                                           : std::string("Landlock not supported by this kernel"));
  }
  if (abi < 3) return "sandbox unavailable: truncate needs Landlock ABI 3, kernel has " + std::to_string(abi);
  if (plan.network.restricts() && abi < 4) {
    return "sandbox unavailable: network needs Landlock ABI 4, kernel has " + std::to_string(abi);
  }
  if (plan.unix_listed && !landlock_resolves_unix(abi) && !unix_notify_available()) {
    return "sandbox unavailable: unix needs seccomp user notification or Landlock ABI " +
           std::to_string(landlock_abi_resolve_unix) + ", kernel has " + std::to_string(abi);
  }
  return std::nullopt;
}

p9::Result<UniqueFd> build_ruleset(const SandboxPlan& plan, int abi, bool* as_planned) {
  if (as_planned) *as_planned = true;
  RulesetAttr attr{
      .handled_access_fs = rights_rw | fs_execute | fs_make_char | fs_make_block | fs_resolve_unix,
      .handled_access_net = net_bind_tcp | net_connect_tcp,
      .scoped = scope_abstract_unix | scope_signal,
  };
  std::size_t attr_size = sizeof attr;
  switch (abi) {  // drop what older ABIs lack, newest last (as sandboxer.c)
    case 1:
      attr.handled_access_fs &= ~fs_refer;
      [[fallthrough]];
    case 2:
      attr.handled_access_fs &= ~fs_truncate;
      [[fallthrough]];
    case 3:
      attr.handled_access_net = 0;
      [[fallthrough]];
    case 4:
      attr.handled_access_fs &= ~fs_ioctl_dev;
      [[fallthrough]];
    case 5:
      attr.scoped = 0;
      [[fallthrough]];
    case 6:
    case 7:
    case 8:
      attr.handled_access_fs &= ~fs_resolve_unix;
      [[fallthrough]];
    default:
      break;
  }
  if (abi < 4) attr_size = sizeof attr.handled_access_fs;
  else if (abi < 6) attr_size = offsetof(RulesetAttr, scoped);
  if (!plan.network.restricts()) attr.handled_access_net = 0;

  UniqueFd ruleset(static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0)));
  if (!ruleset) return p9::error(std::string("landlock_create_ruleset: ") + std::strerror(errno));

  for (const auto& rule : plan.rules) {
    UniqueFd opened;
    if (rule.fd < 0) opened.reset(::open(rule.path.c_str(), O_PATH | O_CLOEXEC));
    const int fd = rule.fd >= 0 ? rule.fd : opened.get();
    struct stat st {};
    // Vanished or retargeted since planning: nothing granted, only what was planned (a recorded
    // file, never a directory swapped in for it) can be.
    const bool same = fd >= 0 && ::fstat(fd, &st) == 0 && ((rule.dev == 0 && rule.ino == 0) || (st.st_dev == rule.dev && st.st_ino == rule.ino));
    if (!same) {
      if (as_planned) *as_planned = false;
      continue;
    }
    landlock_path_beneath_attr pb{};
    pb.allowed_access = rights_of(rule.access) & attr.handled_access_fs;
    if (!S_ISDIR(st.st_mode)) pb.allowed_access &= rights_file;
    pb.parent_fd = fd;
    if (pb.allowed_access == 0) continue;
    if (::syscall(SYS_landlock_add_rule, ruleset.get(), rule_path_beneath, &pb, 0) != 0) {
      return p9::error("landlock_add_rule " + rule.path + ": " + std::strerror(errno));
    }
  }

  if (attr.handled_access_net != 0 && plan.network.enabled) {
    auto add_ports = [&](const std::vector<std::uint16_t>& ports, std::uint64_t right) -> p9::Result<void> {
      for (const auto port : ports) {
        NetPortAttr np{.allowed_access = right, .port = port};
        if (::syscall(SYS_landlock_add_rule, ruleset.get(), rule_net_port, &np, 0) != 0) {
          return p9::error("landlock_add_rule tcp port " + std::to_string(port) + ": " + std::strerror(errno));
        }
      }
      return {};
    };
    if (auto r = add_ports(plan.network.bind_tcp, net_bind_tcp); !r) return r.error();
    if (auto r = add_ports(plan.network.connect_tcp, net_connect_tcp); !r) return r.error();
  }
  return ruleset;
}

p9::Result<std::shared_ptr<const UniqueFd>> RulesetCache::get(const SandboxPlan& plan, int abi) {
  auto same = [&](const Entry& e) { return e.abi == abi && e.network == plan.network && e.rules == plan.rules; };
  {
    std::lock_guard lock(mu_);
    const auto it = std::find_if(entries_.begin(), entries_.end(), same);
    if (it != entries_.end()) {
      std::rotate(entries_.begin(), it, it + 1);
      return entries_.front().ruleset;
    }
  }
  bool as_planned = false;
  auto built = build_ruleset(plan, abi, &as_planned);
  if (!built) return built.error();
  auto ruleset = std::make_shared<const UniqueFd>(std::move(*built));
  std::lock_guard lock(mu_);
  ++built_;
  // A path that changed between the plan and the build: the ruleset is right for this call but
  // not for the plan, so it is not kept. A plan that raced in meanwhile is kept once.
  if (!as_planned || std::any_of(entries_.begin(), entries_.end(), same)) return ruleset;
  entries_.insert(entries_.begin(), Entry{plan.rules, plan.network, abi, ruleset});
  if (entries_.size() > capacity) entries_.pop_back();
  return ruleset;
}

std::size_t RulesetCache::built() const {
  std::lock_guard lock(mu_);
  return built_;
}

int landlock_restrict_self(int ruleset_fd) noexcept {
  if (::syscall(SYS_landlock_restrict_self, ruleset_fd, 0) != 0) return errno;
  return 0;
}

}  // namespace toolsrv
