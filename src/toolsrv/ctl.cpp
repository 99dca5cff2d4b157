#include "toolsrv/ctl.hpp"

#include <charconv>
#include <csignal>
#include <optional>

#include "virtfs/ctl.hpp"
#include "virtfs/tokenize.hpp"

namespace toolsrv {

using virtfs::tokenize;

namespace {

using Command = virtfs::Command;

// ---- the root ctl (spec §6.3) ---------------------------------------------------------------

using SessionVerb = virtfs::Verb<p9::Status (*)(Session&, const Command&)>;

p9::Status load(Session& s, const Command& c) {
  return s.load(c.args[0], std::vector<std::string>(c.args.begin() + 1, c.args.end()));
}

p9::Status unload(Session& s, const Command& c) {
  s.unload(c.args[0], std::vector<std::string>(c.args.begin() + 1, c.args.end()));
  return {};
}

p9::Status forget(Session& s, const Command& c) {
  s.forget(c.args[0]);
  return {};
}

// `env <KEY>=<VALUE>`: the value is the rest of the line after the first `=`, blanks kept.
p9::Status env(Session& s, const Command& c) {
  std::string_view rest = c.args[0];
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  const auto eq = rest.find('=');
  // §6.3's one error: a name without `=` (or an empty one) is not a variable name either.
  if (eq == std::string_view::npos) return p9::error("invalid env name: " + std::string(rest));
  return s.set_env(std::string(rest.substr(0, eq)), std::string(rest.substr(eq + 1)));
}

p9::Status cwd(Session& s, const Command& c) { return s.set_cwd(c.args[0]); }

p9::Status agentcwd(Session& s, const Command& c) {
  if (c.args[1] == "-") return s.set_agent_cwd(c.args[0], std::nullopt);
  return s.set_agent_cwd(c.args[0], c.args[1]);
}

p9::Status sandboxok(Session& s, const Command& c) {
  if (c.args.size() % 2 != 0) return c.usage();
  std::vector<std::pair<std::string, std::string>> pairs;
  for (std::size_t i = 0; i < c.args.size(); i += 2) pairs.emplace_back(c.args[i], c.args[i + 1]);
  return s.set_approvals(pairs);
}

constexpr SessionVerb session_verbs[] = {
    {.name = "load", .synopsis = "<agent> <tool>...", .min_args = 2, .max_args = virtfs::MANY, .run = load},
    {.name = "unload", .synopsis = "<agent> <tool>...", .min_args = 2, .max_args = virtfs::MANY, .run = unload},
    {.name = "forget", .synopsis = "<agent>", .min_args = 1, .max_args = 1, .run = forget},
    {.name = "env", .synopsis = "<KEY>=<VALUE>", .min_args = 1, .max_args = 1, .free_text = true, .run = env},
    {.name = "cwd", .synopsis = "<dir>", .min_args = 1, .max_args = 1, .run = cwd},
    {.name = "agentcwd", .synopsis = "<agent> <dir>|-", .min_args = 2, .max_args = 2, .run = agentcwd},
    {.name = "sandboxok", .synopsis = "[<sha256> <dir>]...", .max_args = virtfs::MANY, .run = sandboxok},
};

// ---- proc/{pid}/ctl (spec §6.5.4) -----------------------------------------------------------

using ProcVerb = virtfs::Verb<p9::Status (*)(ProcessTable&, int pid, const Command&)>;

p9::Status proc_term(ProcessTable& t, int pid, const Command&) { return t.signal(pid, SIGTERM); }

p9::Status proc_kill(ProcessTable& t, int pid, const Command&) { return t.signal(pid, SIGKILL); }

p9::Status proc_signal(ProcessTable& t, int pid, const Command& c) {
  const auto& arg = c.args[0];
  int sig = 0;
  const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), sig);
  if (ec != std::errc{} || end != arg.data() + arg.size() || sig < 1 || sig > 64) return p9::error("invalid signal: " + arg);
  return t.signal(pid, sig);
}

p9::Status proc_dismiss(ProcessTable& t, int pid, const Command&) {
  t.dismiss(pid);
  return {};
}

constexpr ProcVerb proc_verbs[] = {
    {.name = "term", .run = proc_term},
    {.name = "kill", .run = proc_kill},
    {.name = "signal", .synopsis = "<N>", .min_args = 1, .max_args = 1, .run = proc_signal},
    {.name = "dismiss", .run = proc_dismiss},
};

}  // namespace

p9::Status run_ctl(Session& session, std::string_view text) {
  return virtfs::each_line(text, [&](std::string_view line) -> p9::Status {
    auto m = virtfs::match_line(session_verbs, line);
    if (!m) return m.error();
    return m->verb->run(session, m->command);
  });
}

// The `info` requests about paths (§6.4): `<name> <agent> <path>...`.
struct PathRequest {
  std::string_view name;
  std::string (Session::*answer)(const std::string& agent, const std::vector<std::string>& paths);
};

constexpr PathRequest path_requests[] = {
    {"stat", &Session::stat_paths},
    {"resolve", &Session::resolve_dirs},
};

p9::Result<std::string> answer_info(Session& session, std::string_view request) {
  auto toks = tokenize(request);
  if (!toks) return toks.error();
  if (toks->empty()) return session.info("");
  for (const auto& r : path_requests) {
    if (toks->front() != r.name) continue;
    if (toks->size() < 3) return p9::error("usage: " + std::string(r.name) + " <agent> <path>...");
    return (session.*r.answer)((*toks)[1], std::vector<std::string>(toks->begin() + 2, toks->end()));
  }
  if (toks->size() != 1) return p9::error("usage: [<agent> | stat <agent> <path>... | resolve <agent> <path>...]");
  return session.info(toks->front());
}

p9::Result<std::string> answer_tools(Session& session, std::string_view request) {
  request = virtfs::trim(request);
  if (request.empty() || request.find_first_of(" \t\r\n") != std::string_view::npos)
    return p9::error("usage: <agent> | *");
  return session.tools(std::string(request));
}

p9::Status run_proc_ctl(ProcessTable& procs, int pid, std::string_view text) {
  return virtfs::each_line(text, [&](std::string_view line) -> p9::Status {
    auto m = virtfs::match_line(proc_verbs, line);
    if (!m) return m.error();
    if (!procs.find(pid)) return p9::error("no such process: " + std::to_string(pid));
    return m->verb->run(procs, pid, m->command);
  });
}

}  // namespace toolsrv
