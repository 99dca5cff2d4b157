#include "session.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <filesystem>

#include "source.hpp"

namespace lsp {

namespace {

/// Documents kept open in the server; the least recently used is closed beyond this.
constexpr std::size_t max_documents = 64;

/// Whole seconds, rounded: the deadline was set just before `from`, and a cut said "19 s" of 20.
std::string seconds_until(Session::clock::time_point deadline, Session::clock::time_point from) {
  return std::to_string(std::chrono::round<std::chrono::seconds>(deadline - from).count());
}

/// Waits at most `ms` for `pid` to exit, then kills its process group; reaps it.
void reap(pid_t pid, int ms) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    while (::poll(&p, 1, ms) < 0 && errno == EINTR) {
    }
    ::close(pidfd);
  }
  if (::waitpid(pid, nullptr, WNOHANG) == pid) {
    ::kill(-pid, SIGKILL);  // what it left behind in its group
    return;
  }
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

Session::Session(const Server& server, std::vector<std::string> argv, std::vector<std::string> env, const std::string& root,
                 bool indexes, clock::time_point deadline)
    : server_(server), indexes_(indexes), root_(root) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw Failure("cannot start " + argv[0] + ": no pipe");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    throw Failure("cannot start " + argv[0] + ": no pipe");
  }
  std::vector<char*> av, ev;
  for (auto& a : argv) av.push_back(a.data());
  av.push_back(nullptr);
  for (auto& e : env) ev.push_back(e.data());
  ev.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {  // async-signal-safe calls only until exec: the bridge has threads
    ::setpgid(0, 0);
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    if (::chdir(root.c_str()) != 0) ::_exit(126);
    ::execve(av[0], av.data(), ev.data());
    constexpr char why[] = "lsp bridge: cannot execute the language server\n";
    (void)!::write(2, why, sizeof why - 1);
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw Failure("cannot start " + argv[0] + ": fork failed");
  }
  pid_ = pid;
  ::fcntl(in[1], F_SETFL, O_NONBLOCK);  // writes are bounded in time (write_all)
  to_ = in[1];
  from_ = out[0];
  reader_ = std::thread([this] { read_loop(); });

  json capabilities = {
      {"general", {{"positionEncodings", {"utf-16"}}}},
      {"window", {{"workDoneProgress", true}}},
      {"workspace", {{"workspaceFolders", true}, {"configuration", false}}},
      {"textDocument",
       {{"synchronization", {{"didSave", false}}},
        {"hover", {{"contentFormat", {"markdown", "plaintext"}}}},
        {"definition", {{"linkSupport", true}}},
        {"references", json::object()},
        {"rename", {{"prepareSupport", false}}},
        {"publishDiagnostics", {{"versionSupport", true}}}}}};
  json params = {{"processId", ::getpid()},
                 {"clientInfo", {{"name", "ollie"}}},
                 {"rootUri", uri_of(root)},
                 {"rootPath", root},
                 {"workspaceFolders", {{{"uri", uri_of(root)}, {"name", std::filesystem::path(root).filename().string()}}}},
                 {"capabilities", capabilities}};
  try {
    request("initialize", params, deadline);
  } catch (const Failure& f) {
    const bool exited = dead();
    stop(0);  // no destructor for a constructor that throws
    if (exited)
      throw Failure(argv[0] + " exited at once (its stderr is in $TMPDIR/lsp/<key>/bridge.log; installed outside /usr, "
                              "the sandbox may not let it run)");
    throw Failure(argv[0] + " did not start: " + f.what());
  }
  notify("initialized", json::object());
  started_ = scan();
}

std::map<std::string, Session::Stamp> Session::scan() const {
  // A walk per call, of at most this many entries (a build tree counts too): past it, later
  // files are not tracked.
  constexpr std::size_t max_entries = 50000;
  namespace fs = std::filesystem;
  std::map<std::string, Stamp> out;
  std::error_code ec;
  std::size_t seen = 0;
  fs::recursive_directory_iterator it(root_, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end && ++seen <= max_entries; it.increment(ec)) {
    std::error_code gone;  // a file removed during the walk: skipped, the walk goes on
    const auto type = it->symlink_status(gone).type();
    const std::string name = it->path().filename().string();
    if (type == fs::file_type::directory) {
      if (name.starts_with(".") || name == "node_modules") it.disable_recursion_pending();
      continue;
    }
    if (type != fs::file_type::regular || !serves(server_, name)) continue;
    struct stat st {};
    if (::stat(it->path().c_str(), &st) == 0) out[it->path().string()] = Stamp::of(st);
  }
  return out;
}

std::optional<std::vector<std::string>> Session::sync_changed() {
  std::vector<std::string> changed;
  for (const auto& [path, stamp] : scan())
    if (const auto it = started_.find(path); it == started_.end() || !(it->second == stamp)) changed.push_back(path);
  if (changed.size() > max_documents / 2) return std::nullopt;
  std::vector<std::string> opened;
  for (const auto& p : changed) try {
      sync(p);
      opened.push_back(p);
    } catch (const Failure&) {
      // unreadable now: the server keeps what its index holds
    }
  return opened;
}

Session::~Session() {
  if (!dead()) {
    try {
      request("shutdown", nullptr, clock::now() + std::chrono::seconds(2));
      notify("exit", nullptr);
    } catch (const std::exception&) {
    }
  }
  stop(2000);
}

void Session::stop(int grace_ms) {
  {
    std::lock_guard lock(write_mu_);  // the reader may still answer the server's requests
    ::close(to_);
    to_ = -1;
  }
  reap(pid_, grace_ms);
  if (reader_.joinable()) reader_.join();
  ::close(from_);
}

void Session::send(const json& message) {
  std::lock_guard lock(write_mu_);
  // A server that stops reading its input for that long is hung: killed, so that the reader sees
  // its end and the next call starts it again.
  if (to_ >= 0 && !write_message(to_, message)) ::kill(-pid_, SIGKILL);
}

bool Session::dead() const {
  std::lock_guard lock(mu_);
  return dead_ || hung_;
}

void Session::read_loop() {
  MessageReader reader(from_);
  while (auto m = reader.next()) {
    {
      std::lock_guard lock(mu_);
      ++heard_;
    }
    if (!m->is_object()) continue;
    const bool has_id = m->contains("id"), has_method = m->contains("method") && (*m)["method"].is_string();
    if (has_method && has_id) {
      answer(*m);
      continue;
    }
    std::lock_guard lock(mu_);
    if (has_method) {
      const std::string method = (*m)["method"];
      const json& p = m->value("params", json::object());
      if (method == "$/progress" && p.is_object() && p.contains("token") && p.contains("value") && p["value"].is_object()) {
        const std::string token = p["token"].dump(), kind = p["value"].value("kind", "");
        if (kind == "begin") {
          progress_.insert(token);
          progressed_ = true;
        } else if (kind == "end") {
          progress_.erase(token);
        }
      } else if (method == "textDocument/publishDiagnostics" && p.is_object() && p.contains("uri") && p["uri"].is_string()) {
        built_[p["uri"]] = p.contains("version") && p["version"].is_number_integer() ? p["version"].get<long>() : LONG_MAX;
      }
    } else if (has_id && (*m)["id"].is_number_integer()) {
      const auto it = waiting_.find((*m)["id"].get<long>());
      if (it != waiting_.end()) it->second = std::move(*m);
    }
    cv_.notify_all();
  }
  std::lock_guard lock(mu_);
  dead_ = true;
  cv_.notify_all();
}

void Session::answer(const json& request) {
  const std::string method = request["method"];
  json reply = {{"jsonrpc", "2.0"}, {"id", request["id"]}};
  const json& p = request.value("params", json::object());
  if (method == "window/workDoneProgress/create") {
    if (p.is_object() && p.contains("token")) {
      std::lock_guard lock(mu_);
      progress_.insert(p["token"].dump());  // its begin follows; until then it counts as running
      progressed_ = true;
    }
    reply["result"] = nullptr;
  } else if (method == "workspace/configuration") {
    reply["result"] = json::array();
    if (p.is_object() && p.contains("items") && p["items"].is_array())
      for (std::size_t i = 0; i < p["items"].size(); i++) reply["result"].push_back(nullptr);
  } else if (method == "client/registerCapability" || method == "client/unregisterCapability" ||
             method == "window/showMessageRequest" || method == "workspace/workspaceFolders") {
    reply["result"] = method == "workspace/workspaceFolders" ? json::array() : json(nullptr);
  } else if (method == "workspace/applyEdit") {
    reply["result"] = {{"applied", false}, {"failureReason", "the client applies edits itself"}};
  } else {
    reply["error"] = {{"code", -32601}, {"message", "not supported by this client: " + method}};
  }
  send(reply);
}

json Session::request(const std::string& method, json params, clock::time_point deadline) {
  long id;
  {
    std::lock_guard lock(mu_);
    if (dead_) throw Failure("the language server has exited");
    id = next_id_++;
    waiting_[id] = std::nullopt;
  }
  json message = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
  if (!params.is_null()) message["params"] = std::move(params);
  std::unique_lock lock(mu_);
  const unsigned long heard = heard_;
  lock.unlock();
  send(message);
  lock.lock();
  const auto start = clock::now();
  const bool came = cv_.wait_until(lock, deadline, [&] { return dead_ || waiting_[id].has_value(); });
  std::optional<json> response = std::move(waiting_[id]);
  waiting_.erase(id);
  const bool dead = dead_;
  // Not a word from the server, and no work in progress, twice in a row: hung, replaced at the
  // next call (dead()). A server that is busy says so, or at least says something.
  const bool silent = !response && !came && heard_ == heard && progress_.empty();
  silent_ = silent ? silent_ + 1 : 0;
  if (silent_ >= 2) hung_ = true;
  const bool hung = hung_;
  lock.unlock();
  if (!response) {
    if (dead) throw Failure("the language server exited during " + method + " (it is restarted at the next call)");
    if (!came) {
      notify("$/cancelRequest", {{"id", id}});
      if (hung)
        throw Failure("the language server did not answer " + method + " within " + seconds_until(deadline, start) +
                      " s, nor the call before, and reports no work: it is started again at the next call");
      // A server that never answered `initialize` has indexed nothing yet: no hint of indexing.
      throw Failure("the language server did not answer " + method + " within " + seconds_until(deadline, start) +
                    (method == "initialize" ? " s; try again" : " s; try again (it may still be indexing)"));
    }
  }
  if (response->contains("error")) {
    const json& e = (*response)["error"];
    throw Failure(e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                                      : "the language server refused " + method);
  }
  return response->value("result", json(nullptr));
}

void Session::notify(const std::string& method, json params) {
  json message = {{"jsonrpc", "2.0"}, {"method", method}};
  if (!params.is_null()) message["params"] = std::move(params);
  send(message);
}

void Session::close_document(const std::string& path) {
  if (docs_.erase(path)) notify("textDocument/didClose", {{"textDocument", {{"uri", uri_of(path)}}}});
}

void Session::sync(const std::string& path) {
  std::lock_guard lock(docs_mu_);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    close_document(path);
    throw Failure("cannot read " + path + ": " + std::strerror(errno));
  }
  auto it = docs_.find(path);
  if (it != docs_.end() && it->second.stamp == Stamp::of(st)) {
    it->second.used = ++uses_;
    return;
  }
  std::string text;
  try {
    text = read_text(path, path);
  } catch (const std::exception& e) {
    close_document(path);
    throw Failure(e.what());
  }
  const std::string uri = uri_of(path);
  if (it == docs_.end()) {
    if (docs_.size() >= max_documents) {
      auto oldest = docs_.begin();
      for (auto d = docs_.begin(); d != docs_.end(); ++d)
        if (d->second.used < oldest->second.used) oldest = d;
      close_document(oldest->first);
    }
    Document& d = docs_[path];
    d = {1, Stamp::of(st), ++uses_};
    notify("textDocument/didOpen",
           {{"textDocument", {{"uri", uri}, {"languageId", language_of(path)}, {"version", 1}, {"text", std::move(text)}}}});
  } else {
    Document& d = it->second;
    d = {d.version + 1, Stamp::of(st), ++uses_};
    notify("textDocument/didChange",
           {{"textDocument", {{"uri", uri}, {"version", d.version}}}, {"contentChanges", {{{"text", std::move(text)}}}}});
  }
}

void Session::sync_open() {
  std::vector<std::string> paths;
  {
    std::lock_guard lock(docs_mu_);
    for (const auto& [p, d] : docs_) paths.push_back(p);
  }
  for (const auto& p : paths) try {
      sync(p);
    } catch (const Failure&) {
      // gone or unreadable now: closed in the server, nothing else to do
    }
}

bool Session::wait_ready(const std::string& path, clock::time_point deadline) {
  long version = 0;
  {
    std::lock_guard lock(docs_mu_);
    if (auto it = docs_.find(path); it != docs_.end()) version = it->second.version;
  }
  const std::string uri = uri_of(path);
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] {
    const auto b = built_.find(uri);
    return dead_ || !server_.builds || (b != built_.end() && b->second >= version);
  });
  // The background index is waited for once: a big project takes minutes, and later calls say
  // that it is still running instead of waiting for it again. clangd starts it only once it has
  // read the compile database, which can be after the file's diagnostics: until its progress has
  // begun, it has not run.
  const auto idle = [&] { return progress_.empty() && (progressed_ || !indexes_); };
  if (!waited_index_) {
    waited_index_ = true;
    cv_.wait_until(lock, deadline, [&] { return dead_ || idle(); });
  }
  return idle();
}

}  // namespace lsp
