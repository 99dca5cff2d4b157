#include "checks.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include "parse.hpp"
#include "tool.hpp"

namespace shell {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }
bool one_of(std::string_view s, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

/// One simple command as it would run: the program behind wrappers like `env` or `xargs`.
struct Call {
  std::string name;                  // the program's base name
  std::vector<std::string> args;     // the words after it
  const Command* cmd = nullptr;
  const std::vector<Call>* all = nullptr;  // every call of the text: its pipe and substitutions

  /// The calls piped into this one, nearest first, at most 16 (a bound on the work of a crafted
  /// pipeline).
  std::vector<const Call*> feeders() const {
    std::vector<const Call*> out;
    for (long j = cmd->pipe_from; j >= 0 && out.size() < 16; j = (*all)[static_cast<std::size_t>(j)].cmd->pipe_from)
      out.push_back(&(*all)[static_cast<std::size_t>(j)]);
    return out;
  }
  bool fed_by_download() const {
    for (const Call* f : feeders())
      if (f->name == "curl" || f->name == "wget") return true;
    return false;
  }
  bool substitutes_download() const {
    for (auto k : cmd->inner)
      if ((*all)[k].name == "curl" || (*all)[k].name == "wget") return true;
    return false;
  }
};

// Programs that run the rest of their words as a command; `valued`: options that take a
// separate value; `operand`: a word before the command (timeout's duration).
struct Wrapper {
  std::string_view name;
  std::initializer_list<std::string_view> valued;
  bool operand;
};
const Wrapper wrappers[] = {
    {"env", {"-u", "-C", "-S"}, false},  {"nohup", {}, false},         {"time", {}, false},
    {"exec", {"-a"}, false},             {"command", {}, false},       {"builtin", {}, false},
    {"nice", {"-n"}, false},             {"ionice", {"-c", "-n", "-p"}, false},
    {"stdbuf", {"-i", "-o", "-e"}, false}, {"timeout", {"-s", "-k"}, true}, {"setsid", {}, false},
    {"xargs", {"-I", "-n", "-P", "-d", "-L", "-s", "-a", "-E"}, false}, {"watch", {"-n", "-d"}, false},
};

std::string base(const std::string& w) { return w.substr(w.rfind('/') == std::string::npos ? 0 : w.rfind('/') + 1); }

Call resolve(const Command& c) {
  Call call;
  call.cmd = &c;
  std::size_t i = 0;
  const auto& w = c.words;
  while (i < w.size()) {
    const std::string name = base(w[i]);
    const auto* wr = std::find_if(std::begin(wrappers), std::end(wrappers), [&](auto& x) { return x.name == name; });
    if (wr == std::end(wrappers) || i + 1 >= w.size()) break;
    std::size_t j = i + 1;
    while (j < w.size() && ((w[j].size() > 1 && w[j][0] == '-') || (name == "env" && contains(w[j], "=")))) {
      if (w[j] == "--") {
        j++;
        break;
      }
      j += one_of(w[j], wr->valued) ? 2 : 1;
    }
    if (wr->operand) j++;
    // `command -v sudo` looks the name up: nothing runs it.
    const bool lookup = name == "command" && std::any_of(w.begin() + static_cast<long>(i) + 1, w.begin() + static_cast<long>(std::min(j, w.size())),
                                                         [](const std::string& o) { return o == "-v" || o == "-V"; });
    if (j >= w.size() || lookup) break;
    i = j;
  }
  if (i < w.size()) {
    call.name = base(w[i]);
    call.args.assign(w.begin() + static_cast<long>(i) + 1, w.end());
  }
  return call;
}

// What the refusal quotes: the command's pipeline up to it, words and redirections, at most 80
// bytes.
std::string shown(const Call& c) {
  std::string s;
  const auto feeders = c.feeders();
  for (auto it = feeders.rbegin(); it != feeders.rend(); ++it) {
    for (const auto& w : (*it)->cmd->words) (s += s.empty() || s.back() == ' ' ? "" : " ") += w;
    s += " | ";
  }
  for (const auto& w : c.cmd->words) (s += s.empty() || s.back() == ' ' ? "" : " ") += w;
  for (const auto& w : c.cmd->writes) (s += " > ") += w;
  if (s.size() > 80) {
    std::size_t n = 77;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) n--;
    s = s.substr(0, n) + "...";
  }
  return s;
}

std::string clean(const std::string& path) { return path.empty() ? "" : tool::absolute(path); }

bool is_shell(std::string_view n) { return one_of(n, {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish"}); }
bool is_interpreter(std::string_view n) {
  return is_shell(n) || one_of(n, {"python", "python2", "python3", "perl", "ruby", "node", "php", "eval", "source", "."});
}

// Options (`-x`, `--x`) are skipped; the first other word.
const std::string* first_operand(const Call& c) {
  for (const auto& a : c.args)
    if (a.empty() || a[0] != '-' || a == "-") return &a;
  return nullptr;
}
bool has_short_option(const Call& c, char letter) {
  for (const auto& a : c.args)
    if (a.size() > 1 && a[0] == '-' && a[1] != '-' && contains(a, std::string(1, letter))) return true;
  return false;
}

// --- the rows -----------------------------------------------------------------------------

bool makes_filesystem(const Call& c, const std::string&) {
  return starts_with(c.name, "mkfs") || one_of(c.name, {"mke2fs", "mkdosfs", "mkntfs"});
}

bool harmless_device(const std::string& p) {
  return one_of(p, {"/dev/null", "/dev/zero", "/dev/full", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty"}) ||
         starts_with(p, "/dev/fd/") || starts_with(p, "/dev/shm/") || starts_with(p, "/dev/pts/");
}

bool dd_to_device(const Call& c, const std::string&) {
  if (c.name != "dd") return false;
  for (const auto& a : c.args)
    if (starts_with(a, "of=")) {
      const std::string p = clean(a.substr(3));
      if (starts_with(p, "/dev/") && !harmless_device(p)) return true;
    }
  return false;
}

bool escalates(const Call& c, const std::string&) { return one_of(c.name, {"sudo", "su", "doas", "pkexec", "run0"}); }

bool touches_shadow(const Call& c, const std::string&) {
  auto hit = [](const std::string& w) { return contains(w, "/etc/shadow") || contains(w, "/etc/gshadow"); };
  return std::any_of(c.cmd->words.begin(), c.cmd->words.end(), hit) ||
         std::any_of(c.cmd->writes.begin(), c.cmd->writes.end(), hit);
}

// An operand of a delete as the path it names: `~`, `$HOME` and a trailing `/*` resolved, made
// absolute and cleaned; empty for a pattern the check cannot resolve.
std::string delete_target(std::string a, const std::string& home) {
  for (std::string_view h : {"~", "$HOME", "${HOME}"})
    if (a == h || starts_with(a, std::string(h) + "/")) a = home + a.substr(h.size());
  if (a == "*" || a == ".*") a = ".";
  for (std::string_view glob : {"/*", "/.*"})
    if (a.size() > glob.size() && a.compare(a.size() - glob.size(), glob.size(), glob) == 0) a.resize(a.size() - glob.size());
  if (a == "/*" || a == "/.*") a = "/";
  if (a.empty() || a.find_first_of("*?[") != std::string::npos) return {};
  return clean(a);
}

// The operands of a recursive rm; none when it is not recursive.
std::vector<std::string> rm_targets(const Call& c, const std::string& home) {
  if (c.name != "rm") return {};
  bool recursive = false, options = true;
  std::vector<std::string> targets;
  for (const auto& a : c.args) {
    if (options && a == "--") {
      options = false;
      continue;
    }
    if (options && a.size() > 1 && a[0] == '-') {
      if (a == "--recursive" || (a[1] != '-' && a.find_first_of("rR") != std::string::npos)) recursive = true;
      continue;
    }
    if (auto t = delete_target(a, home); !t.empty()) targets.push_back(std::move(t));
  }
  return recursive ? targets : std::vector<std::string>{};
}

// The starting points of a `find` that deletes everything beneath them, as a recursive rm does:
// `-delete` or `-exec rm` (`-execdir`, `-ok`, `-okdir`) with no test choosing what goes, only
// options (-depth, -xdev, -maxdepth …) and actions that choose nothing (-print, -ls …); with an
// `-o` or `,` a test chooses nothing for the other side, so it counts as none. `find . -name
// '*.o' -delete` chooses; none then.
std::vector<std::string> find_targets(const Call& c, const std::string& home) {
  if (c.name != "find") return {};
  const auto& a = c.args;
  std::size_t i = 0;
  for (; i < a.size(); i++) {  // options before the starting points, in any order
    if (one_of(a[i], {"-H", "-L", "-P"}) || starts_with(a[i], "-O")) continue;
    if (a[i] == "-D") {
      i++;
      continue;
    }
    if (a[i] == "--") i++;
    break;
  }
  std::vector<std::string> starts;
  bool named = false;  // a starting point given, resolvable or not
  for (; i < a.size() && !(a[i].size() > 1 && a[i][0] == '-') && !one_of(a[i], {"(", "!", ","}); i++, named = true)
    if (auto t = delete_target(a[i], home); !t.empty()) starts.push_back(std::move(t));
  bool deletes = false, chooses = false, either = false;
  int group = 0;  // parentheses open
  for (std::size_t j = i; j < a.size(); j++) {
    const std::string& w = a[j];
    if (w == "-delete") {
      deletes = true;
    } else if (one_of(w, {"-exec", "-execdir", "-ok", "-okdir"})) {
      std::size_t k = j + 1;  // the program, behind the wrappers that run the rest (`env rm`)
      while (k < a.size() && (one_of(base(a[k]), {"env", "command", "nice", "nohup", "busybox", "stdbuf", "xargs"}) ||
                              (k > j + 1 && a[k].size() > 1 && (a[k][0] == '-' || contains(a[k], "=")))))
        k++;
      if (k < a.size() && base(a[k]) == "rm") deletes = true;
      while (j + 1 < a.size() && !one_of(a[j + 1], {";", "+"})) j++;
      j++;
    } else if (w == "(" || w == ")") {
      group += w == "(" ? 1 : -1;
    } else if (one_of(w, {"-o", "-or", ","})) {
      either = either || group <= 0;  // inside parentheses it joins tests, which still choose
    } else if (one_of(w, {"-maxdepth", "-mindepth", "-regextype", "-printf", "-fprint", "-fprint0", "-fls"})) {
      j++;
    } else if (w == "-fprintf") {
      j += 2;
    } else if (!one_of(w, {"!", "-not", "-a", "-and", "-depth", "-d", "-xdev", "-mount", "-noleaf",
                           "-ignore_readdir_race", "-noignore_readdir_race", "-follow", "-daystart", "-warn", "-nowarn",
                           "-print", "-print0", "-ls", "-true", "-quit"})) {
      chooses = true;  // a test
    }
  }
  if (!deletes || (chooses && !either)) return {};
  if (!named) starts.push_back(clean("."));  // find's default starting point
  return starts;
}

std::vector<std::string> delete_targets(const Call& c, const std::string& home) {
  auto t = rm_targets(c, home);
  auto f = find_targets(c, home);
  t.insert(t.end(), f.begin(), f.end());
  return t;
}

bool system_dir(const std::string& p) {
  if (one_of(p, {"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt",
                 "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var"}))
    return true;
  return starts_with(p, "/usr/") && p.find('/', 5) == std::string::npos;
}

bool deletes_system(const Call& c, const std::string& home) {
  const auto t = delete_targets(c, home);
  return std::any_of(t.begin(), t.end(), system_dir);
}

bool deletes_home(const Call& c, const std::string& home) {
  if (home.empty() || home[0] != '/') return false;
  const std::string h = clean(home);
  const auto t = delete_targets(c, home);
  return std::any_of(t.begin(), t.end(), [&](const std::string& p) { return p != "/" && (p == h || starts_with(h, p + "/")); });
}

bool block_device(const std::string& word) {
  const std::string p = clean(word);
  for (std::string_view d : {"/dev/sd", "/dev/hd", "/dev/vd", "/dev/xvd", "/dev/nvme", "/dev/mmcblk", "/dev/loop", "/dev/dm-",
                             "/dev/md", "/dev/mapper/", "/dev/disk/", "/dev/sr", "/dev/mem", "/dev/kmem", "/dev/port"})
    if (starts_with(p, d)) return true;
  return false;
}

bool writes_device(const Call& c, const std::string&) {
  if (std::any_of(c.cmd->writes.begin(), c.cmd->writes.end(), block_device)) return true;
  if (!one_of(c.name, {"tee", "cp", "mv", "install", "shred", "wipefs", "blkdiscard", "fdisk", "sfdisk", "parted", "sgdisk",
                       "mkswap"}))
    return false;
  return std::any_of(c.args.begin(), c.args.end(), block_device);
}

// `curl … | sh`, `bash <(curl …)`, `eval "$(wget -O- …)"`.
bool runs_download(const Call& c, const std::string&) {
  if (!is_interpreter(c.name)) return false;
  const std::string* op = first_operand(c);
  const bool code_option = is_shell(c.name) ? has_short_option(c, 'c')
                                            : has_short_option(c, 'c') || has_short_option(c, 'e') || has_short_option(c, 'm') ||
                                                  has_short_option(c, 'E') || has_short_option(c, 'r') || has_short_option(c, 'p');
  const bool reads_stdin = (!op || *op == "-" || *op == "/dev/stdin" || (is_shell(c.name) && has_short_option(c, 's'))) &&
                           !(code_option && op);
  if (reads_stdin && c.fed_by_download()) return true;
  const bool substituted = op && (contains(*op, "$(") || contains(*op, "<(") || contains(*op, "`"));
  return substituted && c.substitutes_download();
}

// `:(){ :|:& };:` and its named forms: a function whose body pipes it into itself, or starts it
// in the background and calls it again. Returns the definition as written (quotes left out).
std::optional<std::string> fork_bomb(std::string_view text) {
  // The text without blanks next to operators, so `f () { f | f & }` reads `f(){f|f&}`, and
  // without quoted text (`bash -c '…'` is checked as a script of its own); `at`: where each
  // character came from.
  std::string s;
  std::vector<std::size_t> at;
  auto op = [](char c) { return std::string_view("|&;(){}<>").find(c) != std::string_view::npos; };
  for (std::size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (c == '\\') {
      i++;
    } else if (c == '\'' || c == '"') {
      for (i++; i < text.size() && text[i] != c; i++)
        if (c == '"' && text[i] == '\\') i++;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (!s.empty() && s.back() != ' ' && !op(s.back())) s += ' ', at.push_back(i);
    } else {
      if (op(c))
        while (!s.empty() && s.back() == ' ') s.pop_back(), at.pop_back();
      s += c;
      at.push_back(i);
    }
  }
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':' || c == '.' || c == '-'; };
  for (std::size_t p = s.find("(){"); p != std::string::npos; p = s.find("(){", p + 1)) {
    std::size_t b = p;
    while (b > 0 && name_char(s[b - 1])) b--;
    const std::string name = s.substr(b, p - b);
    if (name.empty()) continue;
    int depth = 0;
    std::size_t e = p + 2;
    const std::size_t stop = std::min(s.size(), p + 1024);  // bodies longer than that are no bomb
    for (; e < stop; e++)
      if (s[e] == '{') depth++;
      else if (s[e] == '}' && --depth == 0) break;
    if (e >= stop) continue;
    const std::string body = s.substr(p + 3, e - p - 3);
    // Occurrences of the name as a whole token in the body, and what follows each.
    int calls = 0, backgrounded = 0;
    bool piped = false;
    for (std::size_t k = body.find(name); k != std::string::npos; k = body.find(name, k + 1)) {
      const std::size_t after = k + name.size();
      if ((k > 0 && name_char(body[k - 1])) || (after < body.size() && name_char(body[after]))) continue;
      calls++;
      if (after < body.size() && body[after] == '&' && (after + 1 >= body.size() || body[after + 1] != '&')) backgrounded++;
      if (after < body.size() && body[after] == '|' && body.compare(after + 1, name.size(), name) == 0) piped = true;
    }
    if (piped || (backgrounded > 0 && calls > 1)) {
      const std::size_t from = at[b], to = at[e] + 1;
      return std::string(text.substr(from, std::min<std::size_t>(to - from, 80)));
    }
  }
  return std::nullopt;
}

// The table. A row matches either the whole text (`text`) or one simple command (`call`).
struct Pattern {
  const char* what;
  std::optional<std::string> (*text)(std::string_view);
  bool (*call)(const Call&, const std::string& home);
};

const Pattern patterns[] = {
    // universal
    {"filesystem creation", nullptr, makes_filesystem},
    {"dd to a device", nullptr, dd_to_device},
    {"privilege escalation", nullptr, escalates},
    {"access to the password hashes", nullptr, touches_shadow},
    // bash
    {"recursive delete of the home directory", nullptr, deletes_home},
    {"recursive delete of / or a system directory", nullptr, deletes_system},
    {"fork bomb", fork_bomb, nullptr},
    {"write to a block device", nullptr, writes_device},
    {"running downloaded code", nullptr, runs_download},
};

// The script a call hands to a shell of its own: `bash -c '<script>'`, `eval <words>`.
std::optional<std::string> script_of(const Call& c) {
  if (c.name == "eval" && !c.args.empty()) {
    std::string s;
    for (const auto& a : c.args) (s += s.empty() ? "" : " ") += a;
    return s;
  }
  if (is_shell(c.name) && has_short_option(c, 'c'))
    if (const std::string* op = first_operand(c)) return *op;
  return std::nullopt;
}

constexpr int max_script_depth = 4;  // shells in shells looked into

std::optional<std::string> check(std::string_view text, const std::string& home, int depth) {
  for (const auto& p : patterns)
    if (p.text)
      if (auto m = p.text(text)) return std::string(p.what) + " (" + *m + ")";
  const std::vector<Command> commands = parse(text);
  std::vector<Call> calls;
  calls.reserve(commands.size());
  for (const auto& c : commands) calls.push_back(resolve(c));
  for (auto& c : calls) c.all = &calls;
  for (const auto& c : calls)
    for (const auto& p : patterns)
      if (p.call && p.call(c, home)) return std::string(p.what) + " (" + shown(c) + ")";
  for (const auto& c : calls) {
    if (auto s = script_of(c)) {
      // Past four shells in shells the check cannot see what runs: refused, not waved through.
      if (depth == max_script_depth) return "shells nested more than " + std::to_string(max_script_depth) + " deep (" + shown(c) + ")";
      if (auto r = check(*s, home, depth + 1)) return r;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> refusal(std::string_view command, const std::string& home) { return check(command, home, 0); }

}  // namespace shell
