#pragma once
/// What an agent may create (spec §4.2 containment, ◆OP-7): a caller other than the hostowner
/// uses only its own session's `agent/new`, names only itself in `parent=`, and gets a new agent
/// whose effective cwd is its own or below it, compared after resolving `..` and symlinks.

#include <asio/awaitable.hpp>
#include <memory>
#include <string>

#include "lib9p/result.hpp"
#include "virtfs/dsl.hpp"

namespace ollie {

class Session;
class Agent;

/// Whether `path` is `base` or lies beneath it (both absolute and cleaned).
bool at_or_below(const std::string& path, const std::string& base);

/// The agent that sends an `agent/new` request to session `s`, or null for the hostowner (who is
/// not contained). `parent` is the request's `parent=` (id or name; empty when absent); one that
/// names no agent is left to the request (`no such agent`). Errors:
/// `permission denied: agent/new of another session`, `permission denied: parent must be the caller`.
p9::Result<std::shared_ptr<Agent>> new_agent_caller(const Session& s, const virtfs::Principal& who, const std::string& parent);

/// The cwd override of a new agent created by `caller`: `cwd` (the request's `cwd=`, absolute) or
/// else the caller's effective cwd, resolved on the tool host by the session's toolsrv (so that a
/// symlink changed later does not move it); empty when that is the session cwd. Errors:
/// `cwd: <d>: not a directory`, `permission denied: cwd outside <caller cwd>`, `agent/new: <why
/// toolsrv could not answer>`.
asio::awaitable<p9::Result<std::string>> contained_cwd(std::shared_ptr<Session> s, std::shared_ptr<Agent> caller,
                                                       std::string cwd);

}  // namespace ollie
