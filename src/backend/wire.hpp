#pragma once
// Internal: JSON helpers shared by the provider adapters.

#include <string>
#include <string_view>

#include "backend/config.hpp"
#include "backend/http.hpp"
#include "backend/json.hpp"
#include "backend/types.hpp"

namespace ollie::backend {

/// Tool-call arguments as an object: the parsed text, or {} when it does not parse (a call
/// cut off at the token limit is sent back as an empty object).
json arguments_object(const std::string& args);

/// A request with the settings' timeouts, JSON content type and the given headers.
HttpRequest json_request(const BackendSettings& s, std::string method, std::string url,
                         std::string body);

/// A request for a whole (non-streamed) answer: json_request() bounded by the settings'
/// fetch deadline and limits::response_body.
HttpRequest fetch_request(const BackendSettings& s, std::string method, std::string url,
                          std::string body = {});

/// Bytes of the request's text, for the usage estimate.
std::size_t request_bytes(const ChatRequest& req);

/// The tools in the OpenAI function-calling form `[{type: function, function: {name,
/// description, parameters}}]`, which ollama takes too.
json function_tools(const std::vector<Tool>& tools);

/// "user", "assistant", "system", "tool".
const char* role_name(Role r);

}  // namespace ollie::backend
