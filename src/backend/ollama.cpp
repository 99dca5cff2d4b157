#include <algorithm>

#include "backend/http_backend.hpp"
#include "backend/ndjson.hpp"

namespace ollie::backend {

namespace {

constexpr int num_ctx_cap = 32768;

class OllamaDecoder : public Decoder {
 public:
  OllamaDecoder(std::shared_ptr<StreamControl> c, std::string model) : Decoder(std::move(c), "ollama"), model_(std::move(model)) {}

  void feed(std::string_view bytes) override {
    if (!nd_.feed(bytes, [this](std::string_view l) { on_line(l); })) event_too_long();
  }

  void end(bool clean) override {
    if (clean) nd_.finish([this](std::string_view l) { on_line(l); });
  }

 private:
  void on_line(std::string_view line) {
    if (failure) return;
    auto j = parse_json(line);
    if (!j.is_object()) {
      fail(unparsable("ollama", line));
      return;
    }
    if (auto e = str_field(j, "error"); !e.empty()) {
      if (has_tool_unsupported_marker(e))  // as the same refusal answered with a 400 (§8.2)
        fail(Error{ErrorClass::tool_unsupported, "model does not support tool calls: " + model_, 0, {}});
      else
        fail(in_stream_error("ollama", 0, e, e));  // `ollama: server error: …` when retried (§8.2)
      return;
    }
    // The message, its calls and the done marker carry the answer: a wrong type is a
    // malformed response. Counts of the wrong type are ignored.
    Strict f;
    if (auto m = f.object(j, "message")) {
      reasoning(f.str(*m, "thinking"));
      text(f.str(*m, "content"));
      if (auto tc = f.array(*m, "tool_calls"))
        for (const auto& item : *tc)
          if (!read_call(item, f)) break;
    }
    if (malformed(f) || failure) return;
    if (f.boolean(j, "done").value_or(false)) {
      done = true;
      stop_raw = f.str(j, "done_reason");
      const auto in = count_field(j, "prompt_eval_count"), out = count_field(j, "eval_count");
      if (in || out) {
        has_usage = true;
        usage.input = in.value_or(0);
        usage.output = out.value_or(0);
      }
    }
    malformed(f);
  }

  // Ollama sends each call whole; its arguments are an object (or, from some servers, text).
  bool read_call(const json& item, Strict& f) {
    const json* t = f.element(item, "a tool call");
    if (!t) return false;
    const json* fn = f.object(*t, "function");
    if (!fn) fn = &empty_object();
    const auto name = f.str(*fn, "name");
    std::string args = "{}";
    if (const json* a = f.any(*fn, "arguments")) {
      if (a->is_string()) args = a->get<std::string>();
      else if (a->is_object()) args = dump_json(*a);
      else f.problem("\"arguments\" is " + std::string(type_phrase(*a)) + ", not an object");
    }
    if (!f.ok() || too_long(args.size(), "tool call '" + name.substr(0, 64) + "' arguments")) return false;
    call(ToolCall{f.str(*t, "id"), name, std::move(args)});
    return true;
  }

  NdjsonParser nd_;
  std::string model_;
};

class OllamaBackend : public HttpBackend {
 public:
  using HttpBackend::HttpBackend;

  Result<Stream> stream(const ChatRequest& req, EventSink sink) override {
    const auto model = pick_model(req);
    auto c = control(std::move(sink));
    auto ctx = context(model, request_bytes(req));
    if (auto n = cached_num_ctx(model)) {
      send_chat(c, req, model, *n, std::move(ctx));
      return Stream(c);
    }
    // The model's length comes from /api/show first, asynchronously, then the chat.
    auto show = fetch_request(s_, "POST", s_.url + "/api/show", dump_json(json{{"model", model}}));
    c->start(std::move(show), collect([this, c, req, model, ctx](HttpResponse r) {
      if (auto e = response_error(r, ctx)) return c->fail(*e);
      send_chat(c, req, model, remember(model, show_length(parse_json(r.body))), ctx);
    }));
    return Stream(c);
  }

  Result<std::vector<std::string>> list_models() override {
    return cached_models([this]() -> Result<std::vector<std::string>> {
      auto j = fetch_json(fetch_request(s_, "GET", s_.url + "/api/tags"));
      if (!j.ok()) return j.error();
      Strict f;
      const json* models = f.array(*j, "models");
      if (!models) return malformed(s_.name, f.ok() ? "no model list" : f.problem());
      std::vector<std::string> names;
      for (const auto& m : *models)
        if (auto n = str_field(m, "name"); !n.empty()) names.push_back(n);
      return names;
    });
  }

  /// The num_ctx sent: min(/api/show, [ollama] num_ctx, 32768), spec §8.16.
  Result<int> context_length(std::string_view model) override {
    if (auto n = cached_num_ctx(model)) return *n;
    auto j = fetch_json(fetch_request(s_, "POST", s_.url + "/api/show", dump_json(json{{"model", model}})),
                        std::string(model));
    if (!j.ok()) return j.error();
    return remember(std::string(model), show_length(*j));
  }

 private:
  std::optional<int> cached_num_ctx(std::string_view model) const {
    std::lock_guard lk(mu_);
    if (auto it = ctx_cache_.find(model); it != ctx_cache_.end()) return it->second;
    return std::nullopt;
  }

  int remember(const std::string& model, std::optional<int> shown) {
    int n = std::min(shown.value_or(num_ctx_cap), num_ctx_cap);
    if (s_.num_ctx) n = std::min(n, *s_.num_ctx);
    std::lock_guard lk(mu_);
    ctx_cache_[model] = n;
    return n;
  }

  // model_info holds "<architecture>.context_length"; a length of the wrong type is ignored
  // (the cap is used).
  static std::optional<int> show_length(const json& j) {
    const json* info = obj_field(j, "model_info");
    if (!info) return std::nullopt;
    for (const auto& [k, v] : info->items())
      if (k.size() > 15 && k.ends_with(".context_length"))
        if (auto n = as_length(v)) return n;
    return std::nullopt;
  }

  void send_chat(const std::shared_ptr<StreamControl>& c, const ChatRequest& req, const std::string& model,
                 int num_ctx, StreamContext ctx) {
    json msgs = json::array();
    if (!req.system.empty()) msgs.push_back({{"role", "system"}, {"content", req.system}});
    std::map<std::string, std::string> call_names;
    for (const auto& m : req.messages) {
      json o{{"role", role_name(m.role)}, {"content", m.content}};
      if (m.role == Role::assistant && !m.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& tc : m.tool_calls) {
          call_names[tc.id] = tc.name;
          calls.push_back({{"function", {{"name", tc.name}, {"arguments", arguments_object(tc.arguments)}}}});
        }
        o["tool_calls"] = std::move(calls);
      }
      if (m.role == Role::tool && call_names.count(m.tool_call_id)) o["tool_name"] = call_names[m.tool_call_id];
      msgs.push_back(std::move(o));
    }
    const auto& p = req.params;
    json opts{{"num_ctx", num_ctx}};
    if (p.max_tokens) opts["num_predict"] = *p.max_tokens;
    if (p.temperature) opts["temperature"] = *p.temperature;
    if (p.top_p) opts["top_p"] = *p.top_p;
    if (p.top_k) opts["top_k"] = *p.top_k;
    if (p.min_p) opts["min_p"] = *p.min_p;
    if (p.repetition_penalty) opts["repeat_penalty"] = *p.repetition_penalty;
    if (p.presence_penalty) opts["presence_penalty"] = *p.presence_penalty;
    if (p.frequency_penalty) opts["frequency_penalty"] = *p.frequency_penalty;
    if (!p.stop.empty()) opts["stop"] = p.stop;
    json b{{"model", model}, {"messages", std::move(msgs)}, {"stream", true}, {"options", std::move(opts)}};
    if (!req.tools.empty()) b["tools"] = function_tools(req.tools);
    if (p.reasoning > 0 || !p.reasoning_effort.empty() || p.include_reasoning.value_or(false)) b["think"] = true;
    if (p.response_format == "json") b["format"] = "json";
    start_stream(c, json_request(s_, "POST", s_.url + "/api/chat", dump_json(b)), std::make_shared<OllamaDecoder>(c, model),
                 std::move(ctx));
  }
};

}  // namespace

std::unique_ptr<Backend> make_ollama(BackendSettings s, HttpEngine& e) {
  return std::make_unique<OllamaBackend>(std::move(s), e);
}

}  // namespace ollie::backend
