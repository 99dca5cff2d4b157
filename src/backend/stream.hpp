#pragma once
// Internal: the shared streaming machinery of every provider (the seed's streamRequest):
// run one HTTP transfer, classify its status, feed a provider decoder, and end with exactly
// one done or error event.

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "backend/backend.hpp"
#include "backend/json.hpp"

namespace ollie::backend {

/// Shared state of one stream; possibly several transfers in a row (token exchange, model
/// metadata, then the chat).
class StreamControl : public std::enable_shared_from_this<StreamControl> {
 public:
  StreamControl(HttpEngine& engine, EventSink sink) : engine_(engine), sink_(std::move(sink)) {}

  /// Starts a transfer of this stream unless it was cancelled or has ended.
  bool start(HttpRequest req, TransferHandler h);
  /// Aborts the current transfer; no event is delivered afterwards. A transfer that has ended
  /// is not the engine's any more: cancelling the stream after it costs no wait on the engine.
  void cancel();
  /// Delivers an event; a terminal one (done, error) closes the stream.
  void emit(StreamEvent ev);
  /// Delivers an error event.
  void fail(Error e);
  HttpEngine& engine() { return engine_; }

 private:
  HttpEngine& engine_;
  EventSink sink_;
  std::mutex mu_;
  bool closed_ = false;
  TransferId current_ = 0;     ///< the transfer in the engine, 0 once it ended
  std::uint64_t starts_ = 0;   ///< transfers started, to know whose end clears current_
};

/// What a provider decoder produces besides the deltas it emits.
class Decoder {
 public:
  Decoder(std::shared_ptr<StreamControl> c, std::string backend);
  virtual ~Decoder() = default;
  /// Bytes of a 2xx body.
  virtual void feed(std::string_view bytes) = 0;
  /// End of the body; `clean` when the transfer completed without a network error.
  virtual void end(bool clean) { (void)clean; }

  bool done = false;                 ///< the provider's done marker was seen
  std::optional<Error> failure;      ///< the provider reported an error in the stream
  Usage usage;
  bool has_usage = false;
  std::string stop_raw;
  std::vector<std::string> reasoning_items;
  std::size_t calls = 0;
  std::size_t out_bytes = 0;         ///< text + reasoning + arguments, for estimates

 protected:
  void text(std::string_view s);
  void reasoning(std::string_view s);
  void call(ToolCall tc);
  /// The id of this response's next call when the provider sent none (gemini, ollama): unique
  /// across responses too, as anthropic wants the ids of one history after a backend switch.
  std::string generated_id() const;
  void fail(Error e) { if (!failure) failure = std::move(e); }
  /// Counts `more` bytes of output; past limits::response_output fails the stream (true).
  bool past_output(std::size_t more);
  /// Fails the stream as malformed when a Strict read found a problem; true when it did.
  bool malformed(const Strict& f);
  /// Fails the stream when `size` bytes of `what` (e.g. "tool call 'read' arguments") pass
  /// limits::tool_call; true when they do.
  bool too_long(std::size_t size, std::string_view what);
  /// Fails the stream because one event passed limits::event_data.
  void event_too_long();
  std::shared_ptr<StreamControl> c_;
  std::string backend_;

 private:
  std::set<std::string> ids_;  ///< the providers' call ids of this response
  std::string id_prefix_;  ///< `call_<this response's number>_`
};

/// What classification of a failed request needs to know.
struct StreamContext {
  std::string backend;
  std::string key_var;
  std::string model;
  std::string secret;
  std::string session_secret;     ///< a second secret derived from the first (copilot's token)
  std::size_t request_bytes = 0;  ///< for the usage estimate when the provider reports none
  /// A provider-specific classifier tried before the generic one (kiro's overflow reason).
  std::function<std::optional<Error>(int status, std::string_view body)> classify;
};

/// Runs one streamed request: non-2xx answers are classified, 2xx bodies go to `dec`, and
/// the stream ends with done (usage estimated when absent) or a classified error.
bool start_stream(const std::shared_ptr<StreamControl>& c, HttpRequest req,
                  std::shared_ptr<Decoder> dec, StreamContext ctx);

/// Classifies a finished non-streamed response (models, show, token exchange).
std::optional<Error> response_error(const HttpResponse& r, const StreamContext& ctx);

/// Error for a transfer that failed before or without an HTTP answer.
Error transport_error(std::string_view backend, const TransferEnd& end);

}  // namespace ollie::backend
