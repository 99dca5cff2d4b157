#include "backend/openai.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "backend/sse.hpp"

namespace ollie::backend {

namespace {

class OpenAiDecoder : public Decoder {
 public:
  using Decoder::Decoder;

  void feed(std::string_view bytes) override {
    if (!sse_.feed(bytes, [this](std::string_view, std::string_view data) { on_data(data); })) event_too_long();
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
      fail(unparsable(backend_, data));
      return;
    }
    if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
      stream_error(*e);
      return;
    }
    if (auto u = obj_field(j, "usage")) read_usage(*u);
    Strict f;
    const json* choice = nullptr;
    if (auto ch = f.array(j, "choices"); ch && !ch->empty()) choice = f.element((*ch)[0], "choices[0]");
    if (choice) {
      if (auto d = f.object(*choice, "delta")) read_delta(*d, f);
      else if (auto m = f.object(*choice, "message")) read_delta(*m, f);
    }
    if (malformed(f) || failure) return;
    if (auto stop = choice ? f.str(*choice, "finish_reason") : ""; !stop.empty()) {
      stop_raw = refused_ ? "refusal" : stop;
      done = true;  // some compatible servers never send [DONE]
      flush_calls();
    }
    malformed(f);
  }

  // Everything of a delta carries the answer: a wrong type is a malformed response.
  void read_delta(const json& d, Strict& f) {
    // Servers name it either way; some fill both with the same text: the first one counts.
    for (const char* k : {"reasoning_content", "reasoning"})
      if (auto r = f.str(d, k); !r.empty()) {
        reasoning(r);
        break;
      }
    text(f.str(d, "content"));
    // A refusal comes in a field of its own, and ends as an ordinary `stop`: shown as the
    // answer's text, and the turn stopped for it (§8.2).
    if (auto r = f.str(d, "refusal"); !r.empty()) {
      text(r);
      refused_ = true;
    }
    if (auto tc = f.array(d, "tool_calls"))
      for (const auto& t : *tc) {
        const json* e = f.element(t, "a tool call");
        if (!e) return;
        const auto id = f.str(*e, "id");
        std::int64_t slot = 0;
        if (auto index = f.integer(*e, "index")) {
          slot = *index;
        } else {
          // Without an index (some compatible servers), a new id starts the next call.
          if (!id.empty() && (!unindexed_ || pending_[*unindexed_].id != id))
            unindexed_ = pending_.empty() ? 0 : pending_.rbegin()->first + 1;
          slot = unindexed_.value_or(0);
        }
        auto& p = pending_[slot];
        if (!id.empty()) p.id = id;
        if (auto fn = f.object(*e, "function")) append(p, f.str(*fn, "name"), f.str(*fn, "arguments"));
      }
    if (auto fc = f.object(d, "function_call")) {
      auto& p = pending_[-1];  // legacy: one call per response
      if (p.id.empty()) p.id = generated_id();
      append(p, f.str(*fc, "name"), f.str(*fc, "arguments"));
    }
  }

  void append(Pending& p, std::string_view name, std::string_view args) {
    p.name += name;
    p.args += args;
    too_long(p.name.size() + p.args.size(), "tool call '" + p.name.substr(0, 64) + "' arguments");
  }

  // Usage counts of the wrong type are ignored: without a count of either side there is no usage,
  // and the engine estimates it (§8.14) rather than count the request as free.
  void read_usage(const json& u) {
    const auto in = count_field(u, "prompt_tokens"), out = count_field(u, "completion_tokens");
    if (!in && !out) return;
    has_usage = true;
    const json* details = obj_field(u, "prompt_tokens_details");
    // prompt_tokens includes the cached ones: never fewer than those.
    const auto cached = std::min(details ? count_field(*details, "cached_tokens").value_or(0) : 0, in.value_or(0));
    usage.cached_input = cached;
    usage.input = in.value_or(0) - cached;
    usage.output = out.value_or(0);
    if (auto c = cost_field(u, "cost")) usage.cost = *c;
  }

  // Already a failure: whatever of its details has the wrong type is left out.
  void stream_error(const json& e) {
    const std::string whole = dump_json(e);
    const std::string msg = e.is_object() ? str_field(e, "message") : whole;
    const auto code = int_field(e, "code").value_or(0);
    const int status = code > 0 && code < 1000 ? static_cast<int>(code) : 0;
    fail(in_stream_error(backend_, status, msg, whole));
  }

  void flush_calls() {
    for (auto& [idx, p] : pending_) call(ToolCall{std::move(p.id), std::move(p.name), std::move(p.args)});
    pending_.clear();
    unindexed_.reset();
  }

  SseParser sse_;
  std::map<std::int64_t, Pending> pending_;
  std::optional<std::int64_t> unindexed_;  ///< the slot of the last call that came without an index
  bool refused_ = false;
};

}  // namespace

std::shared_ptr<Decoder> make_openai_decoder(std::shared_ptr<StreamControl> c, std::string backend) {
  return std::make_shared<OpenAiDecoder>(std::move(c), std::move(backend));
}

namespace {

json message_json(const Message& m) {
  json o{{"role", role_name(m.role)}};
  if (m.role == Role::tool) {
    o["tool_call_id"] = m.tool_call_id;
    o["content"] = m.content;
  } else if (m.role == Role::assistant && !m.tool_calls.empty()) {
    o["content"] = m.content.empty() ? json(nullptr) : json(m.content);
    json calls = json::array();
    for (const auto& c : m.tool_calls)
      calls.push_back({{"id", c.id}, {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", dump_json(arguments_object(c.arguments))}}}});
    o["tool_calls"] = std::move(calls);
  } else {
    o["content"] = m.content;
  }
  return o;
}

}  // namespace

std::string OpenAiBackend::body(const ChatRequest& req, const std::string& model) const {
  const Message system{Role::system, req.system, {}, {}, {}, {}, {}};
  std::vector<const Message*> msgs;
  msgs.reserve(req.messages.size() + 1);
  if (!req.system.empty()) msgs.push_back(&system);
  for (const auto& m : req.messages) msgs.push_back(&m);
  // The tools go in while the messages are still empty, so no search meets a message's text.
  auto text = dump_json(envelope(req, model));
  if (!req.tools.empty()) text = splice_array(std::move(text), "tools", wire_.tools(req.tools, function_tools));
  return splice_array(std::move(text), "messages", wire_.messages(msgs, message_json));
}

std::optional<int> OpenAiBackend::max_tokens_sent(const GenerationParams& p) const {
  if (p.max_completion_tokens && s_.name != "copilot") return p.max_completion_tokens;
  return p.max_tokens;
}

json OpenAiBackend::envelope(const ChatRequest& req, const std::string& model) const {
  const bool router = s_.name == "openrouter";
  const bool copilot = s_.name == "copilot";
  json b{{"model", model}, {"messages", json::array()}, {"stream", true},
         {"stream_options", {{"include_usage", true}}}};
  if (!req.tools.empty()) b["tools"] = json::array();  // spliced in by body()
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
  auto r = json_request(s_, "POST", s_.url + "/chat/completions", body(req, model));
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
  auto r = fetch_request(s_, "GET", s_.url + "/models");
  for (auto& h : *auth) r.headers.push_back(std::move(h));
  auto j = fetch_json(std::move(r));
  if (!j.ok()) return j.error();
  // The list must be one; an entry without a string id, or a length of the wrong type, is
  // skipped (the model is then unlisted, or gets the default length).
  Strict f;
  const json* data = j->is_array() ? &*j : f.array(*j, "data");
  if (!data) return malformed(s_.name, f.ok() ? "no model list" : f.problem());
  std::vector<std::string> ids;
  std::lock_guard lk(mu_);
  for (const auto& m : *data) {
    auto id = str_field(m, "id");
    if (id.empty()) continue;
    for (const char* k : {"context_length", "max_model_len", "context_window"})
      if (auto n = length_field(m, k)) ctx_cache_[id] = *n;
    if (auto caps = obj_field(m, "capabilities"))  // copilot
      if (auto lim = obj_field(*caps, "limits"))
        if (auto n = length_field(*lim, "max_context_window_tokens")) ctx_cache_[id] = *n;
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
