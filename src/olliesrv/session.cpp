#include "session.hpp"

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "agent.hpp"
#include "hub.hpp"
#include "lib9p/dirs.hpp"

namespace ollie {

/// Owned by its wait's handler alone, so a session never holds a timer of an I/O thread.
struct Session::SaveTimer {
  asio::steady_timer t;
};

Session::Session(Hub& h, std::string sid, std::string dir, std::string where)
    : hub(h), id(std::move(sid)), cwd(std::move(dir)), ex(h.next_executor()), remote(std::move(where)) {
  ToolHost::Config c{id, cwd, hub.toolsrv, hub.config_root, remote, {}, {}};
  c.secret_vars = [&hub = hub] {
    const auto vars = backend::secret_variables(hub.conf());
    return std::vector<std::string>(vars.begin(), vars.end());
  };
  if (!remote.empty())
    c.listen_forward = [&hub = hub, sid = id](const std::string& path) {
      return hub.listen_forward ? hub.listen_forward(sid, path) : p9::Status(p9::error("no forwarded socket here"));
    };
  if (remote.empty()) {  // a remote one's start is a bootstrap over ssh: it stays while the session does
    c.idle = hub.toolsrv_idle;
    c.busy = [&hub = hub, sid = id] {
      auto s = hub.find(sid);
      if (!s) return false;
      const auto live = s->host->live_instance();  // an earlier instance's pids hold nothing
      for (const auto& a : s->agents()) {
        if (a->state() != "idle") return true;
        std::lock_guard lock(a->mu);
        for (const auto& [pid, p] : a->procs)
          if (p->instance == live) return true;
      }
      return false;
    };
  }
  c.dropped = [&hub = hub, sid = id](const std::string& agent, const std::string& tool, const std::string& why) {
    auto s = hub.find(sid);
    auto a = s ? s->find(agent) : nullptr;
    if (!a) return;
    {
      std::lock_guard lock(a->mu);
      std::erase(a->tools, tool);
    }
    a->note("info", "tool " + tool + " not loaded again: " + why);
    s->save_soon();
  };
  host = ToolHost::make(ex, std::move(c));
}

std::shared_ptr<Agent> Session::find(const std::string& key) const {
  std::lock_guard lock(mu);
  for (const auto& [aid, a] : agents_) {
    if (hidden_.count(aid)) continue;
    std::lock_guard al(a->mu);
    if (a->name == key) return a;
  }
  auto it = agents_.find(key);
  return it == agents_.end() || hidden_.count(key) ? nullptr : it->second;
}

void Session::drop_results(const Agent* except) const {
  for (const auto& a : agents())
    if (a.get() != except) {
      std::lock_guard lock(a->mu);
      a->results_epoch++;
    }
}

std::vector<std::shared_ptr<Agent>> Session::agents() const {
  std::vector<std::pair<std::string, std::shared_ptr<Agent>>> v;
  {
    std::lock_guard lock(mu);
    for (const auto& [aid, a] : agents_) {
      if (hidden_.count(aid)) continue;
      std::lock_guard al(a->mu);
      v.emplace_back(a->name, a);
    }
  }
  std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::shared_ptr<Agent>> out;
  for (auto& [n, a] : v) out.push_back(std::move(a));
  return out;
}

p9::Status Session::add(std::shared_ptr<Agent> a, bool shown) {
  std::lock_guard lock(mu);
  if (killed) return p9::error("session killed");
  std::string n;
  {
    std::lock_guard al(a->mu);
    n = a->name;
  }
  for (const auto& [aid, other] : agents_) {
    std::lock_guard al(other->mu);
    if (other->name == n) return p9::error("agent already exists: " + n);
  }
  // A new one (restored ones are all taken): a tool creating agents in a loop would make every
  // toolsrv start sync them all, and hold their memory.
  if (!shown && agents_.size() >= max_agents)
    return p9::error("too many agents: at most " + std::to_string(max_agents) + " in a session");
  if (!shown) hidden_.insert(a->id);
  agents_[a->id] = std::move(a);
  return {};
}

bool Session::show(const std::string& agent_id) {
  std::lock_guard lock(mu);
  if (killed || !agents_.count(agent_id)) return false;
  hidden_.erase(agent_id);
  return true;
}

bool Session::remove(const std::string& agent_id) {
  std::lock_guard lock(mu);
  const bool shown = agents_.erase(agent_id) > 0 && hidden_.count(agent_id) == 0;
  hidden_.erase(agent_id);
  return shown;
}

p9::Status Session::rename_agent(const std::shared_ptr<Agent>& a, const std::string& n) {
  std::lock_guard lock(mu);
  for (const auto& [aid, other] : agents_) {
    if (other == a) continue;
    std::lock_guard al(other->mu);
    if (other->name == n) return p9::error("agent already exists: " + n);
  }
  std::lock_guard al(a->mu);
  a->name = n;
  a->name_changed = std::time(nullptr);
  return {};
}

SessionRecord Session::record() const {
  SessionRecord r;
  std::vector<std::shared_ptr<Agent>> list;
  {
    std::lock_guard lock(mu);
    r.id = id;
    r.name = name;
    r.cwd = cwd;
    r.remote = remote;
    r.backend = backend;
    r.model = model;
    r.env = env;
    r.goal = goal;
    r.bypass = bypass;
    r.bypass_counter = bypass_counter;
    for (const auto& [aid, a] : agents_)
      if (!a->subagent && !hidden_.count(aid)) list.push_back(a);  // sub-agents are never persisted (§7.7)
  }
  for (const auto& a : list) r.agents.push_back(a->record());
  return r;
}

p9::Status Session::save() const {
  std::lock_guard writing(save_mu_);
  {
    std::lock_guard lock(mu);
    if (killed) return {};
  }
  auto st = hub.store.save(record());
  if (!st) spdlog::error("session {}: save: {}", id, st.ename());
  return st;
}

void Session::save_soon(bool spaced) {
  std::lock_guard lock(mu);
  if (killed) return;
  if (save_pending_) {
    if (auto w = save_wait_.lock(); w && !spaced) w->t.cancel();  // its handler writes now
    return;
  }
  save_pending_ = true;
  const auto due = last_write_ + save_spacing;
  if (spaced && due > std::chrono::steady_clock::now()) {
    auto w = std::make_shared<SaveTimer>(SaveTimer{asio::steady_timer(ex, due)});
    save_wait_ = w;
    w->t.async_wait([self = shared_from_this(), w](std::error_code) {
      asio::post(self->hub.blocking, [self] { self->write_pending(); });
    });
    return;
  }
  asio::post(hub.blocking, [self = shared_from_this()] { self->write_pending(); });
}

void Session::write_pending() {
  {
    std::lock_guard lock(mu);
    save_pending_ = false;
    last_write_ = std::chrono::steady_clock::now();
  }
  (void)save();
}

bool Session::kill() {
  std::vector<std::pair<std::shared_ptr<Agent>, bool>> list;  // and whether it was shown
  {
    std::lock_guard lock(mu);
    if (killed) return false;
    killed = true;
    for (const auto& [aid, a] : agents_) list.emplace_back(a, hidden_.count(aid) == 0);
  }
  for (const auto& [a, shown] : list) {
    a->kill();
    if (shown) hub.bus.publish("agent." + a->id + ".kill", "session/" + current_name() + "/agent/" + a->current_name());
  }
  host->stop();
  if (!remote.empty() && hub.unlisten_forward) hub.unlisten_forward(id);
  return true;
}

namespace {

// Removes what lies below the directory `dir` refers to, never following a symlink: the tools
// that wrote it may still run (a setsid descendant outlives its call) and swap a directory for a
// symlink to $HOME between a look and a removal. Each step goes through a descriptor opened
// O_NOFOLLOW; a swapped name at worst loses the symlink itself.
void remove_below(int dir, int depth) {
  if (depth > 1024) return;  // a descriptor held per level: bounded
  const int listing = ::dup(dir);
  DIR* d = listing < 0 ? nullptr : ::fdopendir(listing);
  if (!d) {
    if (listing >= 0) ::close(listing);
    return;
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (std::string_view n = e->d_name; n != "." && n != "..") names.emplace_back(n);
  ::closedir(d);
  for (const auto& n : names) {
    const int sub = ::openat(dir, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      (void)::unlinkat(dir, n.c_str(), 0);
      continue;
    }
    remove_below(sub, depth + 1);
    ::close(sub);
    (void)::unlinkat(dir, n.c_str(), AT_REMOVEDIR);
  }
}

}  // namespace

void Session::remove_files() {
  std::lock_guard writing(save_mu_);  // a save under way ends first; later ones see `killed`
  if (auto st = hub.store.remove_session(id); !st) spdlog::error("session {}: remove: {}", id, st.ename());
  bool local;
  {
    std::lock_guard lock(mu);
    local = remote.empty();
  }
  // Its tools' private TMPDIR (§6.1), kept across toolsrv restarts for the session's life: what
  // they left there (files, sockets, symlinks) goes with the session. A remote one's is there.
  if (!local) return;
  const std::string tmp = p9::runtime_root(hub.env) + "/tmp";
  const int parent = ::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (parent < 0) return;
  const int own = ::openat(parent, id.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (own >= 0) {
    remove_below(own, 0);
    ::close(own);
  }
  if (::unlinkat(parent, id.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
    spdlog::warn("session {}: {}/{}: {}", id, tmp, id, std::strerror(errno));
  ::close(parent);
}

}  // namespace ollie
