#include "store.hpp"

#include "backend/json.hpp"
#include "backend/wire.hpp"
#include "ids.hpp"
#include "toolsrv/meta.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace ollie {

// Every function here does blocking file I/O: call it off the I/O threads.

namespace {

using ojson = nlohmann::ordered_json;
using backend::Role;

constexpr auto replace = nlohmann::json::error_handler_t::replace;
constexpr std::int64_t max_total = std::int64_t{1} << 53;
constexpr double max_cost = 1e12;
/// A count as written: at most what the parser takes back (a total restored at the bound grows
/// past it, and the file would no longer load).
template <class T>
T bounded(T n) {
  return std::min(n, static_cast<T>(max_total));
}
/// An agent's files in its session's directory: `<agent id><suffix>` (§7.7).
constexpr const char* agent_files[] = {".blocks.jsonl", ".compaction.jsonl"};
constexpr const char* killed_mark = ".killed";  // `<agent id>.killed`: a kill under way (mark_killed)
/// The largest session.json restored, and so the largest a save writes: every agent's history
/// is compacted within its context window long before, but 256 agents' plans of 1 MiB of control
/// bytes (6 bytes each in JSON) are not. A save over it is refused, the file before it kept: a
/// file olliesrv wrote always loads.
constexpr std::size_t max_session_json = 256u << 20;
/// A killed session's directory, renamed `.<id><suffix>` while it is removed.
constexpr const char* killed_suffix = ".killed";

/// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  explicit operator bool() const { return fd >= 0; }
};

p9::Error sys_error(const std::string& what) { return p9::error(what + ": " + std::strerror(errno)); }

/// Ids become file names: refuse anything that is not one plain component.
bool plain_component(std::string_view s) {
  return !s.empty() && s.size() <= 255 && s != "." && s != ".." && s.find('/') == std::string_view::npos &&
         s.find('\0') == std::string_view::npos;
}

/// Parses JSON text kept as text in the records; nullopt when it is not JSON, or nests deeper
/// than the backends accept (a model's call arguments, kept as they came: dumping them nested
/// 30,000 deep overflowed the stack of the thread saving the session).
std::optional<ojson> parse_text(std::string_view text) {
  if (backend::too_deep(text)) return std::nullopt;
  auto j = ojson::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

ojson message_json(const HistoryMessage& h) {
  const auto& m = h.msg;
  ojson j = ojson::object();
  j["role"] = backend::role_name(m.role);  // the providers' spelling, which §7.7 keeps
  if (m.role == Role::tool) {
    j["tool_call_id"] = m.tool_call_id;
    if (!h.tool_name.empty()) j["name"] = h.tool_name;
  }
  j["content"] = m.content;
  if (!m.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const auto& c : m.tool_calls) {
      ojson cj = ojson::object();
      cj["id"] = c.id;
      cj["name"] = c.name;
      auto args = parse_text(c.arguments);
      if (args && args->is_object())
        cj["arguments"] = std::move(*args);
      else
        cj["arguments"] = c.arguments;
      calls.push_back(std::move(cj));
    }
    j["tool_calls"] = std::move(calls);
  }
  if (!m.reasoning_items.empty()) {
    ojson items = ojson::array();
    for (const auto& it : m.reasoning_items) {
      auto v = parse_text(it);
      if (v)
        items.push_back(std::move(*v));
      else
        items.push_back(it);
    }
    j["reasoning"] = std::move(items);
  }
  if (!m.reasoning_backend.empty()) j["reasoningBackend"] = m.reasoning_backend;
  if (m.role == Role::tool) {
    if (!h.tier.empty()) j["tier"] = h.tier;
    if (h.collapsed) j["collapsed"] = true;
    if (h.failed) j["error"] = true;
    if (h.inject) j["inject"] = h.inject;
  }
  return j;
}

ojson messages_json(const std::vector<HistoryMessage>& ms) {
  ojson a = ojson::array();
  for (const auto& m : ms) a.push_back(message_json(m));
  return a;
}

ojson agent_json(const AgentRecord& a) {
  ojson j = ojson::object();
  j["id"] = a.id;
  j["name"] = a.name;
  j["profile"] = a.profile;
  if (!a.parent.empty()) j["parent"] = a.parent;
  if (a.turn) j["turn"] = true;
  if (a.turn && a.turn_cost > 0) j["turnCost"] = std::min(a.turn_cost, max_cost);
  j["created"] = a.created;
  j["backend"] = a.backend;
  j["model"] = a.model;
  j["cwd"] = a.cwd;
  auto params = parse_text(a.params.empty() ? "{}" : a.params);
  if (!params || !params->is_object()) {
    spdlog::warn("agent {}: params are not a JSON object, saved as {{}}", a.id);
    params = ojson::object();
  }
  j["params"] = std::move(*params);
  j["tools"] = a.tools;
  j["peers"] = a.peers;
  j["plan"] = a.plan;
  j["blockCounter"] = bounded(a.block_counter);
  if (a.system_prompt_bytes) j["systemPromptBytes"] = bounded(a.system_prompt_bytes);
  j["feed"] = a.feed;
  const auto& u = a.usage;
  j["usage"] = ojson{{"input", bounded(u.input)},
                     {"output", bounded(u.output)},
                     {"cachedInput", bounded(u.cached_input)},
                     {"cacheCreation", bounded(u.cache_creation)},
                     {"requests", bounded(u.requests)},
                     {"estimated", u.estimated},
                     {"costLast", std::min(u.cost_last, max_cost)},
                     {"costSession", std::min(u.cost_session, max_cost)}};
  j["messages"] = ojson::array();  // to_json splices the messages in (session_text)
  return j;
}

/// Whether two messages are equal in every field, those message_json leaves out included: a
/// saved text is reused only for an equal message. A field added to HistoryMessage or
/// backend::Message belongs here too.
bool same_message(const HistoryMessage& x, const HistoryMessage& y) {
  const auto& a = x.msg;
  const auto& b = y.msg;
  if (a.role != b.role || a.content != b.content || a.tool_call_id != b.tool_call_id || a.reasoning != b.reasoning ||
      a.reasoning_items != b.reasoning_items || a.reasoning_backend != b.reasoning_backend ||
      x.tool_name != y.tool_name || x.tier != y.tier || x.collapsed != y.collapsed || x.failed != y.failed ||
      x.inject != y.inject ||
      a.tool_calls.size() != b.tool_calls.size())
    return false;
  for (std::size_t i = 0; i < a.tool_calls.size(); i++)
    if (a.tool_calls[i].id != b.tool_calls[i].id || a.tool_calls[i].name != b.tool_calls[i].name ||
        a.tool_calls[i].arguments != b.tool_calls[i].arguments)
      return false;
  return true;
}

/// One message as session.json holds it: ojson's dump(1) of it four levels deep (session,
/// agents, agent, messages), without the indentation of its first line.
std::string message_text(const HistoryMessage& m) {
  const std::string flat = message_json(m).dump(1, ' ', false, replace);
  std::string out;
  out.reserve(flat.size() + flat.size() / 4);
  // Strings hold their newlines escaped: every newline of the text is one of the layout's.
  for (char c : flat) {
    out += c;
    if (c == '\n') out.append(4, ' ');
  }
  return out;
}

// --- parsing: every error names the field ---

struct Parser {
  std::string err;

  bool fail(const std::string& path, const char* what) {
    if (err.empty()) err = path + ": " + what;
    return false;
  }
  const ojson* get(const ojson& o, const char* key) {
    auto it = o.find(key);
    return it == o.end() || it->is_null() ? nullptr : &*it;
  }
  bool str(const ojson& o, const char* key, const std::string& path, std::string& into) {
    auto* v = get(o, key);
    if (!v) return true;
    if (!v->is_string()) return fail(path + key, "expected a string");
    into = v->get<std::string>();
    return true;
  }
  bool boolean(const ojson& o, const char* key, const std::string& path, bool& into) {
    auto* v = get(o, key);
    if (!v) return true;
    if (!v->is_boolean()) return fail(path + key, "expected a boolean");
    into = v->get<bool>();
    return true;
  }
  bool i64(const ojson& o, const char* key, const std::string& path, std::int64_t& into) {
    auto* v = get(o, key);
    if (!v) return true;
    if (v->is_number_unsigned()) {
      if (v->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return fail(path + key, "out of range");
      into = v->get<std::int64_t>();
    } else if (v->is_number_integer()) {
      into = v->get<std::int64_t>();
    } else {
      return fail(path + key, "expected an integer");
    }
    return true;
  }
  bool u64(const ojson& o, const char* key, const std::string& path, std::uint64_t& into) {
    auto* v = get(o, key);
    if (!v) return true;
    if (v->is_number_unsigned())
      into = v->get<std::uint64_t>();
    else if (v->is_number_integer())
      return fail(path + key, "expected a non-negative integer");
    else
      return fail(path + key, "expected an integer");
    return true;
  }
  bool num(const ojson& o, const char* key, const std::string& path, double& into) {
    auto* v = get(o, key);
    if (!v) return true;
    if (!v->is_number()) return fail(path + key, "expected a number");
    into = v->get<double>();
    return true;
  }
  // A usage total or a block counter: 0 to 2^53. A file that says more was not written by
  // olliesrv, and the next turn's sums would overflow from it.
  bool count(const ojson& o, const char* key, const std::string& path, std::int64_t& into) {
    if (!i64(o, key, path, into)) return false;
    return into >= 0 && into <= max_total ? true : fail(path + key, "out of range");
  }
  bool count(const ojson& o, const char* key, const std::string& path, std::uint64_t& into) {
    if (!u64(o, key, path, into)) return false;
    return into <= static_cast<std::uint64_t>(max_total) ? true : fail(path + key, "out of range");
  }
  bool cost(const ojson& o, const char* key, const std::string& path, double& into) {
    if (!num(o, key, path, into)) return false;
    return into >= 0 && into <= max_cost ? true : fail(path + key, "out of range");
  }
  bool strings(const ojson& o, const char* key, const std::string& path, std::vector<std::string>& into) {
    auto* v = get(o, key);
    if (!v) return true;
    if (!v->is_array()) return fail(path + key, "expected an array");
    into.clear();
    into.reserve(v->size());
    for (std::size_t i = 0; i < v->size(); i++) {
      if (!(*v)[i].is_string()) return fail(path + key + "[" + std::to_string(i) + "]", "expected a string");
      into.push_back((*v)[i].get<std::string>());
    }
    return true;
  }
  const ojson* object(const ojson& o, const char* key, const std::string& path) {
    auto* v = get(o, key);
    if (v && !v->is_object()) {
      fail(path + key, "expected an object");
      return nullptr;
    }
    return v;
  }
  const ojson* array(const ojson& o, const char* key, const std::string& path) {
    auto* v = get(o, key);
    if (v && !v->is_array()) {
      fail(path + key, "expected an array");
      return nullptr;
    }
    return v;
  }

  bool message(const ojson& j, const std::string& p, HistoryMessage& h) {
    if (!j.is_object()) return fail(p.substr(0, p.size() - 1), "expected an object");
    auto& m = h.msg;
    auto* role = get(j, "role");
    if (!role) return fail(p + "role", "missing");
    if (!role->is_string()) return fail(p + "role", "expected a string");
    const auto& r = role->get_ref<const std::string&>();
    if (r == "user")
      m.role = Role::user;
    else if (r == "assistant")
      m.role = Role::assistant;
    else if (r == "tool")
      m.role = Role::tool;
    else if (r == "system")
      m.role = Role::system;
    else
      return fail(p + "role", "unknown role");
    if (!str(j, "content", p, m.content) || !str(j, "tool_call_id", p, m.tool_call_id) ||
        !str(j, "name", p, h.tool_name) || !str(j, "tier", p, h.tier) || !boolean(j, "collapsed", p, h.collapsed) ||
        !boolean(j, "error", p, h.failed) || !str(j, "reasoningBackend", p, m.reasoning_backend))
      return false;
    std::uint64_t inject = 0;
    if (!u64(j, "inject", p, inject)) return false;
    if (inject > m.content.size()) return fail(p + "inject", "longer than the content");
    h.inject = static_cast<std::size_t>(inject);
    if (!h.tier.empty() && h.tier != "hot" && h.tier != "warm" && h.tier != "cold")
      return fail(p + "tier", "expected hot, warm or cold");
    auto* calls = array(j, "tool_calls", p);
    if (!err.empty()) return false;
    if (calls) {
      for (std::size_t i = 0; i < calls->size(); i++) {
        const auto& c = (*calls)[i];
        std::string cp = p + "tool_calls[" + std::to_string(i) + "].";
        if (!c.is_object()) return fail(cp.substr(0, cp.size() - 1), "expected an object");
        backend::ToolCall call;
        if (!str(c, "id", cp, call.id) || !str(c, "name", cp, call.name)) return false;
        if (auto* a = get(c, "arguments")) {
          if (a->is_string())
            call.arguments = a->get<std::string>();
          else if (a->is_object())
            call.arguments = a->dump(-1, ' ', false, replace);
          else
            return fail(cp + "arguments", "expected an object or a string");
        } else {
          call.arguments = "{}";
        }
        m.tool_calls.push_back(std::move(call));
      }
    }
    auto* items = array(j, "reasoning", p);
    if (!err.empty()) return false;
    if (items)
      for (const auto& it : *items)
        m.reasoning_items.push_back(it.dump(-1, ' ', false, replace));  // each item is JSON text
    return true;
  }

  bool agent(const ojson& j, const std::string& p, AgentRecord& a) {
    if (!j.is_object()) return fail(p.substr(0, p.size() - 1), "expected an object");
    auto* id = get(j, "id");
    if (!id) return fail(p + "id", "missing");
    if (!str(j, "id", p, a.id) || !str(j, "name", p, a.name) || !str(j, "profile", p, a.profile) ||
        !str(j, "parent", p, a.parent) || !i64(j, "created", p, a.created) || !str(j, "backend", p, a.backend) || !str(j, "model", p, a.model) ||
        !str(j, "cwd", p, a.cwd) || !strings(j, "tools", p, a.tools) || !strings(j, "peers", p, a.peers) ||
        !str(j, "plan", p, a.plan) || !count(j, "blockCounter", p, a.block_counter) ||
        !count(j, "systemPromptBytes", p, a.system_prompt_bytes) || !str(j, "feed", p, a.feed) ||
        !boolean(j, "turn", p, a.turn) || !cost(j, "turnCost", p, a.turn_cost))
      return false;
    if (a.id.empty()) return fail(p + "id", "empty");
    auto* params = object(j, "params", p);
    if (!err.empty()) return false;
    a.params = params ? params->dump(-1, ' ', false, replace) : "{}";
    auto* u = object(j, "usage", p);
    if (!err.empty()) return false;
    if (u) {
      std::string up = p + "usage.";
      auto& r = a.usage;
      if (!count(*u, "input", up, r.input) || !count(*u, "output", up, r.output) ||
          !count(*u, "cachedInput", up, r.cached_input) || !count(*u, "cacheCreation", up, r.cache_creation) ||
          !count(*u, "requests", up, r.requests) || !boolean(*u, "estimated", up, r.estimated) ||
          !cost(*u, "costLast", up, r.cost_last) || !cost(*u, "costSession", up, r.cost_session))
        return false;
    }
    auto* ms = array(j, "messages", p);
    if (!err.empty()) return false;
    if (ms) {
      a.messages.resize(ms->size());
      for (std::size_t i = 0; i < ms->size(); i++)
        if (!message((*ms)[i], p + "messages[" + std::to_string(i) + "].", a.messages[i])) return false;
    }
    return true;
  }

  bool session(const ojson& j, SessionRecord& s) {
    if (!j.is_object()) return fail("session", "expected an object");
    const std::string p;
    auto* id = get(j, "id");
    if (!id) return fail("id", "missing");
    if (!str(j, "id", p, s.id) || !str(j, "name", p, s.name) || !str(j, "cwd", p, s.cwd) ||
        !str(j, "remote", p, s.remote) || !str(j, "backend", p, s.backend) || !str(j, "model", p, s.model) ||
        !str(j, "goal", p, s.goal) || !str(j, "bypass", p, s.bypass) ||
        !u64(j, "bypassCounter", p, s.bypass_counter))
      return false;
    if (s.id.empty()) return fail("id", "empty");
    auto* env = object(j, "env", p);
    if (!err.empty()) return false;
    if (env)
      for (auto it = env->begin(); it != env->end(); ++it) {
        if (!it.value().is_string()) return fail("env." + it.key(), "expected a string");
        s.env[it.key()] = it.value().get<std::string>();
      }
    // Required: a session restored without its agents would have their files removed as those of
    // agents it no longer has (every save writes the list, empty or not).
    auto* agents = array(j, "agents", p);
    if (!err.empty()) return false;
    if (!agents) return fail("agents", "missing");
    s.agents.resize(agents->size());
    std::set<std::string> ids;
    for (std::size_t i = 0; i < agents->size(); i++) {
      std::string ap = "agents[" + std::to_string(i) + "].";
      if (!agent((*agents)[i], ap, s.agents[i])) return false;
      if (!ids.insert(s.agents[i].id).second) return fail(ap + "id", "duplicate");
    }
    return true;
  }
};

}  // namespace

void drop_unanswered(std::vector<HistoryMessage>& history) {
  // A result answers a call of the last assistant message before it: providers want each
  // round's results right after its calls, and call ids repeat across rounds (gemini and ollama
  // give none, so each response counts `call_0`, `call_1`, ... again).
  std::vector<bool> keep(history.size(), true);
  std::size_t owner = history.size();
  std::set<std::string> open, answered;
  auto settle = [&] {  // the calls of `owner` that got no result go
    if (owner == history.size()) return;
    auto& m = history[owner].msg;
    std::erase_if(m.tool_calls, [&](const backend::ToolCall& c) { return !answered.count(c.id); });
    if (!m.tool_calls.empty()) return;
    m.reasoning_items.clear();  // kept only beside tool calls (§7.7, §8.16)
    m.reasoning_backend.clear();
    if (m.content.empty()) keep[owner] = false;
  };
  for (std::size_t i = 0; i < history.size(); i++) {
    const auto& m = history[i].msg;
    if (m.role == backend::Role::assistant) {
      settle();
      owner = i;
      open.clear();
      answered.clear();
      for (const auto& c : m.tool_calls) open.insert(c.id);
    } else if (m.role == backend::Role::tool) {
      if (open.erase(m.tool_call_id)) answered.insert(m.tool_call_id);
      else keep[i] = false;  // no call before it, or a second result
    }
  }
  settle();
  std::size_t out = 0;
  for (std::size_t i = 0; i < history.size(); i++)
    if (keep[i]) {
      if (out != i) history[out] = std::move(history[i]);
      out++;
    }
  history.resize(out);
}

namespace {

/// The whole content of an open file.
bool read_all(int fd, std::string& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  // Nothing writes these files while they are read (session.json is only ever replaced, and
  // restore runs before any agent appends): the size fstat gave is the whole file.
  return true;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

/// mkdir -p: every directory it creates is 0700 whatever the umask.
p9::Status make_dirs(const std::string& path) {
  if (path.empty()) return {};
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    return p9::error(path + ": not a directory");
  }
  auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0)
    if (auto st2 = make_dirs(path.substr(0, slash)); !st2) return st2;
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return sys_error(path);
  if (::chmod(path.c_str(), 0700) != 0) return sys_error(path);
  return {};
}

/// `fd` when it is a regular file; else -1 with errno EINVAL (`fd` closed), or open's errno.
int only_regular(int fd) {
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}

/// A file of a session directory, opened to read: a FIFO someone planted would wait for a
/// writer forever, holding the whole restore.
int open_regular(int dirfd, const std::string& name) {
  return only_regular(::openat(dirfd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
}

/// A session directory's JSONL file, opened to append (made if missing). A FIFO planted in its
/// place would hold the writing thread, and the store's lock with it, until someone read it.
/// Read and write: an append looks at the last byte first (ends_a_line).
int open_append(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  return only_regular(fd);  // (O_RDWR opens a FIFO without waiting; it is refused here)
}

std::string open_error(const std::string& name) {
  // O_NOFOLLOW's ELOOP is a link at the name itself, as the session directory's check words it.
  return name + ": " + (errno == EINVAL   ? std::string("not a regular file")
                        : errno == ELOOP ? std::string("a symbolic link, not followed")
                                         : std::strerror(errno));
}

/// The blocks of one agent: whole lines, without an incomplete or torn last line; `cut` is set to the
/// length the file must be cut to (done by the caller once the whole session loaded).
p9::Status load_blocks(int dirfd, const std::string& agent_id, std::vector<std::string>& lines,
                       std::optional<off_t>& cut) {
  std::string name = agent_id + ".blocks.jsonl";
  Fd fd(open_regular(dirfd, name));
  if (!fd) {
    if (errno == ENOENT) return {};
    return p9::error(open_error(name));
  }
  std::string data;
  if (!read_all(fd.fd, data)) return sys_error(name);
  std::size_t keep = data.size();
  if (!data.empty() && data.back() != '\n') {
    keep = data.rfind('\n');
    keep = keep == std::string::npos ? 0 : keep + 1;
    // A line whose newline alone never reached the disk is a whole block: a block's line is one
    // JSON object, and no cut of an object parses. It stays; the next append starts a line of
    // its own (ends_a_line).
    if (nlohmann::json::accept(std::string_view(data).substr(keep))) keep = data.size();
  } else if (!data.empty()) {
    std::size_t start = data.rfind('\n', data.size() - 2);
    start = start == std::string::npos ? 0 : start + 1;
    // A torn page: the line ended, but bytes of it never reached the disk (zeros). Any other
    // line that is not JSON is no crash's doing: kept, and skipped like one in the middle.
    std::string_view last(data.data() + start, data.size() - 1 - start);
    if (last.find('\0') != std::string_view::npos && !nlohmann::json::accept(last)) keep = start;
  }
  if (keep < data.size()) {
    cut = static_cast<off_t>(keep);
    data.resize(keep);
  }
  std::size_t pos = 0;
  while (pos < data.size()) {
    auto nl = std::min(data.find('\n', pos), data.size());
    if (nl > pos) lines.emplace_back(data, pos, nl - pos);
    pos = nl + 1;
  }
  return {};
}

std::atomic<std::uint64_t> temp_counter{0};

}  // namespace

struct Store::MessageTexts {
  std::map<std::string, std::vector<std::pair<HistoryMessage, std::string>>> agents;  // by agent id
  std::atomic<bool> named{false};  ///< session.json is renamed in and its directory synced since
};

namespace {

/// The text of session.json: ojson's dump(1) of the whole record, built from the session and
/// agent fields dumped by ojson and each agent's messages spliced in as their texts. A message
/// equal to the one at its index in `last` reuses that text; `now` gets every message's text.
std::string session_text(const SessionRecord& s, Store::MessageTexts* last, Store::MessageTexts& now) {
  ojson j = ojson::object();
  j["id"] = s.id;
  j["name"] = s.name;
  j["cwd"] = s.cwd;
  j["remote"] = s.remote;
  j["backend"] = s.backend;
  j["model"] = s.model;
  ojson env = ojson::object();
  for (const auto& [k, v] : s.env) env[k] = v;
  j["env"] = std::move(env);
  j["goal"] = s.goal;
  j["bypass"] = s.bypass;
  j["bypassCounter"] = s.bypass_counter;
  ojson agents = ojson::array();
  for (const auto& a : s.agents) agents.push_back(agent_json(a));
  j["agents"] = std::move(agents);
  const std::string frame = j.dump(1, ' ', false, replace);
  // Each agent's (empty) messages member, in agent order: a member of an agent object sits at
  // three spaces at the start of a line, where nothing else does (params' members sit deeper).
  static constexpr std::string_view slot = "\n   \"messages\": []";
  std::string out;
  out.reserve(frame.size() + 1);
  std::size_t from = 0;
  for (const auto& a : s.agents) {
    const std::size_t at = frame.find(slot, from);
    if (at == std::string::npos) {  // not the layout expected: the whole record through ojson
      for (std::size_t i = 0; i < s.agents.size(); i++) j["agents"][i]["messages"] = messages_json(s.agents[i].messages);
      now.agents.clear();
      return j.dump(1, ' ', false, replace) + "\n";
    }
    out.append(frame, from, at + slot.size() - 2 - from);
    from = at + slot.size();
    std::vector<std::pair<HistoryMessage, std::string>> before, texts;
    if (last)
      if (auto it = last->agents.find(a.id); it != last->agents.end()) {
        before = std::move(it->second);
        last->agents.erase(it);
      }
    texts.reserve(a.messages.size());
    for (std::size_t i = 0; i < a.messages.size(); i++) {
      if (i < before.size() && same_message(before[i].first, a.messages[i]))
        texts.push_back(std::move(before[i]));
      else
        texts.emplace_back(a.messages[i], message_text(a.messages[i]));
    }
    if (texts.empty()) {
      out += "[]";
    } else {
      out += "[\n";
      for (std::size_t i = 0; i < texts.size(); i++) {
        if (i) out += ",\n";
        out.append(4, ' ');
        out += texts[i].second;
      }
      out += "\n   ]";
    }
    now.agents[a.id] = std::move(texts);
  }
  out.append(frame, from);
  out += '\n';
  return out;
}

}  // namespace

std::string to_json(const SessionRecord& s) {
  Store::MessageTexts texts;
  return session_text(s, nullptr, texts);
}

p9::Result<SessionRecord> parse_session(std::string_view text) {
  // Arguments and reasoning items are dumped back to text: a file nested past what olliesrv ever
  // writes (the engine's 128 levels under the session's own 7) would overflow the stack.
  if (backend::too_deep(text, 512)) return p9::error("session.json: nested deeper than 512 levels");
  auto j = ojson::parse(text, nullptr, false);
  if (j.is_discarded()) {  // parsed again for where: "parse error at line 3, column 7: …", no byte of the file
    try {
      [[maybe_unused]] const auto again = ojson::parse(text);
    } catch (const std::exception& e) {
      return p9::error("session.json: " + toolsrv::parse_error_text(e.what()));
    }
    return p9::error("session.json: invalid json");
  }
  SessionRecord s;
  Parser p;
  if (!p.session(j, s)) return p9::error("session.json: " + p.err);
  return s;
}

Store::Store(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

p9::Status Store::save(const SessionRecord& s) {
  if (!plain_component(s.id)) return p9::error("invalid session id: " + s.id.substr(0, 64));
  std::string dir = root_ + "/" + s.id;
  if (auto st = make_dirs(dir); !st) return st;
  std::shared_ptr<MessageTexts> last;
  {
    std::lock_guard lk(texts_mu_);
    if (auto it = texts_.find(s.id); it != texts_.end()) {
      last = std::move(it->second);  // taken: a save of the same session at once starts afresh
      texts_.erase(it);
    }
  }
  // Once this process has renamed a session.json in and synced its directory, a rename over it
  // needs no fsync of the directory: a crash of the machine keeps one of the two texts, each
  // whole and fsynced, under the name. The first save of each run syncs the directory.
  const bool sync_dir = !last || !last->named;
  auto now = std::make_shared<MessageTexts>();
  std::string text = session_text(s, last.get(), *now);
  last.reset();
  if (text.size() > max_session_json)
    return p9::error("session.json would be " + std::to_string(text.size()) + " bytes, more than a restore reads (" +
                     std::to_string(max_session_json >> 20) + " MiB)");
  {
    std::lock_guard lk(texts_mu_);
    texts_[s.id] = now;
  }
  std::string tmp = dir + "/.session.json.tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(temp_counter.fetch_add(1));
  std::string final_path = dir + "/session.json";
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return sys_error(tmp);
    bool ok = ::fchmod(fd.fd, 0600) == 0 && write_all(fd.fd, text) && ::fsync(fd.fd) == 0;
    if (!ok) {
      auto e = sys_error(tmp);
      ::unlink(tmp.c_str());
      return e;
    }
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    auto e = sys_error(final_path);
    ::unlink(tmp.c_str());
    return e;
  }
  if (sync_dir) {
    Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!d || ::fsync(d.fd) != 0) return sys_error(dir);
  }
  now->named = true;
  return {};
}

/// An agent's open blocks.jsonl.
struct Store::HeldBlocks {
  std::string session_id, agent_id;
  Fd fd;
  bool torn = false;  ///< an append failed: the file may end inside a line
};

namespace {

/// True when the file is empty or ends with a newline. An append that failed (a full disk)
/// may have left part of its line; the next line must not be glued to it, or the restore would
/// skip both (§7.7 cuts only an incomplete last line).
bool ends_a_line(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) return true;
  char last = 0;
  return ::pread(fd, &last, 1, st.st_size - 1) == 1 && last == '\n';
}

}  // namespace

Store::~Store() = default;

p9::Status Store::append_block(const std::string& session_id, const std::string& agent_id, std::string_view line) {
  if (!plain_component(session_id)) return p9::error("invalid session id: " + session_id.substr(0, 64));
  if (!plain_component(agent_id)) return p9::error("invalid agent id: " + agent_id.substr(0, 64));
  if (line.find('\n') != std::string_view::npos) return p9::error("block line contains a newline");
  std::string buf;
  buf.reserve(line.size() + 1);
  buf.append(line).push_back('\n');
  std::string dir = root_ + "/" + session_id;
  std::string path = dir + "/" + agent_id + ".blocks.jsonl";
  std::lock_guard lk(held_mu_);
  auto it = std::find_if(held_.begin(), held_.end(),
                         [&](const auto& h) { return h->agent_id == agent_id && h->session_id == session_id; });
  if (it != held_.end()) {
    struct stat st {};
    if (::fstat((*it)->fd.fd, &st) == 0 && st.st_nlink > 0) {  // not removed since it was opened
      std::rotate(it, it + 1, held_.end());
      auto& h = *held_.back();
      if (h.torn && !ends_a_line(h.fd.fd)) buf.insert(buf.begin(), '\n');  // the torn part a line of its own
      h.torn = !write_all(h.fd.fd, buf);
      if (h.torn) return sys_error(path);
      return {};
    }
    held_.erase(it);
  }
  Fd fd(open_append(path));
  if (!fd && errno == ENOENT) {  // the session's directory is made by its first save; this is before it
    if (auto st = make_dirs(dir); !st) return st;
    fd.fd = open_append(path);
  }
  if (!fd) return p9::error(open_error(path));
  if (::fchmod(fd.fd, 0600) != 0) return sys_error(path);
  if (!ends_a_line(fd.fd)) buf.insert(buf.begin(), '\n');
  if (!write_all(fd.fd, buf)) return sys_error(path);  // closed: the next open looks at its end
  if (held_.size() >= held_max) held_.erase(held_.begin());
  held_.push_back(std::unique_ptr<HeldBlocks>(new HeldBlocks{session_id, agent_id, Fd(std::exchange(fd.fd, -1))}));
  return {};
}

void Store::drop_held(const std::string& session_id, const std::string* agent_id) {
  std::lock_guard lk(held_mu_);
  std::erase_if(held_, [&](const auto& h) { return h->session_id == session_id && (!agent_id || h->agent_id == *agent_id); });
}

p9::Status Store::append_compaction(const std::string& session_id, const std::string& agent_id,
                                    const std::vector<HistoryMessage>& messages) {
  if (!plain_component(session_id)) return p9::error("invalid session id: " + session_id.substr(0, 64));
  if (!plain_component(agent_id)) return p9::error("invalid agent id: " + agent_id.substr(0, 64));
  std::string dir = root_ + "/" + session_id;
  if (auto st = make_dirs(dir); !st) return st;
  ojson j = ojson::object();
  j["time"] = static_cast<std::int64_t>(std::time(nullptr));
  j["messages"] = messages_json(messages);
  std::string buf = j.dump(-1, ' ', false, replace) + "\n";
  std::string path = dir + "/" + agent_id + ".compaction.jsonl";
  Fd fd(open_append(path));
  if (!fd) return p9::error(open_error(path));
  if (::fchmod(fd.fd, 0600) != 0 || !write_all(fd.fd, buf)) return sys_error(path);
  return {};
}

p9::Status Store::remove_session(const std::string& session_id) {
  if (!plain_component(session_id)) return p9::error("invalid session id: " + session_id.substr(0, 64));
  {
    std::lock_guard lk(texts_mu_);
    texts_.erase(session_id);
  }
  drop_held(session_id, nullptr);
  // Out of the restore's sight in one step first (the rename made durable): a kill -9 halfway
  // through the removal must not leave a directory every start tries to restore without its
  // session.json; the next start removes what is left (load_all).
  std::string dir = root_ + "/" + session_id;
  const std::string gone = root_ + "/." + session_id + killed_suffix;
  if (::rename(dir.c_str(), gone.c_str()) == 0) {
    dir = gone;
    if (Fd root(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); root) (void)::fsync(root.fd);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return p9::error(session_id + ": " + ec.message());
  return {};
}

p9::Status Store::mark_killed(const std::string& session_id, const std::string& agent_id) {
  if (!plain_component(session_id)) return p9::error("invalid session id: " + session_id.substr(0, 64));
  if (!plain_component(agent_id)) return p9::error("invalid agent id: " + agent_id.substr(0, 64));
  const std::string path = root_ + "/" + session_id + "/" + agent_id + killed_mark;
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (!fd && errno != ENOENT) return sys_error(path);  // ENOENT: no directory, nothing to mark
  return {};
}

p9::Status Store::remove_agent(const std::string& session_id, const std::string& agent_id) {
  if (!plain_component(session_id)) return p9::error("invalid session id: " + session_id.substr(0, 64));
  if (!plain_component(agent_id)) return p9::error("invalid agent id: " + agent_id.substr(0, 64));
  drop_held(session_id, &agent_id);
  for (const char* suffix : agent_files) {
    std::string path = root_ + "/" + session_id + "/" + agent_id + suffix;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return sys_error(path);
  }
  const std::string mark = root_ + "/" + session_id + "/" + agent_id + killed_mark;  // last: the kill is done
  if (::unlink(mark.c_str()) != 0 && errno != ENOENT) return sys_error(mark);
  return {};
}

namespace {

// Whether a session directory holds nothing but the temp files of a first save (or nothing at
// all): what a kill -9 between session/new's mkdir and its rename leaves.
bool only_first_save(int dirfd) {
  DIR* d = ::fdopendir(::dup(dirfd));
  if (!d) return false;
  bool only = true;
  while (auto* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    if (!n.starts_with(".session.json.tmp.")) only = false;
  }
  ::closedir(d);
  return only;
}

}  // namespace

std::vector<LoadedSession> Store::load_all(std::vector<std::string>* skipped) const {
  std::vector<LoadedSession> out;
  Fd root(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) {
    if (errno != ENOENT) spdlog::error("{}: {}", root_, std::strerror(errno));
    return out;
  }
  std::vector<std::string> names, killed;
  {
    DIR* d = ::fdopendir(::dup(root.fd));
    if (!d) {
      spdlog::error("{}: {}", root_, std::strerror(errno));
      return out;
    }
    while (auto* e = ::readdir(d)) {
      if (std::string_view n = e->d_name;
          n.starts_with('.') && n.ends_with(killed_suffix) && looks_like_uuid(n.substr(1, n.size() - 1 - std::strlen(killed_suffix))))
        killed.emplace_back(n);
      if (e->d_name[0] == '.') continue;
      if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN && e->d_type != DT_LNK) continue;
      names.emplace_back(e->d_name);  // a symbolic link is named and skipped below, not followed
    }
    ::closedir(d);
  }
  for (const auto& k : killed) {  // a kill a crash cut short (remove_session)
    spdlog::warn("{}/{}: removing what a session kill left", root_, k);
    std::error_code ec;
    std::filesystem::remove_all(root_ + "/" + k, ec);
  }
  std::sort(names.begin(), names.end());
  out.reserve(names.size());  // no copies as it grows (a LoadedSession's move may throw)
  auto skip = [&](const std::string& name, const std::string& reason) {
    spdlog::warn("session {}: not restored: {}", name, reason);
    if (skipped) skipped->push_back(name + ": " + reason);
  };
  std::string text;
  for (const auto& name : names) {
    Fd dir(::openat(root.fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!dir) {
      const int e = errno;
      struct stat st {};
      if (::fstatat(root.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        skip(name, "a symbolic link, not followed");
      else if (e != ENOTDIR)
        skip(name, std::strerror(e));
      continue;
    }
    {
      Fd f(open_regular(dir.fd, "session.json"));
      const int open_errno = errno;
      if (!f && open_errno == ENOENT && looks_like_uuid(name) && only_first_save(dir.fd)) {
        // A session/new a crash cut short: nobody was told the session exists, and no later
        // start should keep saying it cannot be restored.
        spdlog::warn("session {}: removing what a session/new cut short left (no session.json was ever saved)", name);
        std::error_code ec;
        std::filesystem::remove_all(root_ + "/" + name, ec);
        continue;
      }
      if (!f) {
        errno = open_errno;
        skip(name, open_error("session.json"));
        continue;
      }
      // A file no save makes (the history is compacted long before) is not read whole into
      // memory while every client waits for the restore.
      if (struct stat st {}; ::fstat(f.fd, &st) == 0 && st.st_size > static_cast<off_t>(max_session_json)) {
        skip(name, "session.json: too large (" + std::to_string(st.st_size) + " bytes)");
        continue;
      }
      if (!read_all(f.fd, text)) {
        skip(name, std::string("session.json: ") + std::strerror(errno));
        continue;
      }
    }
    auto rec = parse_session(text);
    if (!rec) {
      skip(name, rec.ename());
      continue;
    }
    if (rec->id != name) {
      skip(name, "session.json: id differs from the directory name");
      continue;
    }
    LoadedSession ls;
    ls.record = std::move(*rec);
    bool ok = true;
    for (auto& a : ls.record.agents) {
      if (!plain_component(a.id)) {
        skip(name, "invalid agent id: " + a.id.substr(0, 64));
        ok = false;
        break;
      }
      std::optional<off_t> cut;
      if (auto st = load_blocks(dir.fd, a.id, ls.blocks[a.id], cut); !st) {
        skip(name, st.ename());
        ok = false;
        break;
      }
      if (cut) ls.torn.emplace_back(a.id + ".blocks.jsonl", *cut);
    }
    if (!ok) continue;
    for (auto& a : ls.record.agents) drop_unanswered(a.messages);
    out.push_back(std::move(ls));
  }
  return out;
}

void Store::settle(const LoadedSession& ls) const {
  const std::string& name = ls.record.id;
  Fd dir(::open((root_ + "/" + name).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!dir) return;
  if (::fchmod(dir.fd, 0700) != 0) spdlog::error("session {}: chmod: {}", name, std::strerror(errno));
  if (DIR* d = ::fdopendir(::dup(dir.fd))) {
    // Temp files of saves a crash cut short, and the kills a crash cut short: an agent kill marks
    // the agent's files, saves the session, then removes them with the mark (Store::mark_killed).
    // A mark whose agent the session still has is a kill cut before its save: the agent is back.
    // Files of an agent the session does not have and no mark names are kept: a hand edit of
    // session.json dropped it, and they may be all that is left of its work. Only names olliesrv
    // makes: `<agent id>.blocks.jsonl`, not a copy someone put beside them.
    std::set<std::string> agents, marked, orphans;
    for (const auto& a : ls.record.agents) agents.insert(a.id);
    std::vector<std::string> names;
    while (auto* e = ::readdir(d)) names.emplace_back(e->d_name);
    ::closedir(d);
    for (std::string_view n : names) {
      struct stat st {};  // a mark is a file mark_killed made: a directory of that name is someone's
      if (const auto id = n.substr(0, n.size() - std::string_view(killed_mark).size());
          n.ends_with(killed_mark) && looks_like_uuid(id) && ::fstatat(dir.fd, std::string(n).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISREG(st.st_mode))
        marked.emplace(id);
    }
    std::vector<std::pair<std::string, const char*>> stale;
    for (std::string_view n : names) {
      if (n.starts_with(".session.json.tmp.")) stale.emplace_back(n, "left by a save cut short");
      for (std::string_view suffix : agent_files) {
        const std::string id(n.substr(0, n.size() - suffix.size()));
        if (!n.ends_with(suffix) || !looks_like_uuid(id) || agents.contains(id)) continue;
        if (marked.contains(id)) stale.emplace_back(n, "of an agent whose kill a stop cut short");
        else orphans.emplace(n);
      }
    }
    for (const auto& id : marked) stale.emplace_back(id + killed_mark, agents.contains(id) ? "a kill cut short before its save: the agent stays"
                                                                                           : "the kill's mark");
    for (const auto& [t, why] : stale) {
      if (::unlinkat(dir.fd, t.c_str(), 0) == 0) spdlog::warn("session {}: removed {}, {}", name, t, why);
      else spdlog::warn("session {}: cannot remove {} ({}): {}", name, t, why, std::strerror(errno));
    }
    for (const auto& t : orphans)
      spdlog::warn("session {}: keeping {}: of an agent session.json does not have (put it back there to restore it)", name, t);
  }
  for (const auto& [file, len] : ls.torn) {
    spdlog::warn("session {}: {}: cutting off an incomplete or torn last line", name, file);
    Fd w(::openat(dir.fd, file.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!w || ::ftruncate(w.fd, len) != 0)
      spdlog::error("session {}: {}: cannot cut: {}", name, file, std::strerror(errno));
  }
}

}  // namespace ollie
