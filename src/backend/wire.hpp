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

/// Bytes of the request's text, for the usage estimate.
std::size_t request_bytes(const ChatRequest& req);

/// The tools in the OpenAI function-calling form `[{type: function, function: {name,
/// description, parameters}}]`, which ollama takes too.
json function_tools(const std::vector<Tool>& tools);

/// The wire text of each message of a backend's last request, so that a round serialises only
/// its new messages: a history grows at its end, and an unchanged message is the same bytes as
/// before. A message is reused only when it equals the one kept at its position.
class WireCache {
 public:
  /// The messages as the elements of a JSON array, comma-separated: each `make(m)` dumped, or
  /// the text kept for it. Keeps what it made for the next call.
  std::string join(const std::vector<const Message*>& msgs, const std::function<json(const Message&)>& make);

 private:
  std::mutex mu_;
  std::vector<std::pair<Message, std::string>> kept_;
};

/// `envelope` dumped with `elements` as the array of its top-level key `key` (which the envelope
/// holds as an empty array), byte for byte what dumping the whole body would give.
std::string splice_array(const json& envelope, std::string_view key, const std::string& elements);

/// "user", "assistant", "system", "tool".
const char* role_name(Role r);

}  // namespace ollie::backend
