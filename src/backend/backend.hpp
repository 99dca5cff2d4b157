#pragma once
/// The Backend interface the agent loop talks to: stream a chat as events, list models, and
/// the context length of a model. One implementation per provider (spec §8.16).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/config.hpp"
#include "backend/http.hpp"
#include "backend/result.hpp"
#include "backend/types.hpp"

namespace ollie::backend {

/// Receives the events of one stream, on the thread of its HTTP loop (the thread that started it,
/// when that one runs a loop); it must not block.
using EventSink = std::function<void(StreamEvent)>;

class StreamControl;

/// A running stream. Destroying or cancelling it aborts the HTTP transfer at once; after
/// cancel() returns no event of the stream is delivered.
class Stream {
 public:
  Stream() = default;
  /// Wraps the shared state of a stream (made by the backends).
  explicit Stream(std::shared_ptr<StreamControl> c) : c_(std::move(c)) {}
  Stream(Stream&&) noexcept = default;
  Stream& operator=(Stream&& o) noexcept;
  ~Stream();
  /// Aborts the transfer; idempotent.
  void cancel();

 private:
  std::shared_ptr<StreamControl> c_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "ollama", "openai", "openrouter", "anthropic", "gemini", "copilot" or "kiro".
  virtual const std::string& name() const = 0;
  /// The model requests use when they name none.
  virtual std::string model() const = 0;
  /// Changes the current model.
  virtual void set_model(std::string model) = 0;
  /// Starts streaming a response. Errors found before anything is sent (bad parameters,
  /// missing key) are returned; everything later arrives as an `error` event.
  virtual Result<Stream> stream(const ChatRequest& req, EventSink sink) = 0;
  /// The provider's models (cached after the first success). Blocks: call it off I/O threads.
  virtual Result<std::vector<std::string>> list_models() = 0;
  /// Context length of `model` in tokens (cached). Blocks on the first call for a model.
  virtual Result<int> context_length(std::string_view model) = 0;
  /// The context length when the provider need not be asked (anthropic, kiro): never blocks.
  virtual std::optional<int> known_context_length() const { return std::nullopt; }
  /// The output token limit a request with these parameters sends (none: the provider's own).
  virtual std::optional<int> max_tokens_sent(const GenerationParams& p) const { return p.max_tokens; }
};

/// Builds the backend named by `settings.name`, sending its requests through `engine`
/// (which must outlive it).
Result<std::unique_ptr<Backend>> make_backend(BackendSettings settings, HttpEngine& engine);

}  // namespace ollie::backend
