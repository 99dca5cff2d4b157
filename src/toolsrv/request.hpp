#pragma once
/// The request of proc/new and proc/new.bg (spec §6.5.1): header lines, a blank line, the JSON
/// arguments.

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "lib9p/result.hpp"

namespace toolsrv {

/// A parsed call request.
struct CallRequest {
  std::string tool;
  std::string agent;
  std::optional<int> timeout;  ///< seconds, 0 = none; unset = the tool's default
  bool bypass = false;
  std::string auth;            ///< the agent's secret for OLLIE_AUTH; never logged
  nlohmann::json args;         ///< always an object
  std::string args_text;       ///< the body exactly as received: the tool's stdin
};

/// Parses a request. Errors (Rerror, nothing runs): `missing tool`, `missing agent`,
/// `invalid args: <reason>`, `invalid timeout: <x>`, `bad header: <line>`.
p9::Result<CallRequest> parse_call_request(std::string_view text);

}  // namespace toolsrv
