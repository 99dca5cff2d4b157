#include "toolsrv/ctl.hpp"

#include <optional>

#include "virtfs/tokenize.hpp"

namespace toolsrv {

using virtfs::tokenize;

namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// `env <KEY>=<VALUE>`: the value is the rest of the line after the first `=`, blanks kept.
p9::Status run_env(Session& session, std::string_view rest) {
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  const auto eq = rest.find('=');
  if (eq == std::string_view::npos || eq == 0) return p9::error("usage: env <KEY>=<VALUE>");
  return session.set_env(std::string(rest.substr(0, eq)), std::string(rest.substr(eq + 1)));
}

p9::Status run_line(Session& session, std::string_view line) {
  std::string_view head = line;
  while (!head.empty() && blank(head.front())) head.remove_prefix(1);
  std::size_t verb_end = 0;
  while (verb_end < head.size() && !blank(head[verb_end])) verb_end++;
  const std::string verb(head.substr(0, verb_end));
  if (verb == "env") return run_env(session, head.substr(verb_end));

  auto toks = tokenize(line);
  if (!toks) return toks.error();
  std::vector<std::string> args(toks->begin() + 1, toks->end());
  if (verb == "load" || verb == "unload") {
    if (args.size() < 2) return p9::error("usage: " + verb + " <agent> <tool>...");
    std::vector<std::string> tools(args.begin() + 1, args.end());
    if (verb == "load") return session.load(args[0], tools);
    session.unload(args[0], tools);
    return {};
  }
  if (verb == "forget") {
    if (args.size() != 1) return p9::error("usage: forget <agent>");
    session.forget(args[0]);
    return {};
  }
  if (verb == "cwd") {
    if (args.size() != 1) return p9::error("usage: cwd <dir>");
    return session.set_cwd(args[0]);
  }
  if (verb == "agentcwd") {
    if (args.size() != 2) return p9::error("usage: agentcwd <agent> <dir>|-");
    if (args[1] == "-") return session.set_agent_cwd(args[0], std::nullopt);
    return session.set_agent_cwd(args[0], args[1]);
  }
  if (verb == "sandboxok") {
    if (args.size() % 2 != 0) return p9::error("usage: sandboxok [<sha256> <dir>]...");
    std::vector<std::pair<std::string, std::string>> pairs;
    for (std::size_t i = 0; i < args.size(); i += 2) pairs.emplace_back(args[i], args[i + 1]);
    return session.set_approvals(pairs);
  }
  return p9::error("unknown command: " + verb);
}

}  // namespace

p9::Status run_ctl(Session& session, std::string_view text) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (trim(line).empty()) continue;
    if (auto st = run_line(session, line); !st) return st;
  }
  return {};
}

p9::Result<std::string> answer_info(Session& session, std::string_view request) {
  auto toks = tokenize(request);
  if (!toks) return toks.error();
  if (toks->empty()) return session.info("");
  if (toks->front() == "stat") {
    if (toks->size() < 3) return p9::error("usage: stat <agent> <path>...");
    return session.stat_paths((*toks)[1], std::vector<std::string>(toks->begin() + 2, toks->end()));
  }
  if (toks->size() != 1) return p9::error("usage: [<agent> | stat <agent> <path>...]");
  return session.info(toks->front());
}

p9::Result<std::string> answer_tools(Session& session, std::string_view request) {
  request = trim(request);
  if (request.empty() || request.find_first_of(" \t\r\n") != std::string_view::npos)
    return p9::error("usage: <agent> | *");
  return session.tools(std::string(request));
}

p9::Status run_proc_ctl(ProcessTable& procs, int pid, std::string_view text) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.empty()) continue;
    auto toks = tokenize(line);
    if (!toks) return toks.error();
    const auto& verb = toks->front();
    const std::size_t nargs = toks->size() - 1;
    if (verb == "term" || verb == "kill" || verb == "dismiss") {
      if (nargs != 0) return p9::error("usage: " + verb);
    } else if (verb == "signal") {
      if (nargs != 1) return p9::error("usage: signal <N>");
    } else {
      return p9::error("unknown command: " + verb);
    }
    if (!procs.find(pid)) return p9::error("no such process: " + std::to_string(pid));
    if (auto st = procs.control(pid, verb == "signal" ? "signal " + (*toks)[1] : verb); !st) return st;
  }
  return {};
}

}  // namespace toolsrv
