// A remote session's toolsrv, started over ssh (spec §6.11; remote.hpp).
//
// Every child (tar, the ssh master, the `ssh -O forward` client) is forked from the I/O thread
// that runs the start, which lives until olliesrv exits (PR_SET_PDEATHSIG follows the forking
// thread, §6.1); its pipes and its pidfd are watched by Asio, so no thread ever waits on one.
// ssh's stdin is a socket, not a pipe: a write after ssh died is an error (MSG_NOSIGNAL), never
// a SIGPIPE for olliesrv.
#include "olliesrv/remote.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "lib9p/dirs.hpp"
#include "lib9p/utf8.hpp"
#include "olliesrv/ids.hpp"
#include "olliesrv/result.hpp"

namespace ollie::remote {

namespace {

using namespace std::chrono_literals;
constexpr auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

/// Upload, unpack and start, over a slow link too.
constexpr auto bootstrap_limit = 120s;
/// `ssh -O forward` and tar are quick; past this they are killed.
constexpr auto helper_limit = 60s;
/// Largest tarball packed (the shipped one is a few MB).
constexpr std::size_t max_tarball = 256u << 20;
/// Longest line kept from a child's output.
constexpr std::size_t max_line = 1024;
/// sun_path, and the suffix ssh appends while it creates its control socket.
constexpr std::size_t max_sock = 107, control_suffix = 17;

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string env_value(const std::vector<std::string>& env, const std::string& key) {
  for (const auto& kv : env)
    if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=') return kv.substr(key.size() + 1);
  return "";
}

/// `name` looked up in the PATH of `env` (before the fork: execve does not search).
std::string find_program(const std::string& name, const std::vector<std::string>& env) {
  std::string path = env_value(env, "PATH");
  if (path.empty()) path = "/usr/bin:/bin";
  std::size_t at = 0;
  while (at <= path.size()) {
    auto colon = path.find(':', at);
    if (colon == std::string::npos) colon = path.size();
    std::string dir = path.substr(at, colon - at);
    at = colon + 1;
    if (dir.empty()) continue;
    std::string p = dir + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

/// A shell word: single-quoted, a quote written '\''.
std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int k = 0; k < n; k++) out += hex[md[k] >> 4], out += hex[md[k] & 15];
  return out;
}

/// What `uname -sm` prints here.
std::string local_system() {
  struct utsname u{};
  if (::uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.machine;
}

// ---- children ---------------------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int pidfd = -1;
  int in = -1;  ///< a socket (ssh master) or -1 (the child's stdin is /dev/null)
  int out = -1, err = -1;
};

p9::Result<Child> spawn_child(const std::vector<std::string>& args, const std::vector<std::string>& env, bool with_stdin) {
  const std::string exe = args[0].find('/') == std::string::npos ? find_program(args[0], env) : args[0];
  if (exe.empty()) return p9::error(args[0] + ": not found");
  std::vector<std::string> a = args, e = env;
  std::vector<char*> argv, envp;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : e) envp.push_back(s.data());
  envp.push_back(nullptr);

  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  const auto close_all = [&] {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
  };
  bool ok = with_stdin ? ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) == 0
                       : (in[1] = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;
  ok = ok && ::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0;
  if (ok) {
    in[1] = high_fd(in[1]), out[1] = high_fd(out[1]), err[1] = high_fd(err[1]);
    ok = in[1] >= 0 && out[1] >= 0 && err[1] >= 0;
  }
  if (!ok) {
    const std::string why = std::strerror(errno);
    close_all();
    return p9::error("cannot make pipes: " + why);
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    close_all();
    return p9::error("fork: " + why);
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::setpgid(0, 0);  // a terminal's ^C goes to olliesrv, which stops the session itself
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    if (::dup2(in[1], 0) < 0 || ::dup2(out[1], 1) < 0 || ::dup2(err[1], 2) < 0) ::_exit(126);
    ::close_range(3, ~0U, 0);
    ::execve(exe.c_str(), argv.data(), envp.data());
    static const char msg[] = "exec failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(in[1]), ::close(out[1]), ::close(err[1]);
  Child c;
  c.pid = pid;
  c.in = with_stdin ? in[0] : -1;
  if (!with_stdin) ::close(in[0]);
  c.out = out[0];
  c.err = err[0];
  c.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (c.pidfd < 0) {
    const std::string why = std::strerror(errno);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);  // SIGKILLed: at once
    for (int fd : {c.in, c.out, c.err})
      if (fd >= 0) ::close(fd);
    return p9::error("pidfd_open: " + why);
  }
  return c;
}

/// A line without its CR: ssh ends its messages with CRLF when a terminal was asked for, and
/// they become error strings (§1.8), block text and what the model reads.
std::string unterminated(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

/// Lines of a child's output; an overlong line is cut at max_line.
struct Lines {
  explicit Lines(std::shared_ptr<asio::posix::stream_descriptor> d) : d(std::move(d)) {}
  std::shared_ptr<asio::posix::stream_descriptor> d;
  std::string buf;
  bool eof = false;

  asio::awaitable<std::optional<std::string>> next() {
    for (;;) {
      if (auto nl = buf.find('\n'); nl != std::string::npos) {
        std::string line = buf.substr(0, std::min(nl, max_line));
        buf.erase(0, nl + 1);
        co_return unterminated(std::move(line));
      }
      if (eof) {
        if (buf.empty()) co_return std::nullopt;
        std::string line = buf.substr(0, max_line);
        buf.clear();
        co_return unterminated(std::move(line));
      }
      if (buf.size() > 2 * max_line) buf.erase(max_line, buf.size() - max_line);  // bounded; the rest of it is dropped
      char tmp[4096];
      auto [ec, n] = co_await d->async_read_some(asio::buffer(tmp), tuple_awaitable);
      if (ec) eof = true;
      else buf.append(tmp, n);
    }
  }
};

/// What a child said on stderr: logged line by line, the last one kept (a failure's reason).
struct Talk {
  std::mutex mu;
  std::string last;
  bool eof = false;
};

asio::awaitable<void> pump_stderr(std::shared_ptr<asio::posix::stream_descriptor> d, std::string who,
                                  std::shared_ptr<Talk> talk) {
  Lines lines(std::move(d));
  // Logged up to a bound: the remote host writes there at will (its login scripts, a toolsrv
  // replaced there), and its lines must not fill olliesrv's log. The last one is kept whatever.
  constexpr int logged_max = 100;
  for (int logged = 0;;) {
    auto line = co_await lines.next();
    if (!line) break;
    std::string shown = p9::valid_utf8(*line);
    if (logged < logged_max) spdlog::warn("{}: {}", who, shown);
    if (++logged == logged_max) spdlog::warn("{}: more lines on its stderr are not logged", who);
    std::lock_guard lk(talk->mu);
    talk->last = shown;
  }
  std::lock_guard lk(talk->mu);
  talk->eof = true;
}

/// The last line a child wrote on stderr, once it has all arrived (waits at most 2 s).
asio::awaitable<std::string> last_words(std::shared_ptr<Talk> talk) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  for (int n = 0; n < 200; n++) {
    {
      std::lock_guard lk(talk->mu);
      if (talk->eof) break;
    }
    t.expires_after(10ms);
    co_await t.async_wait(tuple_awaitable);
  }
  std::lock_guard lk(talk->mu);
  co_return talk->last;
}

/// Reaps a child (tar, the forward client): its exit status, 128+signal when killed. Past
/// `limit` it is SIGKILLed. Closes the pidfd.
asio::awaitable<int> reap(int pidfd, std::chrono::milliseconds limit) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer t(ex);
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 255;
  for (;;) {
    siginfo_t si{};
    if (::waitid(static_cast<idtype_t>(P_PIDFD), pidfd, &si, WEXITED | WNOHANG) != 0) break;
    if (si.si_pid != 0) {
      status = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
      break;
    }
    if (std::chrono::steady_clock::now() > end) ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
    t.expires_after(10ms);
    co_await t.async_wait(tuple_awaitable);
  }
  ::close(pidfd);
  co_return status;
}

/// Writes ssh's stdin, then holds it open until ssh is gone (its end of the socket closes).
asio::awaitable<void> feed(std::shared_ptr<asio::local::stream_protocol::socket> in, std::string data) {
  auto [ec, n] = co_await asio::async_write(*in, asio::buffer(data), tuple_awaitable);
  (void)n;
  std::string().swap(data);
  char tmp[256];
  while (!ec) std::tie(ec, n) = co_await in->async_read_some(asio::buffer(tmp), tuple_awaitable);
  std::error_code ignored;
  in->close(ignored);
}

asio::awaitable<void> discard(std::shared_ptr<asio::posix::stream_descriptor> d) {
  Lines lines(std::move(d));
  while (co_await lines.next()) {
  }
}

// ---- the parts of a start ---------------------------------------------------------------------

/// ssh with olliesrv's ssh configuration. ssh reads ~/.ssh/config from the password database's
/// home, not from $HOME; when $HOME names another directory (a private HOME for olliesrv) its
/// .ssh/config is the one meant, as for every other program, so it is given with -F.
std::vector<std::string> ssh_command(const std::vector<std::string>& env) {
  std::vector<std::string> a{"ssh"};
  const std::string home = env_value(env, "HOME");
  std::string pw_home;
  passwd pw{}, *res = nullptr;
  char buf[4096];
  if (::getpwuid_r(::getuid(), &pw, buf, sizeof buf, &res) == 0 && res && res->pw_dir) pw_home = res->pw_dir;
  struct stat st{};
  if (!home.empty() && home != pw_home && ::stat((home + "/.ssh/config").c_str(), &st) == 0)
    a.insert(a.end(), {"-F", home + "/.ssh/config"});
  // ConnectTimeout: a host that does not answer at all (unplugged) fails a start in 30 s, where
  // TCP's own retries held each need of a turn for the bootstrap's whole 120 s.
  a.insert(a.end(), {"-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes",
                     "-o", "ConnectTimeout=30"});
  return a;
}

/// The gzip tarball (§6.11 step 1): tools/ and sandbox.yaml of the config root, bin/toolsrv and
/// bin/ollie-9p from the static builds. Reproducible (names sorted, times and owners fixed, no
/// gzip name or time), so the same files give the same sha256 and the remote cache is reused.
p9::Result<std::vector<std::string>> tar_command(const Target& t) {
  const std::string dir = t.static_dir.substr(t.static_dir.rfind('/') + 1);
  const std::string bin_parent = t.static_dir.substr(0, t.static_dir.rfind('/'));
  for (const char* prog : {"toolsrv", "ollie-9p"}) {
    const std::string p = t.static_dir + "/" + prog;
    if (::access(p.c_str(), X_OK) != 0) return p9::error(p + ": no static build (the ollie_static target)");
  }
  std::vector<std::string> args{"tar", "-c", "-h", "-f", "-", "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
                                "--numeric-owner", "--use-compress-program=gzip -n", "--transform=s,^" + dir + "/,bin/,",
                                "-C", t.config_root};
  struct stat st{};
  if (::stat((t.config_root + "/tools").c_str(), &st) == 0) args.push_back("tools");
  if (::stat((t.config_root + "/sandbox.yaml").c_str(), &st) == 0) args.push_back("sandbox.yaml");
  args.insert(args.end(), {"-C", bin_parent, dir + "/toolsrv", dir + "/ollie-9p"});
  return args;
}

asio::awaitable<p9::Result<std::string>> pack(Target t) {
  auto ex = co_await asio::this_coro::executor;
  auto args = tar_command(t);
  if (!args) co_return args.error();
  auto c = spawn_child(*args, t.env, false);
  if (!c) co_return p9::error("tar: " + c.ename());
  auto talk = std::make_shared<Talk>();
  auto err = std::make_shared<asio::posix::stream_descriptor>(ex, c->err);
  asio::co_spawn(ex, pump_stderr(err, "remote " + t.session_id + ": tar", talk), asio::detached);
  asio::posix::stream_descriptor out(ex, c->out);
  std::string tarball;
  bool too_big = false;
  for (;;) {
    char tmp[65536];
    auto [ec, n] = co_await out.async_read_some(asio::buffer(tmp), tuple_awaitable);
    if (ec) break;
    if (tarball.size() + n > max_tarball) {
      too_big = true;
      ::syscall(SYS_pidfd_send_signal, c->pidfd, SIGKILL, nullptr, 0);
      break;
    }
    tarball.append(tmp, n);
  }
  const int status = co_await reap(c->pidfd, helper_limit);
  if (too_big) co_return p9::error("tarball larger than " + std::to_string(max_tarball >> 20) + " MB");
  if (status != 0) {
    std::string why = co_await last_words(talk);
    if (!why.empty()) why = ": " + why;
    co_return p9::error("tar failed" + why);
  }
  co_return tarball;
}

/// The bootstrap script (§6.11 step 3), run by the remote login's /bin/sh with the secret in `k`
/// and the tarball (`len` bytes) still on its stdin. Once toolsrv listens, stdin stays open as
/// long as the local ssh runs: its end (ssh killed, the connection lost) kills toolsrv at once.
std::string bootstrap_script(const Target& t, const std::string& sha, std::size_t len, const std::string& n) {
  std::string s;
  s += "sid=" + sh_quote(t.session_id) + " n=" + sh_quote(n) + " sha=" + sh_quote(sha) + " len=" + std::to_string(len) +
       " cwd=" + sh_quote(t.cwd) + " want=" + sh_quote(local_system()) + "\n";
  s += R"SH(fail() { printf 'OLLIE_BOOTSTRAP_ERROR %s\n' "$*"; exit 1; }
got=$(uname -sm 2>/dev/null) || fail "uname -sm failed"
[ "$got" = "$want" ] || fail "the remote host is $got, not $want"
command -v tar >/dev/null 2>&1 || fail "tar not found on the remote host"
command -v gzip >/dev/null 2>&1 || fail "gzip not found on the remote host"
command -v head >/dev/null 2>&1 || fail "head not found on the remote host"
[ -n "${XDG_CACHE_HOME:-$HOME}" ] || fail "neither XDG_CACHE_HOME nor HOME is set"
C=${XDG_CACHE_HOME:-$HOME/.cache}/ollie
D=$C/$sha
R=$C/run
S=$R/$sid.$n.toolsrv.sock
[ ${#S} -lt 100 ] || fail "socket path too long: $S"
case $cwd in '~') cwd=$HOME ;; '~/'*) cwd=$HOME/${cwd#??} ;; esac
[ -d "$cwd" ] || fail "cwd: $cwd: not a directory"
r=$(cd -P -- "$cwd" && pwd -P && echo .) || fail "cwd: $cwd: not a directory"  # resolved: toolsrv holds no other
cwd=${r%?.}  # pwd's newline and the dot: a name that ends in a newline keeps it, and is refused
case $cwd in *'	'*|*'
'*) fail "cwd: invalid character" ;; esac  # a line of its own for olliesrv, a field of idx (§4.1)
mkdir -p "$C" || fail "cannot create $C"
if [ -x "$D/bin/toolsrv" ]; then
  head -c "$len" >/dev/null
else
  T=$C/.$sha.$$
  rm -rf "$T"
  mkdir "$T" || fail "cannot create $T"
  head -c "$len" | tar -xzf - -C "$T" 2>/dev/null || { rm -rf "$T"; fail "cannot unpack the tarball into $C"; }
  mv "$T" "$D" 2>/dev/null || rm -rf "$T"
fi
"$D/bin/toolsrv" -version >/dev/null 2>&1 || fail "$D/bin/toolsrv does not run on the remote host"
mkdir -p "$R" && chmod 700 "$R" || fail "cannot create $R"
P=$R/$sid.pid
if [ -f "$P" ]; then
  old=$(cat "$P")
  case $old in
  ''|*[!0-9]*) ;;
  *) if [ "$(cat /proc/$old/comm 2>/dev/null)" = toolsrv ]; then
       kill "$old" 2>/dev/null
       i=0
       while [ $i -lt 50 ]; do
         st=
         { read -r _ _ st _ </proc/$old/stat; } 2>/dev/null
         case $st in ''|Z) break ;; esac
         sleep 0.1
         i=$((i+1))
       done
       kill -9 "$old" 2>/dev/null
     fi ;;
  esac
fi
# What earlier starts of the session left (no toolsrv of it runs now): their sockets.
rm -f "$R/$sid".*.sock
export OLLIE_SESSION_ID="$sid" OLLIE_TOOLS_PATH="$D/tools" PATH="$D/bin:$PATH"
printf '%s\n' "$k" | { exec 3<&0 </dev/null >/dev/null; exec toolsrv -a "unix!$S" -cwd "$cwd" -config "$D"; } &
pid=$!
k=
echo "$pid" >"$P"
i=0
while [ ! -S "$S" ]; do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; fail "toolsrv exited at its start (status $?)"; }
  [ $i -lt 400 ] || { kill "$pid"; fail "toolsrv did not listen"; }
  sleep 0.05
  i=$((i+1))
done
printf 'OLLIE_CWD %s\nOLLIE_LISTEN_READY %s\n' "$cwd" "$C"
exec 4<&0
{ cat <&4; kill "$pid"; } >/dev/null 2>&1 &
exec 4<&- </dev/null
wait "$pid"
# The reverse forward's socket is sshd's, which leaves it; the pid file, unless a newer start's.
rm -f "$R/$sid.$n.olliesrv.sock"
[ "$(cat "$P" 2>/dev/null)" != "$pid" ] || rm -f "$P"
)SH";
  return s;
}

/// Reads the secret, then the script up to its end marker, and runs it (all sh builtins, which
/// read a pipe byte by byte: the tarball after the marker stays on stdin for tar).
const char* const remote_command =
    "exec /bin/sh -c 'IFS= read -r k || exit 1; s=; while IFS= read -r l; do [ \"$l\" = OLLIE_SCRIPT_END ] && break; "
    "s=\"$s$l\n\"; done; eval \"$s\"'";

/// The ssh master: the bootstrap's connection, whose control socket later takes the forwards.
std::vector<std::string> master_command(const Target& t, const std::string& control) {
  std::vector<std::string> a = ssh_command(t.env);
  // A host that stops answering (asleep, unplugged) is a lost toolsrv within 30 s, not a turn
  // stuck until TCP gives up: nothing else notices a silent connection (§6.1).
  a.insert(a.end(), {"-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3"});
  a.insert(a.end(), {"-o", "ControlMaster=yes", "-o", "ControlPath=" + control, "-o", "ControlPersist=no", "-T", "--",
                     t.destination, remote_command});
  return a;
}

/// `ssh -O forward` through the master: -R (olliesrv's socket for the session) and -L (toolsrv's).
std::vector<std::string> forward_command(const Target& t, const std::string& control, const std::string& reverse,
                                         const std::string& local) {
  std::vector<std::string> a = ssh_command(t.env);
  a.insert(a.end(), {"-o", "ControlPath=" + control, "-O", "forward", "-R", reverse, "-L", local, "--", t.destination});
  return a;
}

}  // namespace

int high_fd(int fd) {
  if (fd < 0) return fd;
  int h = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return h;
}

std::string control_path(const std::string& session_id) { return p9::runtime_root() + "/fwd/" + session_id + ".ssh"; }

bool valid_destination(const std::string& d) {
  if (d.empty() || d.size() > 255 || d.front() == '-' || d.front() == '@' || d.back() == '@') return false;
  if (std::count(d.begin(), d.end(), '@') > 1) return false;
  return std::all_of(d.begin(), d.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '@';
  });
}

asio::awaitable<p9::Result<Started>> start(asio::any_io_executor ex, Target t, std::string secret,
                                               std::function<void(pid_t, int)> adopt) {
  if (!valid_destination(t.destination)) co_return p9::error("remote: invalid destination: " + p9::valid_utf8(t.destination.substr(0, 64)));
  const std::string fwd_dir = p9::runtime_root() + "/fwd";
  if (auto d = p9::ensure_runtime_dir(fwd_dir); !d) co_return p9::error("remote: " + d.ename());
  const std::string control = control_path(t.session_id);
  const std::string fwd_sock = fwd_dir + "/" + t.session_id + ".sock";
  if (control.size() + control_suffix > max_sock) co_return p9::error("remote: " + control + ": socket path too long");
  ::unlink(control.c_str());  // left by a master that was SIGKILLed: ssh would not multiplex

  auto tar = co_await pack(t);
  if (!tar) co_return p9::error("remote: " + tar.ename());
  const std::string sha = sha256_hex(*tar);
  const std::string n = new_secret().substr(0, 8);

  auto c = spawn_child(master_command(t, control), t.env, true);
  if (!c) co_return p9::error("remote: ssh: " + c.ename());
  adopt(c->pid, c->pidfd);
  auto in = std::make_shared<asio::local::stream_protocol::socket>(ex, asio::local::stream_protocol(), c->in);
  auto out = std::make_shared<asio::posix::stream_descriptor>(ex, c->out);
  auto err = std::make_shared<asio::posix::stream_descriptor>(ex, c->err);
  auto talk = std::make_shared<Talk>();
  asio::co_spawn(ex, pump_stderr(err, "remote " + t.session_id, talk), asio::detached);
  std::string payload = secret + "\n" + bootstrap_script(t, sha, tar->size(), n) + "OLLIE_SCRIPT_END\n";
  payload += *tar;
  asio::co_spawn(ex, feed(in, std::move(payload)), asio::detached);

  // The bootstrap's answer; past the limit the read is cancelled.
  auto timed_out = std::make_shared<bool>(false);
  asio::steady_timer deadline(ex, bootstrap_limit);
  deadline.async_wait([out, timed_out](std::error_code ec) {
    if (ec) return;
    *timed_out = true;
    std::error_code ignored;
    out->cancel(ignored);
  });
  Lines lines(out);
  std::string ready, failure, cwd = t.cwd;
  for (;;) {
    auto line = co_await lines.next();
    if (!line) break;
    if (starts_with(*line, "OLLIE_CWD ")) cwd = line->substr(10);
    if (starts_with(*line, "OLLIE_LISTEN_READY ")) {
      ready = line->substr(19);
      break;
    }
    if (starts_with(*line, "OLLIE_BOOTSTRAP_ERROR ")) {
      failure = p9::valid_utf8(line->substr(22));
      break;
    }
  }
  deadline.cancel();
  if (ready.empty() || ready.find_first_of(":\n") != std::string::npos) {
    if (failure.empty() && !ready.empty()) failure = "unusable cache directory: " + p9::valid_utf8(ready);
    if (failure.empty() && *timed_out) failure = "bootstrap timed out";
    if (failure.empty()) {
      std::string why = co_await last_words(talk);
      // ssh names itself in some of its messages (`ssh: Could not resolve hostname …`).
      failure = why.empty() ? "ssh exited" : starts_with(why, "ssh: ") ? why : "ssh: " + why;
    }
    if (starts_with(failure, "cwd: ")) co_return p9::error(failure);  // §4.1's own error
    co_return p9::error("remote: " + failure);
  }
  asio::co_spawn(ex, discard(out), asio::detached);

  // The forwards (§6.11 steps 4, 5), now that $C/run exists and $C is known.
  const std::string base = ready + "/run/" + t.session_id + "." + n;
  const std::string remote_toolsrv = base + ".toolsrv.sock", remote_olliesrv = base + ".olliesrv.sock";
  auto f = spawn_child(forward_command(t, control, remote_olliesrv + ":" + fwd_sock, t.local_sock + ":" + remote_toolsrv),
                       t.env, false);
  if (!f) co_return p9::error("remote: ssh: " + f.ename());
  auto ftalk = std::make_shared<Talk>();
  auto ferr = std::make_shared<asio::posix::stream_descriptor>(ex, f->err);
  asio::co_spawn(ex, pump_stderr(ferr, "remote " + t.session_id + ": forward", ftalk), asio::detached);
  auto fout = std::make_shared<asio::posix::stream_descriptor>(ex, f->out);
  asio::co_spawn(ex, discard(fout), asio::detached);
  const int status = co_await reap(f->pidfd, helper_limit);
  if (status != 0) {
    std::string why = co_await last_words(ftalk);
    if (!why.empty()) why = ": " + why;
    co_return p9::error("remote: forward refused" + why);
  }
  // After the forwards: sshd connects to it only when a tool dials, and a failed start leaves
  // no listener behind.
  if (cwd.empty() || cwd.front() != '/') co_return p9::error("cwd must be absolute: " + p9::valid_utf8(cwd));
  if (auto st = t.listen(fwd_sock); !st) co_return p9::error("remote: " + st.ename());
  co_return Started{"unix!" + remote_olliesrv, cwd};
}

}  // namespace ollie::remote
