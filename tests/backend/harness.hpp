#pragma once
// Test support: collect the events of a stream, and settings pointing a backend at the fake
// provider.

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace ollie::backend::test {

/// Everything one stream delivered.
struct Collected {
  std::string text;
  std::string reasoning;
  std::vector<ToolCall> calls;
  std::vector<StreamEvent> events;
  std::optional<StreamEvent> end;  ///< the terminal event (done or error)
  bool is_error() const { return end && end->kind == StreamEvent::Kind::error; }
  const Error& error() const { return end->error; }
};

/// Gathers events from the engine thread; wait() returns once a terminal event came.
class Collector {
 public:
  EventSink sink() {
    return [this](StreamEvent ev) {
      std::lock_guard lk(mu_);
      switch (ev.kind) {
        case StreamEvent::Kind::content: c_.text += ev.text; break;
        case StreamEvent::Kind::reasoning: c_.reasoning += ev.text; break;
        case StreamEvent::Kind::tool_call: c_.calls.push_back(ev.call); break;
        case StreamEvent::Kind::done:
        case StreamEvent::Kind::error: c_.end = ev; break;
      }
      c_.events.push_back(std::move(ev));
      cv_.notify_all();
    };
  }
  /// Waits for the terminal event (at most `max`); the result has no `end` on timeout.
  Collected wait(std::chrono::milliseconds max = std::chrono::seconds(10)) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, max, [&] { return c_.end.has_value(); });
    return c_;
  }
  /// Waits until at least `n` events arrived.
  bool wait_events(std::size_t n, std::chrono::milliseconds max = std::chrono::seconds(10)) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, max, [&] { return c_.events.size() >= n; });
  }
  Collected snapshot() {
    std::lock_guard lk(mu_);
    return c_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  Collected c_;
};

/// The key every test backend carries; it must never surface in a log or an error.
inline const std::string test_key = "sk-test-SECRET-4c1d2e9f";

/// Settings of backend `name` pointed at the fake provider at `base`.
inline BackendSettings fake_settings(const std::string& name, const std::string& base) {
  BackendSettings s;
  s.name = name;
  s.model = name == "gemini" ? "gemini-2.5-flash" : name == "anthropic" ? "claude-sonnet-4-5" : "fake-model";
  s.url = base;
  if (name == "openai") s.url = base + "/v1";
  if (name == "openrouter") s.url = base + "/api/v1";
  s.key = name == "ollama" ? "" : test_key;
  std::string upper;
  for (char c : name) upper.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  if (name == "copilot" || name == "kiro") s.key_var = "OLLIE_" + upper + "_TOKEN";
  else if (name != "ollama") s.key_var = "OLLIE_" + upper + "_KEY";
  if (name == "copilot") s.token_url = base + "/copilot_internal/v2/token";
  s.connect_timeout = std::chrono::seconds(5);
  s.idle_timeout = std::chrono::seconds(20);
  return s;
}

/// A one-message request with one tool.
inline ChatRequest simple_request(const std::string& prompt = "hello") {
  ChatRequest r;
  r.system = "You are a test.";
  r.messages.push_back(Message{Role::user, prompt});
  r.tools.push_back(Tool{"read", "Read a file",
                         R"({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]})"});
  return r;
}

}  // namespace ollie::backend::test
