#include "backend/openai.hpp"

#include <map>

#include "backend/sse.hpp"

namespace ollie::backend {

namespace {

class OpenAiDecoder : public Decoder {
 public:
  OpenAiDecoder(std::shared_ptr<StreamControl> c, std::string backend)
      : Decoder(std::move(c)), backend_(std::move(backend)) {}

  void feed(std::string_view bytes) override {
    if (!sse_.feed(bytes, [this](std::string_view, std::string_view data) { on_data(data); }))
      fail(Error{ErrorClass::client, backend_ + ": unparsable response: line too long", 200, {}});
  }

  void end(bool) override { flush_calls(); }

 private:
  struct Pending {
    std::string id, name, args;
  };

  void on_data(std::string_view data) {
    if (failure) return;
    if (data == "[DONE]") {
      done = true;
      flush_calls();
      return;
    }
    auto j = parse_json(data);
    if (!j.is_object()) {
      fail(Error{ErrorClass::client, backend_ + ": unparsable response", 200, {}});
      return;
    }
    if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
      stream_error(*e);
      return;
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) read_usage(*u);
    auto ch = j.find("choices");
    if (ch == j.end() || !ch->is_array() || ch->empty()) return;
    const auto& choice = (*ch)[0];
    if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) read_delta(*d);
    else if (auto m = choice.find("message"); m != choice.end() && m->is_object()) read_delta(*m);
    if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) {
      stop_raw = f->get<std::string>();
      done = true;  // some compatible servers never send [DONE]
      flush_calls();
    }
  }

  void read_delta(const json& d) {
    for (const char* k : {"reasoning_content", "reasoning"}) reasoning(str_field(d, k));
    text(str_field(d, "content"));
    if (auto tc = d.find("tool_calls"); tc != d.end() && tc->is_array()) {
      for (const auto& t : *tc) {
        const int idx = t.value("index", 0);
        auto& p = pending_[idx];
        if (auto id = str_field(t, "id"); !id.empty()) p.id = id;
        if (auto f = t.find("function"); f != t.end() && f->is_object()) {
          p.name += str_field(*f, "name");
          p.args += str_field(*f, "arguments");
        }
      }
    }
    if (auto fc = d.find("function_call"); fc != d.end() && fc->is_object()) {
      auto& p = pending_[-1];  // legacy: one call per response
      if (p.id.empty()) p.id = "function_call";
      p.name += str_field(*fc, "name");
      p.args += str_field(*fc, "arguments");
    }
  }

  void read_usage(const json& u) {
    has_usage = true;
    const auto cached = u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()
                            ? u["prompt_tokens_details"].value("cached_tokens", std::int64_t{0})
                            : 0;
    usage.cached_input = cached;
    usage.input = u.value("prompt_tokens", std::int64_t{0}) - cached;
    usage.output = u.value("completion_tokens", std::int64_t{0});
    if (auto c = u.find("cost"); c != u.end() && c->is_number()) usage.cost = c->get<double>();
  }

  void stream_error(const json& e) {
    const std::string msg = e.is_object() ? str_field(e, "message") : e.dump();
    const int code = e.is_object() && e.contains("code") && e["code"].is_number() ? e["code"].get<int>() : 0;
    ErrorClass cls = ErrorClass::transient;
    if (code == 429) cls = ErrorClass::rate_limit;
    else if (has_overflow_marker(e.dump())) cls = ErrorClass::context_overflow;
    fail(Error{cls, backend_ + ": error in stream: " + msg, code, {}});
  }

  void flush_calls() {
    for (auto& [idx, p] : pending_) call(ToolCall{std::move(p.id), std::move(p.name), std::move(p.args)});
    pending_.clear();
  }

  std::string backend_;
  SseParser sse_;
  std::map<int, Pending> pending_;
};

}  // namespace

std::shared_ptr<Decoder> make_openai_decoder(std::shared_ptr<StreamControl> c, std::string backend) {
  return std::make_shared<OpenAiDecoder>(std::move(c), std::move(backend));
}

json OpenAiBackend::body(const ChatRequest& req, const std::string& model) const {
  const bool router = s_.name == "openrouter";
  const bool copilot = s_.name == "copilot";
  json msgs = json::array();
  if (!req.system.empty()) msgs.push_back({{"role", "system"}, {"content", req.system}});
  for (const auto& m : req.messages) {
    json o{{"role", role_name(m.role)}};
    if (m.role == Role::tool) {
      o["tool_call_id"] = m.tool_call_id;
      o["content"] = m.content;
    } else if (m.role == Role::assistant && !m.tool_calls.empty()) {
      o["content"] = m.content.empty() ? json(nullptr) : json(m.content);
      json calls = json::array();
      for (const auto& c : m.tool_calls)
        calls.push_back({{"id", c.id}, {"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", arguments_object(c.arguments).dump()}}}});
      o["tool_calls"] = std::move(calls);
    } else {
      o["content"] = m.content;
    }
    msgs.push_back(std::move(o));
  }
  json b{{"model", model}, {"messages", std::move(msgs)}, {"stream", true},
         {"stream_options", {{"include_usage", true}}}};
  if (!req.tools.empty()) b["tools"] = function_tools(req.tools);
  const auto& p = req.params;
  if (p.max_tokens) b["max_tokens"] = *p.max_tokens;
  if (p.temperature) b["temperature"] = *p.temperature;
  if (p.top_p) b["top_p"] = *p.top_p;
  if (!p.stop.empty()) b["stop"] = p.stop;
  if (copilot) return b;
  if (p.max_completion_tokens) b["max_completion_tokens"] = *p.max_completion_tokens;
  if (p.frequency_penalty) b["frequency_penalty"] = *p.frequency_penalty;
  if (p.presence_penalty) b["presence_penalty"] = *p.presence_penalty;
  if (p.response_format == "json") b["response_format"] = {{"type", "json_object"}};
  if (!p.verbosity.empty()) b["verbosity"] = p.verbosity;
  if (router) {
    if (p.top_k) b["top_k"] = *p.top_k;
    if (p.min_p) b["min_p"] = *p.min_p;
    if (p.top_a) b["top_a"] = *p.top_a;
    if (p.repetition_penalty) b["repetition_penalty"] = *p.repetition_penalty;
    json r = json::object();
    if (p.reasoning > 0) r["max_tokens"] = p.reasoning;
    else if (!p.reasoning_effort.empty()) r["effort"] = p.reasoning_effort;
    if (p.include_reasoning) r["exclude"] = !*p.include_reasoning;
    if (!r.empty()) b["reasoning"] = std::move(r);
    b["usage"] = {{"include", true}};
  } else if (!p.reasoning_effort.empty()) {
    b["reasoning_effort"] = p.reasoning_effort;
  }
  return b;
}

Result<Stream> OpenAiBackend::stream(const ChatRequest& req, EventSink sink) {
  const auto model = pick_model(req);
  auto c = control(std::move(sink));
  auto r = json_request(s_, "POST", s_.url + "/chat/completions", body(req, model).dump());
  for (const auto& h : s_.headers) r.headers.push_back(h);
  send(c, std::move(r), make_openai_decoder(c, s_.name), context(model, request_bytes(req)));
  return Stream(c);
}

void OpenAiBackend::send(std::shared_ptr<StreamControl> c, HttpRequest req, std::shared_ptr<Decoder> d,
                         StreamContext ctx) {
  if (!s_.key.empty()) req.headers.push_back("Authorization: Bearer " + s_.key);
  start_stream(c, std::move(req), std::move(d), std::move(ctx));
}

Result<std::vector<std::string>> OpenAiBackend::auth_headers() {
  std::vector<std::string> h = s_.headers;
  if (!s_.key.empty()) h.push_back("Authorization: Bearer " + s_.key);
  return h;
}

Result<std::vector<std::string>> OpenAiBackend::load_models() {
  auto auth = auth_headers();
  if (!auth.ok()) return auth.error();
  auto r = json_request(s_, "GET", s_.url + "/models", "");
  for (auto& h : *auth) r.headers.push_back(std::move(h));
  auto j = fetch_json(std::move(r));
  if (!j.ok()) return j.error();
  std::vector<std::string> ids;
  const auto& data = (*j).contains("data") ? (*j)["data"] : *j;
  if (!data.is_array()) return Error{ErrorClass::client, s_.name + ": unparsable model list", 200, {}};
  std::lock_guard lk(mu_);
  for (const auto& m : data) {
    auto id = str_field(m, "id");
    if (id.empty()) continue;
    for (const char* k : {"context_length", "max_model_len", "context_window"})
      if (m.contains(k) && m[k].is_number_integer()) ctx_cache_[id] = m[k].get<int>();
    if (m.contains("capabilities") && m["capabilities"].is_object()) {  // copilot
      const auto& lim = m["capabilities"].value("limits", json::object());
      if (lim.contains("max_context_window_tokens") && lim["max_context_window_tokens"].is_number_integer())
        ctx_cache_[id] = lim["max_context_window_tokens"].get<int>();
    }
    ids.push_back(std::move(id));
  }
  return ids;
}

Result<std::vector<std::string>> OpenAiBackend::list_models() {
  return cached_models([this] { return load_models(); });
}

Result<int> OpenAiBackend::context_length(std::string_view model) {
  {
    std::lock_guard lk(mu_);
    if (auto it = ctx_cache_.find(model); it != ctx_cache_.end()) return it->second;
    if (models_) return 128000;  // the list is loaded and reports no length (OpenAI's own)
  }
  auto l = list_models();
  if (!l.ok()) return l.error();
  std::lock_guard lk(mu_);
  if (auto it = ctx_cache_.find(model); it != ctx_cache_.end()) return it->second;
  return 128000;
}

std::unique_ptr<Backend> make_openai(BackendSettings s, HttpEngine& e) {
  return std::make_unique<OpenAiBackend>(std::move(s), e);
}

}  // namespace ollie::backend
