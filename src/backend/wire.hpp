#pragma once
// Internal: JSON helpers shared by the provider adapters.

#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

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

/// Bytes of the request as §8.5.1 estimates a context (system prompt, contents, calls' names and
/// arguments; not the tool schemas), for the usage estimate when the provider reports none.
std::size_t request_bytes(const ChatRequest& req);

/// The tools in the OpenAI function-calling form `[{type: function, function: {name,
/// description, parameters}}]`, which ollama takes too.
json function_tools(const std::vector<Tool>& tools);

/// The wire text of a backend's last request, so that a round serialises only its new messages:
/// a history grows at its end, and an unchanged message (or tool list) is the same bytes as
/// before. A message is reused only when it equals the one kept at its position.
class WireCache {
 public:
  /// The messages as a JSON array: each `make(m)` dumped, or the text kept for it.
  std::string messages(const std::vector<const Message*>& msgs, const std::function<json(const Message&)>& make);
  /// The tools as `make(tools)` dumped, or the text kept when they are the last ones.
  std::string tools(const std::vector<Tool>& tools, const std::function<json(const std::vector<Tool>&)>& make);

 private:
  std::mutex mu_;
  std::vector<std::pair<Message, std::string>> kept_;
  std::vector<Tool> tools_;
  std::string tools_text_;
};

/// `text`, a dumped body holding its top-level key `key` as an empty array, with `array` (JSON
/// text) in its place: byte for byte what dumping the whole body would give.
std::string splice_array(std::string text, std::string_view key, std::string_view array);

/// "user", "assistant", "system", "tool".
const char* role_name(Role r);

}  // namespace ollie::backend
