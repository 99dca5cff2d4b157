#pragma once
// The wire format of each provider, rendered from one scripted response.

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fakeprovider {

enum class Dialect { openai, anthropic, ollama, gemini, kiro };

/// What the server writes back.
struct Reply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;                 ///< whole body (non-streamed replies)
  bool streamed = false;
  std::vector<std::string> frames;  ///< streamed body, one write each
  int delay_ms = 0;                 ///< before every frame
  int drop_after = -1;              ///< close the connection after this many frames
  bool truncate = false;            ///< end the body cleanly after drop_after frames
  bool hang = false;                ///< send the head, then nothing
  bool stamp = false;               ///< replace @@STAMP@@ by the monotonic clock in ns
  std::string endless;              ///< after the frames, sent again and again...
  std::size_t endless_bytes = 0;    ///< ...until this much went out or the client left
};

/// What the renderers need from the request.
struct RequestInfo {
  std::string path;
  std::string model;
  std::string key;  ///< the credential the request carried
  nlohmann::json body;
};

/// Renders `response` (a scripted response object) in `dialect`.
Reply render(Dialect dialect, const nlohmann::json& response, const RequestInfo& req);

/// The body of a non-chat route (`models`, `gemini_models`, `tags`, `show`, `token`) under the
/// script's `route_faults` value `malformed`: the fields the clients read, of the wrong types.
nlohmann::json malformed_route_body(const std::string& route);

/// An AWS event-stream frame with string headers (written independently of the client's
/// decoder, with its own CRC code).
std::string event_frame(const std::vector<std::pair<std::string, std::string>>& headers,
                        const std::string& payload);

}  // namespace fakeprovider
