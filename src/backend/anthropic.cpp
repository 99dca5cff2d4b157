#include <map>

#include "backend/http_backend.hpp"
#include "backend/sse.hpp"

namespace ollie::backend {

namespace {

class AnthropicDecoder : public Decoder {
 public:
  explicit AnthropicDecoder(std::shared_ptr<StreamControl> c) : Decoder(std::move(c), "anthropic") {}

  void feed(std::string_view bytes) override {
    if (!sse_.feed(bytes, [this](std::string_view, std::string_view data) { on_data(data); })) event_too_long();
  }

 private:
  struct Block {
    std::string type, id, name, text, signature;
    json whole;  // redacted_thinking: kept as is
  };

  void on_data(std::string_view data) {
    if (failure) return;
    auto j = parse_json(data);
    if (!j.is_object()) {
      fail(unparsable("anthropic", data));
      return;
    }
    // The event's type, block index, block and delta carry the answer (a wrong type is a
    // malformed response); usage counts of the wrong type are ignored.
    Strict f;
    const auto type = f.str(j, "type");
    if (type == "message_start") {
      if (auto m = obj_field(j, "message"))
        if (auto u = obj_field(*m, "usage")) read_usage(*u);
    } else if (type == "content_block_start") {
      const auto index = f.integer(j, "index").value_or(0);
      const json* cb = f.object(j, "content_block");
      if (!cb) cb = &empty_object();
      Block b;
      b.type = f.str(*cb, "type");
      b.id = f.str(*cb, "id");
      b.name = f.str(*cb, "name");
      if (b.type == "redacted_thinking") b.whole = *cb;
      if (b.type == "text") text(f.str(*cb, "text"));
      blocks_[index] = std::move(b);
    } else if (type == "content_block_delta") {
      auto& b = blocks_[f.integer(j, "index").value_or(0)];
      const json* d = f.object(j, "delta");
      if (!d) d = &empty_object();
      const auto dt = f.str(*d, "type");
      if (dt == "text_delta") text(f.str(*d, "text"));
      else if (dt == "thinking_delta") {
        auto t = f.str(*d, "thinking");
        reasoning(t);
        b.text += t;
      } else if (dt == "signature_delta") b.signature += f.str(*d, "signature");
      else if (dt == "input_json_delta") b.text += f.str(*d, "partial_json");
      if (b.type == "tool_use") too_long(b.text.size(), "tool call '" + b.name.substr(0, 64) + "' arguments");
      else too_long(b.text.size() + b.signature.size(), b.type.substr(0, 64) + " block contents");
    } else if (type == "content_block_stop") {
      auto it = blocks_.find(f.integer(j, "index").value_or(0));
      if (malformed(f) || it == blocks_.end()) return;
      auto& b = it->second;
      if (b.type == "tool_use") {
        // No byte of input is "" as the other backends give it: {} to run, but a call cut off
        // at max_tokens before its first byte is told apart (§8.2) and not run with no arguments.
        call(ToolCall{b.id, b.name, b.text});
      } else if (b.type == "thinking") {
        reasoning_items.push_back(dump_json(json{{"type", "thinking"}, {"thinking", b.text}, {"signature", b.signature}}));
      } else if (b.type == "redacted_thinking") {
        reasoning_items.push_back(dump_json(b.whole));
      }
      blocks_.erase(it);
    } else if (type == "message_delta") {
      if (auto d = f.object(j, "delta"))
        if (auto s = f.str(*d, "stop_reason"); !s.empty()) stop_raw = s;
      if (auto u = obj_field(j, "usage")) read_usage(*u);
    } else if (type == "message_stop") {
      done = true;
    } else if (type == "error") {
      const json* e = obj_field(j, "error");
      if (!e) e = &empty_object();
      const auto et = str_field(*e, "type");
      const auto msg = str_field(*e, "message");
      ErrorClass cls = ErrorClass::client;
      if (et == "overloaded_error" || et == "api_error") cls = ErrorClass::transient;
      else if (et == "rate_limit_error") cls = ErrorClass::rate_limit;
      else if (has_overflow_marker(msg)) cls = ErrorClass::context_overflow;
      // A transient one reads as its HTTP form does (529 overloaded, 500 api_error).
      if (cls == ErrorClass::transient)
        fail(Error{cls, "anthropic: server error: " + std::string(et == "overloaded_error" ? "529 " : "500 ") + msg, 0, {}});
      else
        fail(Error{cls, "anthropic: " + et + ": " + msg, 0, {}});
    }
    malformed(f);
  }

  // message_start carries input and cache counts; message_delta the cumulative output.
  // A count of the wrong type or out of range is ignored; none of the right type is no usage (the engine
  // estimates it, §8.14).
  void read_usage(const json& u) {
    for (auto [key, field] : {std::pair{"input_tokens", &usage.input},
                              std::pair{"output_tokens", &usage.output},
                              std::pair{"cache_read_input_tokens", &usage.cached_input},
                              std::pair{"cache_creation_input_tokens", &usage.cache_creation}})
      if (auto n = count_field(u, key)) {
        *field = *n;
        has_usage = true;
      }
  }

  SseParser sse_;
  std::map<std::int64_t, Block> blocks_;
};

class AnthropicBackend : public HttpBackend {
 public:
  using HttpBackend::HttpBackend;

  // Anthropic requires max_tokens: 8192 when unset (§8.16).
  std::optional<int> max_tokens_sent(const GenerationParams& p) const override { return p.max_tokens.value_or(8192); }

  Result<Stream> stream(const ChatRequest& req, EventSink sink) override {
    const auto model = pick_model(req);
    const auto& p = req.params;
    const int max_tokens = *max_tokens_sent(p);
    if (p.reasoning > 0 && max_tokens <= p.reasoning)
      return Error{ErrorClass::config,
                   "anthropic: maxTokens " + std::to_string(max_tokens) + " must exceed reasoning " +
                       std::to_string(p.reasoning), 0, {}};
    json b{{"model", model}, {"max_tokens", max_tokens}, {"stream", true}, {"messages", messages(req)}};
    std::string system = req.system;
    for (const auto& m : req.messages)
      if (m.role == Role::system) system += (system.empty() ? "" : "\n\n") + m.content;
    if (!system.empty())
      b["system"] = json::array({{{"type", "text"}, {"text", system}, {"cache_control", {{"type", "ephemeral"}}}}});
    if (!req.tools.empty()) {
      json tools = json::array();
      for (const auto& t : req.tools) {
        auto params = parse_json(t.parameters);
        tools.push_back({{"name", t.name}, {"description", t.description},
                         {"input_schema", params.is_object() ? params : json{{"type", "object"}}}});
      }
      tools.back()["cache_control"] = {{"type", "ephemeral"}};
      b["tools"] = std::move(tools);
    }
    if (p.reasoning > 0) {
      b["thinking"] = {{"type", "enabled"}, {"budget_tokens", p.reasoning}};
    } else {
      if (p.temperature) b["temperature"] = *p.temperature;
      if (p.top_k) b["top_k"] = *p.top_k;
    }
    if (p.top_p) b["top_p"] = *p.top_p;
    if (!p.stop.empty()) b["stop_sequences"] = p.stop;

    auto c = control(std::move(sink));
    auto r = json_request(s_, "POST", s_.url + "/v1/messages", dump_json(b));
    add_auth(r.headers);
    start_stream(c, std::move(r), std::make_shared<AnthropicDecoder>(c), context(model, request_bytes(req)));
    return Stream(c);
  }

  Result<std::vector<std::string>> list_models() override {
    return cached_models([this]() -> Result<std::vector<std::string>> {
      auto r = fetch_request(s_, "GET", s_.url + "/v1/models?limit=1000");  // the default page is 20
      add_auth(r.headers);
      auto j = fetch_json(std::move(r));
      if (!j.ok()) return j.error();
      Strict f;
      const json* data = f.array(*j, "data");
      if (!data) return malformed(s_.name, f.ok() ? "no model list" : f.problem());
      std::vector<std::string> ids;
      for (const auto& m : *data)
        if (auto id = str_field(m, "id"); !id.empty()) ids.push_back(id);
      return ids;
    });
  }

  Result<int> context_length(std::string_view) override { return 200000; }
  std::optional<int> known_context_length() const override { return 200000; }

 private:
  void add_auth(std::vector<std::string>& h) const {
    h.push_back("x-api-key: " + s_.key);
    h.push_back("anthropic-version: 2023-06-01");
  }

  // Anthropic alternates user and assistant turns: tool results go into a user turn as
  // tool_result blocks, followed by any context text; consecutive same-role turns merge.
  json messages(const ChatRequest& req) const {
    json out = json::array();
    auto append = [&](const char* role, json blocks) {
      if (blocks.empty()) return;
      if (!out.empty() && out.back()["role"] == role) {
        for (auto& b : blocks) out.back()["content"].push_back(std::move(b));
      } else {
        out.push_back({{"role", role}, {"content", std::move(blocks)}});
      }
    };
    for (const auto& m : req.messages) {
      json blocks = json::array();
      switch (m.role) {
        case Role::system: continue;
        case Role::user:
          if (!m.content.empty()) blocks.push_back({{"type", "text"}, {"text", m.content}});
          append("user", std::move(blocks));
          break;
        case Role::tool:
          blocks.push_back({{"type", "tool_result"}, {"tool_use_id", m.tool_call_id}, {"content", m.content}});
          append("user", std::move(blocks));
          break;
        case Role::assistant:
          if (m.reasoning_backend == s_.name)
            for (const auto& item : m.reasoning_items)
              if (auto j = parse_json(item); j.is_object()) blocks.push_back(std::move(j));
          if (!m.content.empty()) blocks.push_back({{"type", "text"}, {"text", m.content}});
          for (const auto& c : m.tool_calls)
            blocks.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", arguments_object(c.arguments)}});
          append("assistant", std::move(blocks));
          break;
      }
    }
    if (!out.empty()) {
      auto& last = out.back()["content"].back();
      last["cache_control"] = {{"type", "ephemeral"}};
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Backend> make_anthropic(BackendSettings s, HttpEngine& e) {
  return std::make_unique<AnthropicBackend>(std::move(s), e);
}

}  // namespace ollie::backend
