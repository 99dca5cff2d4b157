#include "render.hpp"

#include <algorithm>
#include <cstdint>

namespace fakeprovider {

using json = nlohmann::json;

namespace {

// Splits text into pieces of about `n` bytes, never inside a UTF-8 sequence.
std::vector<std::string> pieces(const std::string& s, int n) {
  std::vector<std::string> out;
  if (n <= 0) n = 8;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = std::min(s.size(), i + static_cast<std::size_t>(n));
    while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

struct Call {
  std::string id, name, args;  // args: JSON text, possibly cut off
  json args_obj;               // parsed, {} when cut off
};

struct Script {
  std::string text, reasoning, signature, stop;
  std::string stop_word;  ///< openai: sent as finish_reason verbatim, in place of stop's word
  std::vector<Call> calls;
  json usage;
  json raw_usage;  // sent verbatim in the provider's usage slot (fault malformed_usage)
  int chunk = 8;
  bool stamp = false;
};

Script read_script(const json& r) {
  Script s;
  s.text = r.value("text", "");
  s.reasoning = r.value("reasoning", "");
  s.signature = r.value("signature", "sig-fake");
  s.chunk = r.value("chunk", 8);
  s.stamp = r.value("stamp", false);
  s.usage = r.value("usage", json());
  int n = 0;
  for (const auto& c : r.value("tool_calls", json::array())) {
    Call call;
    call.id = c.value("id", "call_" + std::to_string(n));
    call.name = c.value("name", "");
    const auto& a = c.contains("arguments") ? c["arguments"] : json::object();
    call.args = a.is_string() ? a.get<std::string>() : a.dump();
    call.args_obj = json::parse(call.args, nullptr, false);
    if (!call.args_obj.is_object()) call.args_obj = json::object();
    s.calls.push_back(std::move(call));
    ++n;
  }
  s.stop = r.value("stop", s.calls.empty() ? "end" : "tool_calls");
  s.stop_word = r.value("stop_word", "");
  return s;
}

std::int64_t u(const json& usage, const char* k) {
  return usage.is_object() ? usage.value(k, std::int64_t{0}) : 0;
}

// An error message padded to `message_bytes` when the response asks for it.
std::string padded(std::string msg, const json& resp) {
  const auto n = resp.value("message_bytes", std::size_t{0});
  if (msg.size() < n) msg += " " + std::string(n - msg.size() - 1, 'x');
  return msg;
}

std::string sse(const json& data, const char* event = nullptr) {
  std::string s;
  if (event) s += std::string("event: ") + event + "\n";
  return s + "data: " + data.dump() + "\n\n";
}

Reply error_reply(int status, json body) {
  Reply r;
  r.status = status;
  r.body = body.dump();
  return r;
}

// Each provider's error body for a fault, as that provider sends it.
Reply fault_reply(Dialect d, const std::string& fault, const json& resp, const RequestInfo& req) {
  const std::string model = req.model;
  auto openai_err = [](int status, std::string msg, json type, json code) {
    return error_reply(status, {{"error", {{"message", msg}, {"type", type}, {"param", nullptr}, {"code", code}}}});
  };
  auto anthropic_err = [](int status, std::string type, std::string msg) {
    return error_reply(status, {{"type", "error"}, {"error", {{"type", type}, {"message", msg}}}});
  };
  auto gemini_err = [](int status, std::string msg, std::string st, json details = json::array()) {
    return error_reply(status, {{"error", {{"code", status}, {"message", msg}, {"status", st}, {"details", details}}}});
  };
  auto aws_err = [](int status, std::string type, std::string msg, std::string reason = "") {
    json b{{"__type", type}, {"message", msg}};
    if (!reason.empty()) b["reason"] = reason;
    return error_reply(status, b);
  };
  const int retry = resp.value("retry_after", -1);
  Reply r;
  if (fault == "rate_limit") {
    switch (d) {
      case Dialect::openai: r = openai_err(429, "Rate limit reached for requests", "requests", "rate_limit_exceeded"); break;
      case Dialect::anthropic: r = anthropic_err(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"); break;
      case Dialect::ollama: r = error_reply(429, {{"error", "too many requests"}}); break;
      case Dialect::gemini: {
        json details = json::array();
        if (retry >= 0)
          details.push_back({{"@type", "type.googleapis.com/google.rpc.RetryInfo"}, {"retryDelay", std::to_string(retry) + "s"}});
        r = gemini_err(429, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED", details);
        return r;  // gemini gives the delay in the body only
      }
      case Dialect::kiro: r = aws_err(429, "ThrottlingException", "Rate exceeded"); break;
    }
    if (retry >= 0) r.headers.emplace_back("Retry-After", std::to_string(retry));
    return r;
  }
  if (fault == "server_error") {
    switch (d) {
      case Dialect::openai: return openai_err(500, "The server had an error while processing your request. Sorry about that!", "server_error", nullptr);
      case Dialect::anthropic: return anthropic_err(529, "overloaded_error", "Overloaded");
      case Dialect::ollama: return error_reply(500, {{"error", "llama runner process has terminated: exit status 2"}});
      case Dialect::gemini: return gemini_err(500, "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting", "INTERNAL");
      case Dialect::kiro: return aws_err(500, "InternalServerException", "Encountered an unexpected error when processing the request, please try again.");
    }
  }
  if (fault == "context_overflow") {
    switch (d) {
      case Dialect::openai:
        return openai_err(400, "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.",
                          "invalid_request_error", "context_length_exceeded");
      case Dialect::anthropic: return anthropic_err(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum");
      case Dialect::ollama: break;  // ollama truncates silently; it reports no overflow
      case Dialect::gemini: return gemini_err(400, "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", "INVALID_ARGUMENT");
      case Dialect::kiro: return aws_err(400, "ValidationException", "Input is too long.", "CONTENT_LENGTH_EXCEEDS_THRESHOLD");
    }
  }
  if (fault == "tool_unsupported") {
    switch (d) {
      case Dialect::openai: return error_reply(404, {{"error", {{"message", "No endpoints found that support tool use. To learn more about provider routing, visit: https://openrouter.ai/docs/provider-routing"}, {"code", 404}}}});
      case Dialect::anthropic: return anthropic_err(400, "invalid_request_error", "tool use is not supported for this model");
      case Dialect::ollama: return error_reply(400, {{"error", "registry.ollama.ai/library/" + model + " does not support tools"}});
      case Dialect::gemini: return gemini_err(400, "Function calling is not supported for this model.", "INVALID_ARGUMENT");
      case Dialect::kiro: return aws_err(400, "ValidationException", "Tool use is not supported for this model.");
    }
  }
  if (fault == "auth") {
    const std::string shown = resp.value("echo_key", false) ? req.key : "sk-****";
    switch (d) {
      case Dialect::openai: return openai_err(401, "Incorrect API key provided: " + shown + ". You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key");
      case Dialect::anthropic: return anthropic_err(401, "authentication_error", "invalid x-api-key " + shown);
      case Dialect::ollama: return error_reply(401, {{"error", "unauthorized"}});
      case Dialect::gemini: return gemini_err(400, "API key not valid. Please pass a valid API key. " + shown, "INVALID_ARGUMENT",
                                              json::array({{{"@type", "type.googleapis.com/google.rpc.ErrorInfo"}, {"reason", "API_KEY_INVALID"}}}));
      case Dialect::kiro: return aws_err(403, "AccessDeniedException", "The bearer token included in the request is invalid. " + shown);
    }
  }
  if (fault == "not_a_stream") {  // a proxy's page where the stream should be
    Reply page;
    page.body = "<html><head><title>Sign in</title></head><body>Welcome to the proxy</body></html>\n";
    page.headers.emplace_back("Content-Type", "text/html; charset=utf-8");
    return page;
  }
  if (fault == "bad_request") {
    switch (d) {
      case Dialect::openai: return openai_err(400, padded("Invalid value for 'temperature': must be between 0 and 2.", resp), "invalid_request_error", nullptr);
      case Dialect::anthropic: return anthropic_err(400, "invalid_request_error", padded("temperature: range: 0..1", resp));
      case Dialect::ollama: return error_reply(400, {{"error", padded("invalid options: temperature", resp)}});
      case Dialect::gemini: return gemini_err(400, padded("Invalid value at 'generation_config.temperature'", resp), "INVALID_ARGUMENT");
      case Dialect::kiro: return aws_err(400, "ValidationException", padded("Invalid input", resp));
    }
  }
  return error_reply(500, {{"error", "fakeprovider: fault '" + fault + "' is not rendered for this provider"}});
}

std::vector<std::string> render_openai(const Script& s, const RequestInfo& req, const json& resp) {
  std::vector<std::string> f;
  const bool router = req.path.find("/api/v1/") != std::string::npos;
  const bool legacy = resp.value("legacy_function_call", false);
  // Each chunk is the same envelope around its delta: made once, and each chunk dumps only its
  // delta (the bytes of dumping the whole object, whose keys nlohmann orders by name).
  const std::string model = json(req.model).dump();
  auto chunk = [&](const json& delta, const json& finish = nullptr) {
    return "data: {\"choices\":[{\"delta\":" + delta.dump() + ",\"finish_reason\":" + finish.dump() +
           ",\"index\":0}],\"created\":1700000000,\"id\":\"chatcmpl-fake\",\"model\":" + model +
           ",\"object\":\"chat.completion.chunk\"}\n\n";
  };
  f.push_back(chunk({{"role", "assistant"}, {"content", ""}}));
  const bool both = resp.value("reasoning_both", false);  // as some vLLM versions: the same text twice
  for (const auto& p : pieces(s.reasoning, s.chunk))
    f.push_back(both ? chunk({{"reasoning_content", p}, {"reasoning", p}}) : chunk({{router ? "reasoning" : "reasoning_content", p}}));
  for (const auto& p : pieces(s.stamp ? std::string() : s.text, s.chunk)) f.push_back(chunk({{"content", p}}));
  // As OpenAI streams a refusal: in a field of its own, ended by an ordinary `stop`.
  const std::string refusal = resp.value("refusal", "");
  for (const auto& p : pieces(refusal, s.chunk)) f.push_back(chunk({{"refusal", p}}));
  if (s.stamp)
    for (int i = 0; i < resp.value("events", 100); ++i) f.push_back(chunk({{"content", "@@STAMP@@"}}));
  if (resp.value("calls_without_index", false) && !s.calls.empty()) {
    // As Gemini's OpenAI-compatible endpoint streams them: every call whole, in one delta, no index.
    json calls = json::array();
    for (const auto& c : s.calls)
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.args}}}});
    f.push_back(chunk({{"tool_calls", calls}}));
  }
  for (std::size_t i = 0; i < s.calls.size() && !resp.value("calls_without_index", false); ++i) {
    const auto& c = s.calls[i];
    if (legacy) {
      f.push_back(chunk({{"function_call", {{"name", c.name}, {"arguments", ""}}}}));
      for (const auto& p : pieces(c.args, s.chunk)) f.push_back(chunk({{"function_call", {{"arguments", p}}}}));
      continue;
    }
    f.push_back(chunk({{"tool_calls", json::array({{{"index", i}, {"id", c.id}, {"type", "function"},
                                                    {"function", {{"name", c.name}, {"arguments", ""}}}}})}}));
    for (const auto& p : pieces(c.args, s.chunk))
      f.push_back(chunk({{"tool_calls", json::array({{{"index", i}, {"function", {{"arguments", p}}}}})}}));
  }
  const std::string stop = s.stop == "end" || !refusal.empty() ? "stop" : s.stop == "tool_calls" ? (legacy ? "function_call" : "tool_calls")
                           : s.stop == "length" ? "length" : "content_filter";
  f.push_back(chunk(json::object(), s.stop_word.empty() ? stop : s.stop_word));
  const bool include = req.body.value("stream_options", json::object()).value("include_usage", false);
  if (!s.raw_usage.is_null()) {
    f.push_back(sse({{"id", "chatcmpl-fake"}, {"object", "chat.completion.chunk"}, {"model", req.model},
                     {"choices", json::array()}, {"usage", s.raw_usage}}));
  } else if (include && s.usage.is_object()) {
    json usage{{"prompt_tokens", u(s.usage, "input") + u(s.usage, "cached_input")},
               {"completion_tokens", u(s.usage, "output")},
               {"total_tokens", u(s.usage, "input") + u(s.usage, "cached_input") + u(s.usage, "output")},
               {"prompt_tokens_details", {{"cached_tokens", u(s.usage, "cached_input")}}}};
    if (s.usage.contains("cost")) usage["cost"] = s.usage["cost"];
    f.push_back(sse({{"id", "chatcmpl-fake"}, {"object", "chat.completion.chunk"}, {"model", req.model},
                     {"choices", json::array()}, {"usage", usage}}));
  }
  f.push_back("data: [DONE]\n\n");
  return f;
}

std::vector<std::string> render_anthropic(const Script& s, const RequestInfo& req) {
  std::vector<std::string> f;
  auto ev = [&](const char* name, json data) { f.push_back(sse(data, name)); };
  ev("message_start", {{"type", "message_start"},
                       {"message", {{"id", "msg_fake"}, {"type", "message"}, {"role", "assistant"}, {"model", req.model},
                                    {"content", json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                                    {"usage", s.raw_usage.is_null()
                                                  ? json{{"input_tokens", u(s.usage, "input")},
                                                         {"cache_creation_input_tokens", u(s.usage, "cache_creation")},
                                                         {"cache_read_input_tokens", u(s.usage, "cached_input")},
                                                         {"output_tokens", 1}}
                                                  : s.raw_usage}}}});
  ev("ping", {{"type", "ping"}});
  int index = 0;
  if (!s.reasoning.empty()) {
    ev("content_block_start", {{"type", "content_block_start"}, {"index", index}, {"content_block", {{"type", "thinking"}, {"thinking", ""}}}});
    for (const auto& p : pieces(s.reasoning, s.chunk))
      ev("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", {{"type", "thinking_delta"}, {"thinking", p}}}});
    ev("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", {{"type", "signature_delta"}, {"signature", s.signature}}}});
    ev("content_block_stop", {{"type", "content_block_stop"}, {"index", index++}});
  }
  if (!s.text.empty()) {
    ev("content_block_start", {{"type", "content_block_start"}, {"index", index}, {"content_block", {{"type", "text"}, {"text", ""}}}});
    for (const auto& p : pieces(s.text, s.chunk))
      ev("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", {{"type", "text_delta"}, {"text", p}}}});
    ev("content_block_stop", {{"type", "content_block_stop"}, {"index", index++}});
  }
  for (const auto& c : s.calls) {
    ev("content_block_start", {{"type", "content_block_start"}, {"index", index},
                               {"content_block", {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}}}});
    for (const auto& p : pieces(c.args, s.chunk))
      ev("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", {{"type", "input_json_delta"}, {"partial_json", p}}}});
    ev("content_block_stop", {{"type", "content_block_stop"}, {"index", index++}});
  }
  const std::string stop = s.stop == "end" ? "end_turn" : s.stop == "tool_calls" ? "tool_use"
                           : s.stop == "length" ? "max_tokens" : "refusal";
  ev("message_delta", {{"type", "message_delta"}, {"delta", {{"stop_reason", stop}, {"stop_sequence", nullptr}}},
                       {"usage", s.raw_usage.is_null() ? json{{"output_tokens", u(s.usage, "output")}} : s.raw_usage}});
  ev("message_stop", {{"type", "message_stop"}});
  return f;
}

std::vector<std::string> render_ollama(const Script& s, const RequestInfo& req) {
  std::vector<std::string> f;
  auto line = [&](json message, bool done = false) {
    json j{{"model", req.model}, {"created_at", "2025-01-01T00:00:00.000000Z"}, {"message", message}, {"done", done}};
    return j;
  };
  for (const auto& p : pieces(s.reasoning, s.chunk))
    f.push_back(line({{"role", "assistant"}, {"content", ""}, {"thinking", p}}).dump() + "\n");
  for (const auto& p : pieces(s.text, s.chunk))
    f.push_back(line({{"role", "assistant"}, {"content", p}}).dump() + "\n");
  if (!s.calls.empty()) {
    json calls = json::array();
    for (const auto& c : s.calls) calls.push_back({{"function", {{"name", c.name}, {"arguments", c.args_obj}}}});
    f.push_back(line({{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}}).dump() + "\n");
  }
  auto last = line({{"role", "assistant"}, {"content", ""}}, true);
  last["done_reason"] = s.stop == "length" ? "length" : "stop";
  last["total_duration"] = 123456789;
  if (s.usage.is_object()) {
    last["prompt_eval_count"] = u(s.usage, "input") + u(s.usage, "cached_input");
    last["eval_count"] = u(s.usage, "output");
  }
  if (s.raw_usage.is_object()) last.update(s.raw_usage);
  f.push_back(last.dump() + "\n");
  return f;
}

std::vector<std::string> render_gemini(const Script& s, const RequestInfo& req) {
  std::vector<std::string> f;
  auto chunk = [&](json parts, const char* finish = nullptr, bool with_usage = false) {
    json cand{{"content", {{"parts", parts}, {"role", "model"}}}, {"index", 0}};
    if (finish) cand["finishReason"] = finish;
    json j{{"candidates", json::array({cand})}, {"modelVersion", req.model}};
    if (with_usage && s.usage.is_object()) {
      const auto thoughts = u(s.usage, "reasoning_tokens");
      j["usageMetadata"] = {{"promptTokenCount", u(s.usage, "input") + u(s.usage, "cached_input")},
                            {"candidatesTokenCount", u(s.usage, "output") - thoughts},
                            {"totalTokenCount", u(s.usage, "input") + u(s.usage, "cached_input") + u(s.usage, "output")}};
      if (thoughts) j["usageMetadata"]["thoughtsTokenCount"] = thoughts;
      if (u(s.usage, "cached_input")) j["usageMetadata"]["cachedContentTokenCount"] = u(s.usage, "cached_input");
    }
    if (with_usage && !s.raw_usage.is_null()) j["usageMetadata"] = s.raw_usage;
    return sse(j);
  };
  if (s.stop == "blocked") {  // a blocked prompt: feedback and usage, no candidate at all
    f.push_back(sse({{"promptFeedback", {{"blockReason", "SAFETY"}, {"safetyRatings", json::array()}}},
                     {"usageMetadata", {{"promptTokenCount", 12}, {"totalTokenCount", 12}}},
                     {"modelVersion", req.model}}));
    return f;
  }
  for (const auto& p : pieces(s.reasoning, s.chunk)) f.push_back(chunk(json::array({{{"text", p}, {"thought", true}}})));
  for (const auto& p : pieces(s.text, s.chunk)) f.push_back(chunk(json::array({{{"text", p}}})));
  json calls = json::array();
  for (const auto& c : s.calls)
    calls.push_back({{"functionCall", {{"name", c.name}, {"args", c.args_obj}}}, {"thoughtSignature", s.signature}});
  const char* stop = s.stop == "length" ? "MAX_TOKENS" : s.stop == "filter" ? "SAFETY" : "STOP";
  if (!calls.empty()) f.push_back(chunk(calls));
  f.push_back(chunk(json::array({{{"text", ""}}}), stop, true));
  return f;
}

std::vector<std::string> render_kiro(const Script& s) {
  std::vector<std::string> f;
  auto ev = [&](const char* type, json payload) {
    f.push_back(event_frame({{":event-type", type}, {":content-type", "application/json"}, {":message-type", "event"}},
                            payload.dump()));
  };
  for (const auto& p : pieces(s.reasoning, s.chunk)) ev("reasoningContentEvent", {{"text", p}});
  for (const auto& p : pieces(s.text, s.chunk)) ev("assistantResponseEvent", {{"content", p}});
  for (const auto& c : s.calls) {
    ev("toolUseEvent", {{"name", c.name}, {"toolUseId", c.id}, {"input", ""}});
    for (const auto& p : pieces(c.args, s.chunk)) ev("toolUseEvent", {{"name", c.name}, {"toolUseId", c.id}, {"input", p}});
    ev("toolUseEvent", {{"name", c.name}, {"toolUseId", c.id}, {"stop", true}});
  }
  ev("meteringEvent", {{"unit", "credit"}, {"unitPlural", "credits"}, {"usage", 0.05}});
  if (s.usage.is_object())
    ev("contextUsageEvent", {{"contextUsagePercentage", static_cast<double>(u(s.usage, "input")) * 100.0 / 128000.0}});
  for (const auto& usage : s.raw_usage) ev("contextUsageEvent", usage);
  return f;
}

// The provider's own error event inside an otherwise successful stream.
std::string stream_error_frame(Dialect d, const json& resp) {
  auto text = [&](const char* usual) { return padded(resp.value("error_text", std::string(usual)), resp); };
  switch (d) {
    case Dialect::openai:
      return sse({{"error", {{"message", text("Provider returned error")}, {"code", resp.value("error_code", 502)}}}});
    case Dialect::anthropic:
      return sse({{"type", "error"},
                  {"error", {{"type", resp.value("error_type", std::string("overloaded_error"))}, {"message", text("Overloaded")}}}},
                 "error");
    case Dialect::ollama: return json{{"error", text("an error was encountered while running the model: unexpected EOF")}}.dump() + "\n";
    case Dialect::gemini:
      return sse({{"error", {{"code", resp.value("error_code", 500)}, {"message", text("An internal error has occurred.")}, {"status", "INTERNAL"}}}});
    case Dialect::kiro:
      return event_frame({{":exception-type", "InternalServerException"}, {":content-type", "application/json"},
                          {":message-type", "exception"}},
                         json{{"message", text("Encountered an unexpected error")}}.dump());
  }
  return {};
}

// Fields every client reads, of the wrong type, after a first good piece of text: what a
// sloppy provider or a hostile one sends.
std::vector<std::string> malformed_frames(Dialect d, const RequestInfo& req) {
  auto kiro_ev = [](const char* type, json payload) {
    return event_frame({{":event-type", type}, {":content-type", "application/json"}, {":message-type", "event"}},
                       payload.dump());
  };
  switch (d) {
    case Dialect::openai: {
      auto chunk = [&](json delta) {
        return sse({{"id", "chatcmpl-fake"}, {"object", "chat.completion.chunk"}, {"model", req.model},
                    {"choices", json::array({{{"index", 0}, {"delta", delta}, {"finish_reason", nullptr}}})}});
      };
      return {chunk({{"content", "ok"}}),
              chunk({{"tool_calls", json::array({{{"index", "0"}, {"id", "call_0"}, {"function", {{"name", "read"}, {"arguments", "{}"}}}}})}}),
              "data: [DONE]\n\n"};
    }
    case Dialect::anthropic:
      return {sse({{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}}, "content_block_start"),
              sse({{"type", "content_block_delta"}, {"index", "0"}, {"delta", {{"type", "text_delta"}, {"text", "ok"}}}}, "content_block_delta"),
              sse({{"type", "message_stop"}}, "message_stop")};
    case Dialect::gemini:
      return {sse({{"candidates", json::array({{{"content", {{"parts", json::array({{{"text", "ok"}}})}, {"role", "model"}}}}})}}),
              sse({{"candidates", json::array({{{"content", {{"parts", json::array({1})}, {"role", "model"}}}, {"finishReason", "STOP"}}})}})};
    case Dialect::ollama:
      return {json{{"model", req.model}, {"message", {{"role", "assistant"}, {"content", "ok"}}}, {"done", false}}.dump() + "\n",
              json{{"model", req.model}, {"message", {{"role", "assistant"}, {"content", ""}}}, {"done", "true"}}.dump() + "\n"};
    case Dialect::kiro:
      return {kiro_ev("assistantResponseEvent", {{"content", "ok"}}),
              kiro_ev("toolUseEvent", {{"name", "read"}, {"toolUseId", "t1"}, {"input", "{}"}, {"stop", "true"}})};
  }
  return {};
}

// Usage counts of the wrong type or out of range, in each provider's usage slot (kiro: one
// contextUsageEvent per element).
json wrong_usage(Dialect d) {
  switch (d) {
    case Dialect::openai:
      return {{"prompt_tokens", nullptr}, {"completion_tokens", "12"}, {"prompt_tokens_details", {{"cached_tokens", "3"}}}, {"cost", "0.1"}};
    case Dialect::anthropic: return {{"input_tokens", UINT64_MAX}, {"output_tokens", "7"}, {"cache_read_input_tokens", nullptr}};
    case Dialect::gemini: return {{"promptTokenCount", nullptr}, {"candidatesTokenCount", "5"}, {"thoughtsTokenCount", json::array()}};
    case Dialect::ollama: return {{"prompt_eval_count", nullptr}, {"eval_count", "5"}};
    case Dialect::kiro: return json::array({{{"contextUsagePercentage", "50"}}, {{"contextUsagePercentage", 1e300}}});
  }
  return {};
}

// Usage counts of the right type but out of range: negative, or past any real count (two of
// 5e18 overflow an int64 sum), and a negative cost.
json out_of_range_usage(Dialect d) {
  constexpr std::int64_t huge = 5'000'000'000'000'000'000;
  switch (d) {
    case Dialect::openai:
      return {{"prompt_tokens", -1000000}, {"completion_tokens", huge}, {"prompt_tokens_details", {{"cached_tokens", huge}}}, {"cost", -3.0}};
    case Dialect::anthropic: return {{"input_tokens", huge}, {"output_tokens", -5}, {"cache_read_input_tokens", -1}};
    case Dialect::gemini: return {{"promptTokenCount", -1}, {"candidatesTokenCount", huge}, {"thoughtsTokenCount", huge}};
    case Dialect::ollama: return {{"prompt_eval_count", huge}, {"eval_count", -5}};
    case Dialect::kiro: return json::array({{{"contextUsagePercentage", -50}}});
  }
  return {};
}

std::uint32_t crc32_bitwise(const std::string& b) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : b) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put32(std::string& s, std::uint32_t v) {
  for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

std::string event_frame(const std::vector<std::pair<std::string, std::string>>& headers, const std::string& payload) {
  std::string h;
  for (const auto& [k, v] : headers) {
    h.push_back(static_cast<char>(k.size()));
    h += k;
    h.push_back(7);  // string
    h.push_back(static_cast<char>((v.size() >> 8) & 0xFF));
    h.push_back(static_cast<char>(v.size() & 0xFF));
    h += v;
  }
  std::string m;
  put32(m, static_cast<std::uint32_t>(16 + h.size() + payload.size()));
  put32(m, static_cast<std::uint32_t>(h.size()));
  put32(m, crc32_bitwise(m));
  m += h;
  m += payload;
  put32(m, crc32_bitwise(m));
  return m;
}

json malformed_route_body(const std::string& route) {
  if (route == "token")  // a good token, but an expiry no clock can hold
    return {{"token", "tid=fake;exp=never;n=0"}, {"expires_at", INT64_MAX}, {"refresh_in", "soon"}};
  if (route == "models") return json::array({{{"id", "fake-model"}, {"context_length", "65536"}}, 7, {{"id", 5}}});
  if (route == "gemini_models") return json::array({{{"name", "models/fake-model"}, {"inputTokenLimit", "65536"}}});
  if (route == "tags") return json::array({{{"name", "fake-model"}}});
  if (route == "show") return {{"model_info", {{"llama.context_length", "65536"}}}};
  return json::array();
}

Reply render(Dialect d, const json& resp, const RequestInfo& req) {
  const std::string fault = resp.value("fault", "");
  const bool streamed_fault = fault == "drop" || fault == "truncate" || fault == "hang" || fault == "stream_error" ||
                              fault == "malformed" || fault == "malformed_usage" || fault == "usage_out_of_range" ||
                              fault == "endless_data" || fault == "endless_error";
  if (!fault.empty() && !streamed_fault) return fault_reply(d, fault, resp, req);
  auto s = read_script(resp);
  if (fault == "malformed_usage") s.raw_usage = wrong_usage(d);
  if (fault == "usage_out_of_range") s.raw_usage = out_of_range_usage(d);
  Reply r;
  r.streamed = true;
  r.delay_ms = resp.value("delay_ms", 0);
  r.stamp = s.stamp;
  switch (d) {
    case Dialect::openai: r.frames = render_openai(s, req, resp); break;
    case Dialect::anthropic: r.frames = render_anthropic(s, req); break;
    case Dialect::ollama: r.frames = render_ollama(s, req); break;
    case Dialect::gemini: r.frames = render_gemini(s, req); break;
    case Dialect::kiro: r.frames = render_kiro(s); break;
  }
  const char* type = d == Dialect::ollama ? "application/x-ndjson"
                     : d == Dialect::kiro ? "application/vnd.amazon.eventstream"
                                          : "text/event-stream";
  r.headers.emplace_back("Content-Type", type);
  if (d != Dialect::ollama && d != Dialect::kiro) r.headers.emplace_back("Cache-Control", "no-cache");
  const int after = std::min<int>(resp.value("drop_after", 2), static_cast<int>(r.frames.size()));
  if (fault == "drop") r.drop_after = after;
  if (fault == "truncate") {
    r.drop_after = after;
    r.truncate = true;
    if (d == Dialect::kiro && after < static_cast<int>(r.frames.size())) {
      // kiro has no end event: a clean end is only wrong inside a frame.
      r.frames[after].resize(r.frames[after].size() / 2);
      r.drop_after = after + 1;
    }
  }
  if (fault == "hang") r.hang = true;
  if (fault == "stream_error") {
    r.frames.resize(after);
    r.frames.push_back(stream_error_frame(d, resp));
  }
  if (fault == "malformed") r.frames = malformed_frames(d, req);
  if (fault == "endless_error") {  // a 500 whose body goes on and on
    r.status = 500;
    r.frames.clear();
    r.headers = {{"Content-Type", "text/plain"}};
    r.endless = std::string(64u << 10, 'x');
    r.endless_bytes = 64u << 20;
  }
  if (fault == "endless_data") {
    r.frames.resize(std::min<std::size_t>(r.frames.size(), 1));
    constexpr std::size_t piece = 64u << 10;
    if (d == Dialect::kiro) {  // one frame of 12 MiB: the framing has no endless form
      r.frames.push_back(event_frame({{":event-type", "assistantResponseEvent"}, {":message-type", "event"}},
                                     json{{"content", std::string(12u << 20, 'x')}}.dump()));
    } else {
      // ollama: one line that never ends; SSE: data lines, never the blank line ending the event.
      r.endless = d == Dialect::ollama ? std::string(piece, 'x') : "data: " + std::string(piece - 7, 'x') + "\n";
      r.endless_bytes = 64u << 20;
    }
  }
  return r;
}

}  // namespace fakeprovider
