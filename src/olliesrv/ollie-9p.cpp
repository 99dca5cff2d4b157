// ollie-9p: the shell's client of olliesrv (and of any 9P2000 server).
//
//   ollie-9p [-a address] ls [-l] [path]
//   ollie-9p [-a address] stat path
//   ollie-9p [-a address] read [-l] path
//   ollie-9p [-a address] write path      (stdin; the file's handler runs at close)
//   ollie-9p [-a address] rdwr path       (stdin is the request; prints the reply)
//   ollie-9p [verb] -h                    (help)
//
// The address defaults to $OLLIE_ADDR, else the service `ollie` in the plan9port namespace
// directory. It attaches as $OLLIE_UNAME (else the login name), authenticating with
// $OLLIE_AUTH when the server asks for it. Exit status: 0 done, 1 an error (printed as
// `ollie-9p: <what>: <reason>`), 2 a usage error.

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "lib9p/client.hpp"
#include "lib9p/dial.hpp"
#include "lib9p/dirs.hpp"
#include "lib9p/stdfds.hpp"
#include "lib9p/errors.hpp"

namespace {

const char* usage_text =
    "usage: ollie-9p [-a address] ls [-l] [path]\n"
    "       ollie-9p [-a address] stat path\n"
    "       ollie-9p [-a address] read [-l] path\n"
    "       ollie-9p [-a address] write path\n"
    "       ollie-9p [-a address] rdwr path\n"
    "       ollie-9p [verb] -h\n";

const char* common_help =
    "\n-a address: a dial string (unix!/path, tcp!host!port), a socket path or a service name in\n"
    "the namespace directory; default $OLLIE_ADDR, else ollie. It attaches as $OLLIE_UNAME (else\n"
    "your login name) and authenticates with $OLLIE_AUTH when the server asks.\n"
    "Exit status: 0 done; 1 an error, printed as `ollie-9p: <what>: <reason>`; 2 a usage error.\n";

/// A usage error: what was wrong, then the usage.
[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "ollie-9p: %s\n%s", why.c_str(), usage_text);
  std::exit(2);
}

struct Help {
  const char* verb;
  const char* text;
};

constexpr Help helps[] = {
    {"ls", "ollie-9p ls [-l] [path]: the entries of a directory (or the file itself), sorted; -l as\n"
           "`ls -l`: mode, uid, gid, length, time, name.\n"},
    {"stat", "ollie-9p stat path: the file's whole 9P stat, as plan9port's `9p stat` prints it.\n"},
    {"read", "ollie-9p read [-l] path: prints what the file gives, each reply as it arrives, so it\n"
             "follows a stream (chat, event) token by token until it ends.\n"
             "-l follows a changing value: at the end of each value it reads the file again from its\n"
             "start; on statewait or feed that waits for the next change, so each change is printed\n"
             "as it happens (and the 5 s heartbeat). It stops when a stream ends or when a plain file\n"
             "gives back the same content at once.\n"},
    {"write", "ollie-9p write path: sends stdin to the file and closes it; the file's handler runs at\n"
              "the close and its error is printed (exit 1). `echo stop | ollie-9p write .../ctl`.\n"},
    {"rdwr", "ollie-9p rdwr path: one request and its reply: stdin is the request, written whole, then\n"
             "the reply is printed as it arrives (on event: the filter, then the stream).\n"
             "`echo name=main | ollie-9p rdwr session/work/agent/new` prints the new agent's id.\n"},
};

[[noreturn]] void help(const std::string& verb) {
  for (const auto& h : helps)
    if (verb == h.verb) {
      std::fputs(h.text, stdout);
      std::fputs(common_help, stdout);
      std::exit(0);
    }
  if (!verb.empty()) usage("unknown verb: " + verb);
  std::fputs(usage_text, stdout);
  std::fputs(common_help, stdout);
  std::exit(0);
}

[[noreturn]] void fail(const std::string& what, const std::string& why) {
  // A walk's error names the element it stopped at: a path of one element is not said twice.
  if (why.starts_with(what + ": ")) std::fprintf(stderr, "ollie-9p: %s\n", why.c_str());
  else std::fprintf(stderr, "ollie-9p: %s: %s\n", what.c_str(), why.c_str());
  std::exit(1);
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// No socket, or nobody listening on it: most often olliesrv is not running (or runs under
// another $NAMESPACE).
std::string nobody_there(const std::string& why) {
  for (const char* e : {": No such file or directory", ": Connection refused"})
    if (why.ends_with(e)) return why + ": is olliesrv running?";
  return why;
}

// A Unix socket is dialed only through a private directory (plan9port checks its namespace
// directory the same way): in a shared /tmp another user could have made the directory first,
// put a socket of its own there and so receive $OLLIE_AUTH.
void check_socket_dir(const std::string& address) {
  auto a = p9::parse_address(address);
  if (!a || a->kind != p9::Address::Unix) return;  // dial reports a bad address
  // No socket: that is what to say (not its directory's mode), and nothing is dialed.
  if (struct stat st {}; ::lstat(a->path.c_str(), &st) != 0 && errno == ENOENT)
    fail(address, nobody_there("dial " + a->path + ": No such file or directory"));
  if (auto st = p9::check_private_dir(p9::socket_dir(a->path)); !st) fail(address, nobody_there(st.ename()));
}

p9::CFid mount(const std::string& address) {
  check_socket_dir(address);
  auto c = p9::Client::dial(address);
  if (!c) fail(address, nobody_there(c.ename()));
  std::string uname = env("OLLIE_UNAME");
  if (uname.empty()) uname = p9::login_name();
  auto afid = (*c)->auth(uname);
  if (!afid) {
    if (afid.ename() != p9::err::auth_not_required) fail(address, afid.ename());
    auto root = (*c)->attach(uname);
    if (!root) fail(address, root.ename());
    return std::move(*root);
  }
  if (auto w = afid->write(env("OLLIE_AUTH")); !w) fail(address, w.ename());
  auto root = (*c)->attach(uname, "", &*afid);
  if (!root) fail(address, root.ename());
  return std::move(*root);
}

p9::CFid open_path(const p9::CFid& root, const std::string& path, std::uint8_t mode) {
  auto f = root.walk(path);
  if (!f) fail(path, f.ename());
  if (auto st = f->open(mode); !st) fail(path, st.ename());
  return std::move(*f);
}

void put(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) fail("stdout", std::strerror(errno));
}

// A reply as it comes (a stream's reader sees it at once); one that cannot be written ends the
// program (`read chat > full-disk`), not the output alone.
void put_now(const std::string& s) {
  put(s);
  if (std::fflush(stdout) != 0) fail("stdout", std::strerror(errno));
}

std::string read_stdin() {
  std::string all;
  char buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) all.append(buf, n);
  // Nothing is sent for a stdin that could not be read (a directory): it is not an empty request.
  if (std::ferror(stdin)) fail("stdin", std::strerror(errno));
  return all;
}

// `ollie-9p read chat | head`: once head is gone, a stream that is quiet would keep this process
// and its fid until its next byte. The write end of a pipe whose reader went reports POLLERR;
// a second later the program ends as a write would have ended it (SIGPIPE). One that had all
// it wanted to print, and only its clunk left, has ended by then with its own status, as cat(1)
// does (`ollie-9p read session/idx | grep -q work` under pipefail stays 0).
void end_with_the_reader() {
  std::thread([] {
    pollfd out{STDOUT_FILENO, 0, 0};
    while (::poll(&out, 1, -1) < 0 && errno == EINTR) {
    }
    if (out.revents & (POLLERR | POLLHUP)) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::signal(SIGPIPE, SIG_DFL);
      std::raise(SIGPIPE);
    }
  }).detach();
}

// Like ls(1) and plan9port's 9p: d-rwxr-xr-x.
std::string mode_string(std::uint32_t m) {
  std::string s;
  s += (m & p9::DMDIR) ? 'd' : (m & p9::DMAPPEND) ? 'a' : (m & p9::DMAUTH) ? 'A' : '-';
  s += (m & p9::DMEXCL) ? 'l' : '-';
  const char* rwx = "rwx";
  for (int shift = 6; shift >= 0; shift -= 3)
    for (int b = 0; b < 3; b++) s += (m >> (shift + 2 - b)) & 1 ? rwx[b] : '-';
  return s;
}

// The time of day within six months, else the year (as ls does).
std::string time_string(std::uint32_t t) {
  std::time_t tt = t;
  bool recent = std::abs(std::difftime(std::time(nullptr), tt)) < 183 * 24 * 3600.0;
  char buf[32];
  std::strftime(buf, sizeof buf, recent ? "%b %e %H:%M" : "%b %e  %Y", std::localtime(&tt));
  return buf;
}

// Like plan9port's `9p ls`: names, or with -l `mode M dev uid gid length date name`, the
// numeric and name columns padded to the widest entry of the listing.
void print_entries(const std::vector<p9::Dir>& entries, bool longform) {
  if (!longform) {
    for (auto& d : entries) put(d.name + "\n");
    return;
  }
  int wdev = 0, wuid = 0, wgid = 0, wlen = 0;
  for (auto& d : entries) {
    wdev = std::max(wdev, static_cast<int>(std::to_string(d.dev).size()));
    wuid = std::max(wuid, static_cast<int>(d.uid.size()));
    wgid = std::max(wgid, static_cast<int>(d.gid.size()));
    wlen = std::max(wlen, static_cast<int>(std::to_string(d.length).size()));
  }
  for (auto& d : entries) {
    char buf[1024];
    std::snprintf(buf, sizeof buf, "%s M %*u %-*s %-*s %*llu %s %s\n", mode_string(d.mode).c_str(), wdev, d.dev, wuid,
                  d.uid.c_str(), wgid, d.gid.c_str(), wlen, static_cast<unsigned long long>(d.length),
                  time_string(d.mtime).c_str(), d.name.c_str());
    put(buf);
  }
}

int cmd_ls(const p9::CFid& root, const std::vector<std::string>& args, bool longform) {
  std::string path = args.empty() ? "/" : args[0];
  auto f = root.walk(path);
  if (!f) fail(path, f.ename());
  auto d = f->stat();
  if (!d) fail(path, d.ename());
  if (!(d->mode & p9::DMDIR)) {
    print_entries({*d}, longform);
    return 0;
  }
  if (auto st = f->open(p9::OREAD); !st) fail(path, st.ename());
  auto entries = f->dirread_all();
  if (!entries) fail(path, entries.ename());
  std::sort(entries->begin(), entries->end(), [](auto& a, auto& b) { return a.name < b.name; });
  print_entries(*entries, longform);
  return 0;
}

int cmd_stat(const p9::CFid& root, const std::vector<std::string>& args, bool) {
  auto f = root.walk(args[0]);
  if (!f) fail(args[0], f.ename());
  auto d = f->stat();
  if (!d) fail(args[0], d.ename());
  std::string qtype;  // Plan 9's letters for the qid type, as plan9port's 9p prints them
  for (auto [bit, letter] : {std::pair{p9::QTDIR, 'd'}, {p9::QTAPPEND, 'a'}, {p9::QTEXCL, 'l'}, {p9::QTAUTH, 'A'}, {p9::QTTMP, 't'}})
    if (d->qid.type & bit) qtype += letter;
  char buf[1024];
  std::snprintf(buf, sizeof buf, "'%s' '%s' '%s' '%s' q (%016llx %u %s) m %#o at %u mt %u l %llu t %u d %u\n",
                d->name.c_str(), d->uid.c_str(), d->gid.c_str(), d->muid.c_str(),
                static_cast<unsigned long long>(d->qid.path), d->qid.vers, qtype.c_str(), d->mode, d->atime, d->mtime,
                static_cast<unsigned long long>(d->length), d->type, d->dev);
  put(buf);
  return 0;
}

using Clock = std::chrono::steady_clock;

// Each pass reads the file from its start to its end of file, printing every reply as it arrives.

int cmd_read(const p9::CFid& root, const std::vector<std::string>& args, bool follow) {
  auto f = open_path(root, args[0], p9::OREAD);
  end_with_the_reader();
  std::string first_of_last;  // -l: the first reply of the previous pass
  for (bool again = false;; again = true) {
    f.seek(0);
    const auto start = Clock::now();
    auto r = f.read();
    if (!r) fail(args[0], r.ename());
    // A later pass that ends at once, or gives a plain file's same content back at once, is the
    // end; an empty reply that took its time is a BlockOnce heartbeat with nothing to say (feed).
    if (again && (r->empty() || *r == first_of_last) && Clock::now() - start < std::chrono::seconds(1)) return 0;
    first_of_last = *r;
    while (!r->empty()) {
      put_now(*r);
      r = f.read();
      if (!r) fail(args[0], r.ename());
    }
    if (!follow) return 0;
  }
}

int cmd_write(const p9::CFid& root, const std::vector<std::string>& args, bool) {
  auto f = open_path(root, args[0], p9::OWRITE | p9::OTRUNC);
  if (auto w = f.write(read_stdin()); !w) fail(args[0], w.ename());
  if (auto st = f.clunk(); !st) fail(args[0], st.ename());  // a Write file's handler runs here
  return 0;
}

int cmd_rdwr(const p9::CFid& root, const std::vector<std::string>& args, bool) {
  auto f = open_path(root, args[0], p9::ORDWR);
  if (auto w = f.write(read_stdin()); !w) fail(args[0], w.ename());
  end_with_the_reader();
  // From the reply's start (§1.7); on a file that is a Read and a Write (cfg), its content whole.
  f.seek(0);
  // A server that stops on this very request (root ctl `kill`) hangs up after its reply; any
  // other hang-up (a crash halfway through a reply, during `rdwr event`) is an error.
  const auto name = args[0].find_first_not_of('/');
  const bool stopping = name != std::string::npos && args[0].compare(name, std::string::npos, "ctl") == 0;
  bool replied = false;
  for (;;) {
    auto r = f.read();
    if (!r && replied && stopping && r.ename() == p9::err::hung_up) return 0;
    if (!r) fail(args[0], r.ename());
    if (r->empty()) break;
    replied = true;
    put_now(*r);
  }
  if (auto st = f.clunk(); !st) fail(args[0], st.ename());
  return 0;
}

struct Verb {
  const char* name;
  bool dash_l;        // takes -l first
  bool path_needed;   // else the path is optional (ls: the root)
  bool from_stdin;    // the request or content is stdin, never an argument
  int (*run)(const p9::CFid&, const std::vector<std::string>&, bool);
};

constexpr Verb verbs[] = {
    {"ls", true, false, false, cmd_ls},       {"stat", false, true, false, cmd_stat},
    {"read", true, true, false, cmd_read},    {"write", false, true, true, cmd_write},
    {"rdwr", false, true, true, cmd_rdwr},
};

}  // namespace

int main(int argc, char** argv) {
  p9::fill_standard_fds();
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string address = env("OLLIE_ADDR");
  if (address.empty()) address = "ollie";
  if (!args.empty() && args[0] == "-a") {
    if (args.size() < 2) usage("-a needs an address (a socket path, unix!<path> or tcp!<host>!<port>)");
    address = args[1];
    args.erase(args.begin(), args.begin() + 2);
  }
  if (args.empty()) usage("a verb is needed");
  if (args[0] == "-h" || args[0] == "--help") help("");
  std::string name = args[0];
  args.erase(args.begin());
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) help(name);
  const auto v = std::find_if(std::begin(verbs), std::end(verbs), [&](const Verb& x) { return name == x.name; });
  if (v == std::end(verbs)) usage((name.size() > 1 && name[0] == '-' ? "unknown option: " : "unknown verb: ") + name);
  // Options before the path: -l where the verb takes it; `--` ends them (a path may start with -).
  bool dash_l = false;
  std::vector<std::string> operands;
  for (std::size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "--") {
      operands.insert(operands.end(), args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a.size() > 1 && a[0] == '-') {
      if (a == "-l" && v->dash_l && !dash_l) {
        dash_l = true;
        continue;
      }
      usage(name + ": " + (a == "-l" && v->dash_l ? "-l given twice" : "unknown option: " + a));
    }
    operands.push_back(a);
  }
  args = std::move(operands);
  if (args.empty() && v->path_needed) usage(name + ": a path is needed");
  if (args.size() > 1)
    usage(name + ": unexpected argument: " + args[1] + (v->from_stdin ? " (what is sent comes from stdin)" : ""));
  if (address.find('!') == std::string::npos && address.find('/') != std::string::npos) address = "unix!" + address;
  p9::CFid root = mount(address);
  const int status = v->run(root, args, dash_l);
  if (std::fflush(stdout) != 0) fail("stdout", std::strerror(errno));  // ls > /dev/full
  return status;
}
