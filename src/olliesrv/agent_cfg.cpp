#include "agent_cfg.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "agent.hpp"
#include "compaction.hpp"
#include "hub.hpp"
#include "ids.hpp"
#include "lifecycle.hpp"
#include "off_io.hpp"
#include "session.hpp"

namespace ollie {

namespace {

using json = nlohmann::json;

/// The system prompt renders again before the next request and for `ctl systemprompt` (§7.6).
void render_again(Agent& a) {
  std::lock_guard lock(a.mu);
  a.render_due = true;
}

/// §8.1.4: every tool unloaded, the profile's autoLoad loaded one by one (a name that cannot be
/// loaded is an `info` warning), the prompt entries resolved, the history cleared.
asio::awaitable<void> switch_tools_and_prompts(const std::shared_ptr<Session>& s,
                                               const std::shared_ptr<Agent>& a, const Profile& p) {
  std::vector<std::string> old;
  if (auto r = co_await s->host->tools(a->id)) {
    for (const auto& t : *r) old.push_back(t.name);
  } else {
    std::lock_guard lock(a->mu);
    old = a->tools;
  }
  if (!old.empty()) (void)co_await s->host->unload(a->id, old);
  co_await load_profile_tools(s, a, p);
  co_await a->resolve_prompts();
  a->clear();
}

}  // namespace

asio::awaitable<void> load_profile_tools(std::shared_ptr<Session> s, std::shared_ptr<Agent> a, const Profile& p) {
  // A tool toolsrv refused is not the agent's; one it could not be asked about (none could start,
  // or it was lost) is, and toolsrv's next start loads it (§6.1), as it does a restored agent's.
  // Wished at once: the next load may start a new toolsrv, and its sync must hold this one.
  std::vector<std::string> loaded;
  for (const auto& t : p.auto_load) {
    auto st = co_await s->host->load(a->id, std::vector<std::string>(1, t));
    if (!st) a->note("info", "autoLoad " + t + ": " + st.ename());
    const bool unasked = !st && ToolHost::unreachable(st.ename());
    if (st || unasked) loaded.push_back(t);
    if (unasked) s->host->want_tools(a->id, loaded);
  }
  {
    std::lock_guard lock(a->mu);
    a->tools = loaded;
  }
  for (const auto& w : p.warnings) a->note("info", w);
}

Hold::Hold(Agent& a, bool stoppable) : ok(a.hold(stoppable)), a_(a) {}

Hold::~Hold() {
  if (ok) a_.release();
}

asio::awaitable<p9::Result<Profile>> read_profile(Hub& hub, std::string name) {
  auto load = [root = hub.config_root, name] { return load_profile(root, name); };
  auto p = co_await off_io<p9::Result<Profile>>(hub, load);
  // An Rerror holds 127 bytes (§1.8: longer details go to the log); a JSON error is often longer.
  if (!p && p.ename().size() >= p9::ERRMAX) spdlog::warn("{}", p.ename());
  co_return p;
}

SettingsChange profile_switch(const Agent& a, Profile p) {
  SettingsChange c;
  std::string backend;
  {
    std::lock_guard lock(a.mu);
    backend = a.backend_name;
  }
  if (!p.backend.empty()) c.target = BackendChoice{p.backend, p.model};
  else if (!p.model.empty()) c.target = BackendChoice{backend, p.model};
  c.overrides = "{}";
  c.profile = std::move(p);
  return c;
}

p9::Result<std::string> cwd_argument(Hub& hub, const Session& s, const std::string& given) {
  if (bad_path(given)) return p9::error("cwd: invalid character");
  bool remote;
  {
    std::lock_guard lock(s.mu);
    remote = !s.remote.empty();
  }
  // `~` is this host's home: a remote session's tool host has its own, which its toolsrv's
  // resolve expands (as for agent/new there).
  std::string p = remote ? given : p9::expand_home(given, hub.env);
  const bool remote_home = remote && (p == "~" || p.rfind("~/", 0) == 0);
  if (p.empty() || (p[0] != '/' && !remote_home)) return p9::error("cwd must be absolute: " + given);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p == s.cwd ? std::string() : p;
}

asio::awaitable<p9::Status> apply_change(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a,
                                         SettingsChange c) {
  std::shared_ptr<backend::Backend> be;
  if (c.target) {
    if (auto st = check_backend(c.target->backend); !st) co_return st;
    auto build = [a, t = *c.target] { return a->build_backend(t.backend, t.model); };
    auto made = co_await off_io<p9::Result<std::shared_ptr<backend::Backend>>>(hub, build);
    if (!made) co_return made.error();
    be = std::move(*made);
  }
  if (c.cwd && !c.cwd->empty()) {
    // Resolved and checked on the tool host, where it is also set (§3.3: pushed to toolsrv as
    // agentcwd, which holds only a resolved directory: one replaced since is refused).
    std::vector<std::string> paths{*c.cwd, s->cwd};  // named: GCC 12 and co_await temporaries
    auto r = co_await s->host->resolve(a->id, std::move(paths));
    if (!r) co_return r.error();
    if (auto st = resolved_dir(r->front(), *c.cwd); !st) co_return st;
    // The session's cwd named another way (a symlink, `..`) is no override: the agent inherits.
    if (r->front() == r->back()) c.cwd->clear();
    else *c.cwd = r->front();
    if (!c.cwd->empty())
      if (auto st = co_await s->host->check_agent_cwd(a->id, *c.cwd); !st) co_return st;
  }
  // Nothing can fail from here on.
  {
    std::lock_guard lock(a->mu);
    a->cfg_changed = std::time(nullptr);
  }
  if (be) a->use_backend(c.target->backend, std::move(be));
  if (c.cwd) {
    {
      std::lock_guard lock(a->mu);
      a->cwd_override = *c.cwd;
    }
    if (c.cwd->empty()) s->host->set_agent_cwd(a->id, "");
  }
  if (c.overrides) {
    std::lock_guard lock(a->mu);
    a->overrides = *c.overrides;
  }
  if (c.profile) {
    {
      std::lock_guard lock(a->mu);
      a->profile = *c.profile;
    }
    co_await switch_tools_and_prompts(s, a, *c.profile);
  } else if (c.cwd) {
    // Prompt entries are resolved again at a cwd change (§7.5.1: `!` entries run in it).
    co_await a->resolve_prompts();
  }
  if (c.profile || c.cwd) render_again(*a);
  bool killed;  // meanwhile (its `!` entries are ended then): nothing to save or answer for
  {
    std::lock_guard lock(a->mu);
    killed = a->killed;
  }
  if (killed) co_return p9::Status(p9::error("agent killed"));
  if (auto st = co_await save_change(hub, s); !st) co_return st;
  if (c.target) (void)co_await Compaction::context_length(a, Compaction::ask_patience);  // `stats` shows the new model's window, as agent/new does
  co_return p9::Status{};
}

asio::awaitable<p9::Status> write_cfg(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a,
                                      std::string request) {
  Hold held(*a);  // §2.8.3: any write to a running agent's cfg is refused, a malformed one too
  if (!held.ok) co_return p9::error("cannot change cfg while agent is running");
  auto w = parse_cfg_write(request);
  if (!w) co_return w.error();
  Profile profile;
  std::string backend, model, cwd, overrides;
  {
    std::lock_guard lock(a->mu);
    profile = a->profile;
    backend = a->backend_name;
    model = a->model;
    cwd = a->cwd_override;
    overrides = a->overrides;
  }
  SettingsInput defaults;  // §4.3 without agent/new's keys: what an unset `backend=`/`model=` goes back to
  {
    std::lock_guard lock(s->mu);
    defaults.session_backend = s->backend;
    defaults.session_model = s->model;
  }
  SettingsChange c;
  // agent: a switch (§8.1.4) unless it names the current profile.
  if (w->profile) {
    const std::string name = w->profile->empty() ? "default" : *w->profile;
    if (name != profile.name) {
      auto p = co_await read_profile(hub, name);
      if (!p) co_return p.error();
      c = profile_switch(*a, *p);
      profile = std::move(*p);
      overrides = "{}";
      if (c.target) {
        backend = c.target->backend;
        model = c.target->model;
      }
    }
  }
  defaults.profile = &profile;
  // backend: its default model unless `model` is in the same write.
  if (w->backend) {
    std::string b = *w->backend, m;
    if (b.empty()) {
      auto choice = resolve_backend_choice(defaults, hub.conf(), hub.env);
      if (!choice) co_return choice.error();
      b = choice->backend;
      m = choice->model;
    }
    if (b != backend) {
      backend = b;
      model = m;
      c.target = BackendChoice{backend, model};
    }
  }
  if (w->model) {
    std::string m = *w->model;
    if (m.empty()) {
      SettingsInput in = defaults;
      in.backend = backend;
      auto choice = resolve_backend_choice(in, hub.conf(), hub.env);
      if (!choice) co_return choice.error();
      m = choice->model;
    }
    if (m != model) {
      model = m;
      c.target = BackendChoice{backend, model};
    }
  }
  if (w->cwd) {
    std::string d;
    if (!w->cwd->empty() && *w->cwd != "-") {  // `-` clears, as `ctl cwd -` (§2.8.3: the verb's behaviour)
      auto p = cwd_argument(hub, *s, *w->cwd);
      if (!p) co_return p.error();
      d = *p;
    }
    if (d != cwd) c.cwd = d;
  }
  if (!w->params.empty()) {
    json o = json::parse(overrides, nullptr, false);
    if (!o.is_object()) o = json::object();
    const json before = o;
    const json base = json::parse(profile.params, nullptr, false);
    for (const auto& [k, v] : w->params) {
      if (!v) {
        o.erase(k);
        continue;
      }
      auto value = json::parse(*v);
      // OP-70: the profile's own value written back (a whole `cfg` read and written) is no
      // change; pinned as an override, a later edit of the profile would no longer reach it.
      const bool profiles = !o.contains(k) && base.is_object() && base.contains(k) && base.at(k) == value;
      if (!profiles) o[k] = std::move(value);
    }
    if (o != before) c.overrides = o.dump();
  }
  co_return co_await apply_change(hub, s, a, std::move(c));
}

p9::Status set_agent_name(Hub& hub, const std::shared_ptr<Session>& s, const std::shared_ptr<Agent>& a,
                          const std::string& n) {
  if (!valid_name(n)) return p9::error(invalid_name(n));
  const std::string old = a->current_name();
  if (old == n) return {};
  if (auto st = s->rename_agent(a, n); !st) return st;
  const std::string sn = s->current_name();
  hub.bus.publish("agent." + a->id + ".rename", "session/" + sn + "/agent/" + old + " session/" + sn + "/agent/" + n);
  render_again(*a);  // the Environment section names the agent (§7.6)
  return {};
}

}  // namespace ollie
