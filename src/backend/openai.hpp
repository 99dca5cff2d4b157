#pragma once
// Internal: the openai chat-completions dialect, shared by openai, openrouter and copilot.

#include "backend/http_backend.hpp"
#include "backend/wire.hpp"

namespace ollie::backend {

class OpenAiBackend : public HttpBackend {
 public:
  using HttpBackend::HttpBackend;
  Result<Stream> stream(const ChatRequest& req, EventSink sink) override;
  Result<std::vector<std::string>> list_models() override;
  Result<int> context_length(std::string_view model) override;
  /// max_completion_tokens when it goes (it binds where both do; copilot is sent max_tokens alone).
  std::optional<int> max_tokens_sent(const GenerationParams& p) const override;

 protected:
  /// Adds authentication and starts the transfer (copilot first exchanges its token).
  virtual void send(std::shared_ptr<StreamControl> c, HttpRequest req, std::shared_ptr<Decoder> d,
                    StreamContext ctx);
  /// Authentication headers for a blocking request, or the error that prevents one.
  virtual Result<std::vector<std::string>> auth_headers();
  /// The request body in this dialect: the envelope with the messages spliced in from wire_.
  std::string body(const ChatRequest& req, const std::string& model) const;
  /// The body with empty `messages` and `tools` arrays.
  json envelope(const ChatRequest& req, const std::string& model) const;
  /// Fills the model list and context-length cache from `<url>/models`.
  Result<std::vector<std::string>> load_models();

  mutable WireCache wire_;
};

/// The decoder of openai-style SSE chunks.
std::shared_ptr<Decoder> make_openai_decoder(std::shared_ptr<StreamControl> c, std::string backend);

}  // namespace ollie::backend
