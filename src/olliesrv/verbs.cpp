#include "verbs.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "backend/config.hpp"
#include "backend/text.hpp"
#include "hub.hpp"
#include "ids.hpp"
#include "lifecycle.hpp"
#include "result.hpp"
#include "session.hpp"
#include "settings.hpp"
#include "virtfs/ctl.hpp"

namespace ollie {

namespace {

using Reply = asio::awaitable<p9::Result<std::string>>;

// ---- session ctl (§3.2) ------------------------------------------------------------------------

struct SessionCall {
  Hub& hub;
  std::shared_ptr<Session> s;
};

Reply session_kill(SessionCall& c, const virtfs::Command&) {
  kill_session(c.hub, c.s);
  co_return std::string("killed\n");
}

Reply session_save(SessionCall& c, const virtfs::Command&) {
  if (auto st = c.s->save(); !st) co_return p9::error("save: " + st.ename());
  co_return std::string("saved\n");
}

constexpr virtfs::Verb<Reply (*)(SessionCall&, const virtfs::Command&)> session_verbs[] = {
    {.name = "kill", .run = session_kill},
    {.name = "save", .run = session_save},
};

// ---- agent ctl (§3.3) --------------------------------------------------------------------------

struct AgentCall {
  Hub& hub;
  std::shared_ptr<Session> s;
  std::shared_ptr<Agent> a;
};

Reply verb_stop(AgentCall& c, const virtfs::Command&) { co_return std::string(c.a->stop() ? "stopped\n" : "idle\n"); }

Reply verb_kill(AgentCall& c, const virtfs::Command&) {
  co_await kill_agent(c.hub, c.s, c.a);
  co_return std::string("killed\n");
}

Reply verb_clear(AgentCall& c, const virtfs::Command&) {
  c.a->clear();
  c.a->note("info", "cleared");
  c.a->save();
  co_return std::string("cleared\n");
}

Reply verb_tools(AgentCall& c, const virtfs::Command&) {
  auto r = co_await c.s->host->tools(c.a->id);
  std::vector<ToolInfo> tools;
  if (r) {
    tools = std::move(*r);
  } else {
    std::lock_guard lock(c.a->mu);
    tools = c.a->last_tools;
  }
  std::sort(tools.begin(), tools.end(), [](const ToolInfo& x, const ToolInfo& y) { return x.name < y.name; });
  std::string out;
  for (const auto& t : tools) out += t.name + "\t" + t.description + "\n";
  co_return out;
}

Reply verb_tool_load(AgentCall& c, const virtfs::Command& cmd) {
  if (auto st = co_await c.s->host->load(c.a->id, cmd.args); !st) co_return st.error();
  std::string out;
  {
    std::lock_guard lock(c.a->mu);
    for (const auto& t : cmd.args) {
      if (std::find(c.a->tools.begin(), c.a->tools.end(), t) == c.a->tools.end()) c.a->tools.push_back(t);
      out += t + "\n";
    }
  }
  c.a->save();
  co_return out;
}

Reply verb_model(AgentCall& c, const virtfs::Command& cmd) {
  if (!cmd.args.empty()) {
    std::string old;
    {
      std::lock_guard lock(c.a->mu);
      old = c.a->model;
      c.a->model = cmd.args[0];
    }
    if (auto st = c.a->make_backend(); !st) {
      std::lock_guard lock(c.a->mu);
      c.a->model = old;
      co_return st.error();
    }
    c.a->save();
  }
  std::lock_guard lock(c.a->mu);
  co_return c.a->model + "\n";
}

Reply verb_backend(AgentCall& c, const virtfs::Command& cmd) {
  if (!cmd.args.empty()) {
    const std::string& b = cmd.args[0];
    if (auto st = check_backend(b); !st) co_return st.error();
    // The model becomes that backend's default (§7.4).
    auto settings = backend::resolve_backend(b, c.hub.conf(), c.hub.env);
    if (!settings) co_return p9::error(settings.error().message);
    std::string old_b, old_m;
    {
      std::lock_guard lock(c.a->mu);
      old_b = c.a->backend_name;
      old_m = c.a->model;
      c.a->backend_name = b;
      c.a->model = settings->model;
    }
    if (auto st = c.a->make_backend(); !st) {
      std::lock_guard lock(c.a->mu);
      c.a->backend_name = old_b;
      c.a->model = old_m;
      co_return st.error();
    }
    c.a->save();
  }
  std::lock_guard lock(c.a->mu);
  co_return c.a->backend_name + "\n";
}

Reply verb_name(AgentCall& c, const virtfs::Command& cmd) {
  if (!cmd.args.empty()) {
    const std::string& n = cmd.args[0];
    if (!valid_name(n)) co_return p9::error("invalid name: " + n);
    const std::string old = c.a->current_name();
    if (old != n) {
      if (auto st = c.s->rename_agent(c.a, n); !st) co_return st.error();
      const std::string sn = c.s->current_name();
      c.hub.bus.publish("agent." + c.a->id + ".rename", "session/" + sn + "/agent/" + old + " session/" + sn + "/agent/" + n);
      {
        std::lock_guard lock(c.a->mu);
        c.a->last_tools.clear();  // the Environment section names the agent: re-render
      }
      c.a->save();
    }
  }
  std::lock_guard lock(c.a->mu);
  co_return c.a->name + "\n";
}

Reply verb_systemprompt(AgentCall& c, const virtfs::Command&) {
  std::string text = co_await system_prompt(c.a, c.s);
  if (text.empty() || text.back() != '\n') text += '\n';
  co_return text;
}

constexpr virtfs::Verb<Reply (*)(AgentCall&, const virtfs::Command&)> agent_verbs[] = {
    {.name = "stop", .run = verb_stop},
    {.name = "kill", .run = verb_kill},
    {.name = "clear", .idle = virtfs::Idle::yes, .run = verb_clear},
    {.name = "tools", .self = virtfs::Self::yes, .run = verb_tools},
    {.name = "tool_load", .synopsis = "<name>...", .min_args = 1, .max_args = virtfs::MANY, .self = virtfs::Self::yes,
     .run = verb_tool_load},
    {.name = "model", .synopsis = "[name]", .max_args = 1, .self = virtfs::Self::query, .idle = virtfs::Idle::set,
     .run = verb_model},
    {.name = "backend", .synopsis = "[name]", .max_args = 1, .self = virtfs::Self::query, .idle = virtfs::Idle::set,
     .run = verb_backend},
    {.name = "name", .synopsis = "[new]", .max_args = 1, .self = virtfs::Self::query, .run = verb_name},
    {.name = "systemprompt", .self = virtfs::Self::yes, .run = verb_systemprompt},
};

// `!command` (§3.4): the agent's shell tool, sandboxed, in its effective cwd; an `exec` block.
asio::awaitable<void> run_exec(std::shared_ptr<Session> s, std::shared_ptr<Agent> a, std::string command) {
  auto tools = co_await s->host->tools(a->id);
  const bool loaded = tools && std::any_of(tools->begin(), tools->end(), [](const ToolInfo& t) { return t.name == "shell"; });
  if (!loaded) {
    a->note("error", "!: shell tool not loaded (use /tool_load shell)");
    co_return;
  }
  ToolCallRequest req;
  req.tool = "shell";
  req.agent = a->id;
  req.auth = a->secret;
  req.args = nlohmann::json{{"cmd", command}}.dump();
  auto out = co_await s->host->call(std::move(req));
  // The exec block shows the output as a terminal would, the exit status on a last line.
  std::string text = out.text, tail;
  const std::string prefix = "error: exit status ";
  if (text.rfind(prefix, 0) == 0) {
    const auto nl = text.find('\n');
    tail = "exit " + text.substr(prefix.size(), nl - prefix.size());
    text = nl == std::string::npos ? "" : text.substr(nl + 1);
  }
  if (!tail.empty()) text += (text.empty() || text.back() == '\n' ? "" : "\n") + tail;
  a->transcript.append(make_block("exec", text, command));
}

asio::awaitable<void> run_slash(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a, std::string request) {
  auto r = co_await agent_ctl(hub, s, a, request, false);
  if (!r) {
    a->note("error", r.ename());
    co_return;
  }
  std::string text = *r;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  a->note("info", text);
}

}  // namespace

asio::awaitable<p9::Result<std::string>> session_ctl(Hub& hub, std::shared_ptr<Session> s, std::string request) {
  auto m = virtfs::match(session_verbs, request);
  if (!m) co_return m.error();
  SessionCall c{hub, std::move(s)};
  co_return co_await m->verb->run(c, m->command);
}

asio::awaitable<p9::Result<std::string>> agent_ctl(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a,
                                                   std::string request, bool self) {
  auto m = virtfs::match(agent_verbs, request, virtfs::Caller{self, a->running()});
  if (!m) co_return m.error();
  AgentCall c{hub, std::move(s), std::move(a)};
  co_return co_await m->verb->run(c, m->command);
}

p9::Status write_prompt(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a, std::string text) {
  text = std::string(backend::trim(text));
  if (text.empty()) return {};
  auto detach = [&](asio::awaitable<void> work) {
    asio::co_spawn(a->ex, std::move(work), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        spdlog::error("prompt: {}", x.what());
      }
    });
  };
  if (text.rfind("//", 0) == 0) {
    text.erase(0, 1);
  } else if (text[0] == '/') {
    detach(run_slash(hub, s, a, text.substr(1)));
    return {};
  } else if (text[0] == '!') {
    detach(run_exec(s, a, text.substr(1)));
    return {};
  }
  if (!a->submit({text, ""})) return p9::error("prompt queue full");
  return {};
}

}  // namespace ollie
