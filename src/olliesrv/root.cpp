#include "root.hpp"

#include <spdlog/spdlog.h>

#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>
#include <sstream>
#include <tuple>

#include "agent.hpp"
#include "backend/config.hpp"
#include "backend/text.hpp"
#include "caches.hpp"
#include "hub.hpp"
#include "olliesrv.hpp"
#include "profile.hpp"
#include "session.hpp"
#include "lib9p/utf8.hpp"
#include "toolsrv/catalog.hpp"
#include "toolsrv/policy.hpp"
#include "virtfs/ctl.hpp"

namespace ollie {

namespace {

using D = virtfs::Dsl<Ctx>;
using Text = p9::Result<std::string>;
using Reply = asio::awaitable<Text>;

std::string lines(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

// ---- models (§2.1) -------------------------------------------------------------------------

Reply models(Ctx& c) {
  auto& hub = c.srv->hub();
  const auto& names = backend::backend_names();
  for (const auto& b : names) prefetch_models(hub, b);  // every backend asked at once
  std::string out;
  for (const auto& b : names) {
    auto listed = co_await backend_models(hub, b);
    if (!listed) continue;  // not configured, or it did not answer
    for (const auto& m : *listed) out += b + "\t" + m + "\n";
  }
  co_return out;
}

// ---- agents (§2.1, §7.5) ---------------------------------------------------------------------

Reply agents(Ctx& c) {
  auto& hub = c.srv->hub();
  Memo<std::string>::Load load = [root = hub.config_root]() -> Text { return lines(profile_names(root)); };
  co_return co_await hub.caches.agents.get(hub.blocking, std::move(load));
}

// ---- tools (§2.1, §7.2) ----------------------------------------------------------------------

/// The host as a sandboxed tool sees it (§6.6, §7.2.3), without a session: sandbox.yaml's `env`
/// allow-list of olliesrv's environment, PATH = the tool dirs, then that PATH's absolute entries.
toolsrv::HostFacts host_facts(const std::string& config_root, const p9::Env& env, const std::vector<std::string>& dirs) {
  toolsrv::HostFacts host;
  std::tie(host.os, host.arch) = toolsrv::host_os_arch();
  if (auto policy = toolsrv::load_policy(config_root + "/sandbox.yaml")) {
    for (const auto& name : toolsrv::effective_policy(*policy, nullptr).env)
      if (auto v = env(name)) host.env[name] = *v;
  }
  host.path = dirs;
  const auto it = host.env.find("PATH");
  std::stringstream in(it != host.env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin");
  for (std::string e; std::getline(in, e, ':');)
    if (!e.empty() && e.front() == '/') host.path.push_back(e);
  return host;
}

/// `name<TAB>scope<TAB>tier<TAB>description`, sorted; invalid tools `name - - invalid: <error>`.
std::string catalog(const std::string& config_root, const p9::Env& env) {
  std::vector<std::string> warnings;
  const auto dirs = toolsrv::tool_dirs(env("OLLIE_TOOLS_PATH").value_or(""), config_root, &warnings);
  for (const auto& w : warnings) spdlog::warn("tools: {}", w);
  std::string out;
  for (const auto& e : toolsrv::scan_tools(dirs, host_facts(config_root, env, dirs))) {
    if (e.tool)
      out += e.name + "\t" + std::string(toolsrv::scope_name(e.tool->scope)) + "\t" + e.tool->tier + "\t" +
             backend::one_line(e.tool->description) + "\n";
    else  // an invalid name is any file name: one line of UTF-8, as every text (§1.2)
      out += backend::one_line(p9::valid_utf8(e.name)) + "\t-\t-\tinvalid: " + backend::one_line(e.error) + "\n";
  }
  return out;
}

Reply tools(Ctx& c) {
  auto& hub = c.srv->hub();
  Memo<std::string>::Load load = [root = hub.config_root, env = hub.env]() -> Text { return catalog(root, env); };
  co_return co_await hub.caches.tools.get(hub.blocking, std::move(load));
}

// ---- ctl (§3.1) ------------------------------------------------------------------------------

using VerbFn = Reply (*)(Ctx&, const virtfs::Command&);

Reply invalidate_verb(Ctx& c, const virtfs::Command&) {
  co_await invalidate(c.srv->hub());
  co_return std::string("ok\n");
}

Reply kill_verb(Ctx& c, const virtfs::Command&) {
  c.srv->shutdown();  // the reply still goes out: connections close after their last write
  co_return std::string("ok\n");
}

constexpr virtfs::Verb<VerbFn> root_verbs[] = {
    {.name = "invalidate", .run = invalidate_verb},
    {.name = "kill", .run = kill_verb},
};

Reply root_ctl(Ctx& c, std::string request) {
  auto m = virtfs::match(root_verbs, request);
  if (!m) co_return m.error();
  co_return co_await m->verb->run(c, m->command);
}

}  // namespace

asio::awaitable<void> invalidate(Hub& hub) {
  auto work = [&hub]() -> asio::awaitable<void> {
    hub.reload_conf();
    hub.caches.drop();
    for (const auto& s : hub.sessions())
      for (const auto& a : s->agents()) {
        if (auto st = a->make_backend(); !st) {  // else make_backend reset the context length
          spdlog::warn("invalidate: agent {}: {}", a->id, st.ename());
          std::lock_guard lock(a->mu);
          a->stats.context_length = 0;  // asked again at the next request
        }
      }
    co_return;
  };
  co_await asio::co_spawn(hub.blocking, work, asio::use_awaitable);
}

std::vector<virtfs::Node<Ctx>> root_files() {
  using namespace virtfs;
  std::vector<Node<Ctx>> files;
  files.push_back(D::Leaf("backends", Mode{0444}, Doc{"the supported backends, one per line"},
                          Read([](Ctx&) { return Text(lines(backend::backend_names())); })));
  files.push_back(D::Leaf("models", Mode{0444}, Doc{"backend<TAB>model of every configured backend; cached until ctl invalidate"},
                          Read(models)));
  files.push_back(D::Leaf("agents", Mode{0444}, Doc{"the agent profiles, one per line"}, Read(agents)));
  files.push_back(D::Leaf("tools", Mode{0444}, Doc{"the tool catalog: name<TAB>scope<TAB>tier<TAB>description"},
                          Read(tools)));
  files.push_back(D::Leaf("help", Mode{0444}, Doc{"this list: path, kind, mode and doc of every file"},
                          Read([](Ctx& c) { return Text(c.srv->help()); })));
  files.push_back(D::Leaf("ctl", Mode{0600}, Doc{"server control; verbs: invalidate kill"}, Rdwr(root_ctl)));
  return files;
}

}  // namespace ollie
