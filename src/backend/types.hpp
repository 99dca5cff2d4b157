#pragma once
/// Provider-neutral chat types shared by every backend (seed: Backend System, Shared Types).
/// JSON values (tool schemas, tool arguments, opaque reasoning items) travel as JSON text so
/// that this header stays free of a JSON library.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/error.hpp"

namespace ollie::backend {

/// Who speaks a message.
enum class Role { system, user, assistant, tool };

/// One call the model asks for. `arguments` is the raw JSON text as streamed: it may be cut
/// off (stop reason `length`), so callers parse it themselves.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
  bool operator==(const ToolCall&) const = default;
};

/// One conversation message.
struct Message {
  Role role = Role::user;
  std::string content;
  std::vector<ToolCall> tool_calls;  ///< assistant only
  std::string tool_call_id;          ///< tool results only
  std::string reasoning;             ///< readable reasoning text (never sent back)
  /// Opaque reasoning items (anthropic thinking blocks with signatures, gemini thought
  /// signatures), each a JSON text, sent back unchanged to `reasoning_backend` only.
  std::vector<std::string> reasoning_items;
  std::string reasoning_backend;
  bool operator==(const Message&) const = default;
};

/// A function the model may call.
struct Tool {
  std::string name;
  std::string description;
  std::string parameters = R"({"type":"object","properties":{}})";  ///< JSON Schema text
  bool operator==(const Tool&) const = default;
};

/// The generation parameters of the seed's agent Config. Each is sent only to providers that
/// accept it (doc/backends.md has the table); unset fields are never sent.
struct GenerationParams {
  std::optional<int> max_tokens;
  std::optional<int> max_completion_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int> top_k;
  std::optional<double> min_p;
  std::optional<double> top_a;
  std::optional<double> frequency_penalty;
  std::optional<double> presence_penalty;
  std::optional<double> repetition_penalty;
  int reasoning = 0;                  ///< thinking budget in tokens; 0 = off
  std::string reasoning_effort;       ///< "low" | "medium" | "high" | ""
  std::optional<bool> include_reasoning;
  std::string response_format;        ///< "json" or "" (text)
  std::vector<std::string> stop;
  std::string verbosity;              ///< "low" | "medium" | "high" | ""
};

/// One request: system prompt, history, tools and parameters. `model` empty = the backend's.
struct ChatRequest {
  std::string system;
  std::vector<Message> messages;
  std::vector<Tool> tools;
  GenerationParams params;
  std::string model;
};

/// Token counts of one response (spec §8.14). `input` excludes cached input.
struct Usage {
  std::int64_t input = 0;
  std::int64_t output = 0;           ///< includes reasoning tokens
  std::int64_t cached_input = 0;
  std::int64_t cache_creation = 0;
  std::int64_t requests = 1;
  std::optional<double> cost;        ///< USD, when the provider reports it (OpenRouter)
  bool estimated = false;            ///< true when the provider reported no usage (bytes/4)
};

/// Why the provider ended the response, mapped as spec §8.2 lists it.
enum class StopReason {
  end,         ///< stop, end_turn, stop_sequence
  tool_calls,  ///< tool_use, tool_calls, function_call
  length,      ///< length, max_tokens: some call arguments may be cut off
  filtered,    ///< content_filter, safety, refusal and any other reason
};

/// Maps a provider's stop reason (case-insensitive) to a StopReason.
StopReason map_stop_reason(std::string_view raw);

/// One streamed event. Exactly one terminal event (`done` or `error`) ends every stream that
/// was not cancelled.
struct StreamEvent {
  enum class Kind { content, reasoning, tool_call, done, error };
  Kind kind = Kind::content;
  std::string text;                       ///< content / reasoning delta
  ToolCall call;                          ///< tool_call: one whole, assembled call
  Usage usage;                            ///< done
  StopReason stop = StopReason::end;      ///< done
  std::string stop_raw;                   ///< done: the provider's own word
  std::vector<std::string> reasoning_items;  ///< done: opaque items to keep (Message)
  Error error;                            ///< error
};

}  // namespace ollie::backend
