#include "ctags.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "tool.hpp"

namespace codeintel {

namespace {

using json = nlohmann::json;

/// Tags kept at most, lines longer than this skipped, time ctags may take.
constexpr std::size_t max_tags = 50000, max_line = 64 * 1024;
constexpr auto max_time = std::chrono::seconds(25);

std::string find_ctags() {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/bin:/bin";
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    if (dir.empty() || dir.front() != '/') continue;
    if (::access((dir + "/ctags").c_str(), X_OK) == 0) return dir + "/ctags";
  }
  return {};
}

std::optional<Tag> parse(const std::string& line) {
  const json j = json::parse(line, nullptr, false);
  // ctags leaves out the path of a file whose name is not UTF-8: a tag nobody could open is left out.
  if (!j.is_object() || j.value("_type", "") != "tag" || !j.value("name", json()).is_string() ||
      !j.value("path", json()).is_string() || j["path"].get_ref<const std::string&>().empty())
    return std::nullopt;
  Tag t;
  t.name = j["name"];
  t.path = j["path"];
  t.kind = j.value("kind", "");
  t.scope = j.value("scope", "");
  t.signature = j.value("signature", "");
  t.line = j.value("line", 0L);
  t.end = j.value("end", 0L);
  return t;
}

}  // namespace

Scan scan_with(const std::string& path, bool recursive, bool (*keep)(const Tag&, const void*), const void* ctx) {
  const std::string ctags = find_ctags();
  if (ctags.empty())
    throw tool::Error("codeintel needs Universal Ctags, and ctags is not on PATH (Debian: apt install universal-ctags)");
  // --options=NONE first: a `.ctags.d/` in the cwd is the model's to write, and ctags would read
  // it (`--languages=-all`, another output).
  std::vector<std::string> args{ctags, "--options=NONE", "--output-format=json", "--fields=+nKSe", "--fields=-P", "--sort=no",
                                "--kinds-C=+p", "--kinds-C++=+p", "-o", "-"};
  if (recursive) {
    // Symbolic links are not followed (as file_grep and file_glob): a link to /usr would have
    // the scan index the system for its whole time budget.
    for (const char* x : {"-R", "--links=no", "--exclude=.git", "--exclude=node_modules", "--exclude=.cache"}) args.emplace_back(x);
  }
  // Absolute: never read as an option (ctags has no `--`). A directory is given as `<dir>/.`:
  // the one the model named may itself be a link, which --links=no would skip whole.
  const std::string root = recursive ? path + "/." : path;
  args.push_back(root);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw tool::Error("cannot run ctags: no pipe");
  const pid_t pid = ::fork();
  if (pid < 0) throw tool::Error("cannot run ctags: fork failed");
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(out[1], 1);
    ::dup2(null, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  Scan s;
  std::string buf;
  bool any_line = false, json_seen = false;
  const auto deadline = std::chrono::steady_clock::now() + max_time;
  char chunk[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{out[0], POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) == 0) {
      s.cut = true;
      s.why = "ctags took longer than " + std::to_string(max_time.count()) + " s; give a smaller directory";
      break;
    }
    const ssize_t n = ::read(out[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (std::size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      any_line = true;
      if (nl - start > max_line) continue;
      if (auto t = parse(buf.substr(start, nl - start))) {
        json_seen = true;
        if (recursive && t->path.starts_with(root + "/")) t->path = path + t->path.substr(root.size());
        if (keep(*t, ctx)) s.tags.push_back(std::move(*t));
      }
    }
    buf.erase(0, start);
    if (buf.size() > max_line) buf.clear();  // the rest of an overlong line is skipped with it
    if (s.tags.size() >= max_tags) {
      s.cut = true;
      s.why = "more than " + std::to_string(max_tags) + " symbols; give a smaller directory or a narrower query";
      break;
    }
  }
  ::close(out[0]);
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!s.cut && WIFEXITED(status) && WEXITSTATUS(status) == 127)
    throw tool::Error("cannot run " + ctags + "; codeintel needs Universal Ctags (Debian: apt install universal-ctags)");
  if (!s.cut && !json_seen && (any_line || !WIFEXITED(status) || WEXITSTATUS(status) != 0))
    throw tool::Error(ctags + " is not Universal Ctags (no JSON output); codeintel needs it (Debian: apt install universal-ctags)");
  return s;
}

}  // namespace codeintel
