#pragma once
// Internal: JSON helpers shared by the provider adapters.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backend/config.hpp"
#include "backend/http.hpp"
#include "backend/types.hpp"

namespace ollie::backend {

using json = nlohmann::json;

/// Parses JSON text; a discarded value when invalid.
inline json parse_json(std::string_view s) { return json::parse(s, nullptr, false); }

/// Tool-call arguments as an object: the parsed text, or {} when it does not parse (a call
/// cut off at the token limit is sent back as an empty object).
json arguments_object(const std::string& args);

/// A JSON string field, or "" when absent or not a string.
std::string str_field(const json& j, const char* key);

/// A request with the settings' timeouts, JSON content type and the given headers.
HttpRequest json_request(const BackendSettings& s, std::string method, std::string url,
                         std::string body);

/// Bytes of the request's text, for the usage estimate.
std::size_t request_bytes(const ChatRequest& req);

/// The tools in the OpenAI function-calling form `[{type: function, function: {name,
/// description, parameters}}]`, which ollama takes too.
json function_tools(const std::vector<Tool>& tools);

/// "user", "assistant", "system", "tool".
const char* role_name(Role r);

}  // namespace ollie::backend
