#pragma once
/// The session and agent ctl verbs (spec §3.2, §3.3) and the prompt file with its prefixes
/// (§2.8.4, §3.4).

#include <asio/awaitable.hpp>
#include <memory>
#include <string>

#include "lib9p/result.hpp"

namespace ollie {

struct Hub;
class Session;
class Agent;

/// Session `ctl`: one verb per request.
asio::awaitable<p9::Result<std::string>> session_ctl(Hub& hub, std::shared_ptr<Session> s, std::string request);
/// Agent `ctl`: one verb per request; `self` when the agent's own principal sends it. `shown`,
/// when given, is set when the verb put its reply in a block of its own (`clear`, `compact`).
asio::awaitable<p9::Result<std::string>> agent_ctl(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a,
                                                   std::string request, bool self, bool* shown = nullptr);
/// A write to `prompt` (§2.8.4): `/verb` and `!cmd` run at once (their replies become blocks),
/// anything else is submitted. Returns at once.
p9::Status write_prompt(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a, std::string text);
/// The rendered system prompt (ctl systemprompt), rendered now when it never was.
asio::awaitable<std::string> system_prompt(std::shared_ptr<Agent> a, std::shared_ptr<Session> s);

}  // namespace ollie
