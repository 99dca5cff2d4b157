// The session's bypass requests (spec §2.3, §6.9.2) as session/request_permission: the editor
// sees exactly what would run outside the sandbox (the broker's one-line summary), and its
// choice is written back as the broker's resolution.
#include <array>
#include <asio/co_spawn.hpp>
#include <spdlog/spdlog.h>

#include "acp/bridge.hpp"
#include "acp/updates.hpp"

namespace acp {
namespace {

// One line of bypass/pending/{session}: reqid, agent name, tool, summary.
struct Pending {
  std::string reqid, agent, tool, summary;
};

std::vector<Pending> pending(const std::string& text) {
  std::vector<Pending> out;
  for (const auto& l : lines(text)) {
    const auto t1 = l.find('\t'), t2 = l.find('\t', t1 + 1), t3 = l.find('\t', t2 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos || t3 == std::string::npos) continue;
    out.push_back({l.substr(0, t1), l.substr(t1 + 1, t2 - t1 - 1), l.substr(t2 + 1, t3 - t2 - 1), l.substr(t3 + 1)});
  }
  return out;
}

// The options, each named by the resolution it writes.
json options() {
  return json::array({
      {{"optionId", "allow"}, {"name", "Allow once"}, {"kind", "allow_once"}},
      {{"optionId", "allow always"}, {"name", "Always allow (adds a rule to the session's bypass policy)"}, {"kind", "allow_always"}},
      {{"optionId", "deny"}, {"name", "Deny"}, {"kind", "reject_once"}},
  });
}

// ACP's RequestPermissionRequest.toolCall is an update of the call awaiting permission: the call
// streamed just before, when one is found (call). Its own rawInput (the arguments) stands; the
// title and content say what would run outside the sandbox. With no call found (a request of
// before the prompt, or a call not streamed yet), a call of its own, named after the request.
json permission_request(const std::string& session, const Pending& p, const std::optional<std::string>& call_id) {
  const std::string what = p.tool + " " + p.summary;
  json content = {{"type", "content"},
                  {"content", {{"type", "text"},
                               {"text", "Run outside the sandbox, without Landlock (bypass request " + p.reqid +
                                            "):\n\n" + what}}}};
  json call = {{"toolCallId", call_id.value_or("bypass-" + p.reqid)}, {"title", "Outside the sandbox: " + what},
               {"kind", tool_kind(p.tool)}, {"status", "pending"}, {"content", json::array({content})}};
  if (!call_id) call["rawInput"] = {{"tool", p.tool}, {"summary", p.summary}};
  return {{"sessionId", session}, {"toolCall", std::move(call)}, {"options", options()}};
}

// The resolution line of the editor's answer: its option, or deny (cancelled, or anything else).
std::string resolution(const json& result) {
  static const std::array<const char*, 3> known{"allow", "allow always", "deny"};
  if (result.is_object() && result.contains("outcome") && result["outcome"].is_object()) {
    const json& o = result["outcome"];
    if (o.value("outcome", "") == "selected" && o.contains("optionId") && o["optionId"].is_string())
      for (const char* k : known)
        if (o["optionId"].get<std::string>() == k) return k;
  }
  return "deny";
}

}  // namespace

asio::awaitable<void> Bridge::ask_pending(std::shared_ptr<Live> live) {
  std::string name_path = "session/" + live->sid + "/name";
  auto session_name = co_await ollie_.read(name_path);
  if (!session_name) co_return;
  std::string list_path = "bypass/pending/" + trim(*session_name);
  auto list = co_await ollie_.read(list_path);
  if (!list) co_return;
  for (const auto& p : pending(*list))
    spawn_ask(live, trim(*session_name), p.reqid);
}

// Counted so that the bridge, at stdin's end, waits for the deny its hung-up asks write (main.cpp).
// The count is kept by the completion handler, which a destroyed frame (the bridge stopped) never runs.
void Bridge::spawn_ask(std::shared_ptr<Live> live, std::string session_name, std::string reqid) {
  asking_++;
  asio::co_spawn(ex_, ask(std::move(live), std::move(session_name), std::move(reqid)),
                 [this](std::exception_ptr) { asking_--; });
}

asio::awaitable<void> Bridge::ask(std::shared_ptr<Live> live, std::string session_name, std::string reqid) {
  auto turn = live->turn;
  if (!turn || turn->asked.count(reqid)) co_return;
  turn->asked.insert(reqid);
  std::string list_path = "bypass/pending/" + session_name, name_path = live->dir() + "name";
  auto list = co_await ollie_.read(list_path);
  auto agent_name = co_await ollie_.read(name_path);
  if (!list || !agent_name) co_return;
  std::optional<Pending> req;
  for (auto& p : pending(*list))
    if (p.reqid == reqid && p.agent == trim(*agent_name)) req = std::move(p);
  if (!req) co_return;  // another agent's, or already resolved
  // The call it is for: this agent's (the turn's translator sees only its blocks), same tool, same
  // summary, not named by an earlier request. pending escapes the summary; the call has it raw.
  auto call_id = turn->translator.awaiting(req->tool, unescaped(req->summary), turn->claimed);
  if (call_id) turn->claimed.insert(*call_id);
  json params = permission_request(live->id, *req, call_id);
  std::string method = "session/request_permission", failed;
  json result;
  try {
    result = co_await rpc_.request(method, std::move(params));
  } catch (const std::exception& e) {
    failed = e.what();
  }
  if (!failed.empty()) spdlog::warn("acp: bypass request {}: the editor answered {}: denied", reqid, failed);
  const std::string choice = resolution(result);
  // Allowed, the call runs now: no longer pending. Said before the resolution is written, which
  // lets the call run and its result (completed or failed) come after.
  if (call_id && choice != "deny")
    update(*live, {{"sessionUpdate", "tool_call_update"}, {"toolCallId", *call_id}, {"status", "in_progress"}});
  std::string line = reqid + " " + choice + "\n";
  auto st = co_await ollie_.write(list_path, line);
  if (!st) spdlog::warn("acp: bypass request {}: {}", reqid, st.ename());  // resolved meanwhile (timeout, another client)
  else spdlog::info("acp: bypass request {}: {}", reqid, trim(line));
}

}  // namespace acp
