#include <algorithm>
#include <map>

#include "backend/http_backend.hpp"
#include "backend/sse.hpp"

namespace ollie::backend {

namespace {

class GeminiDecoder : public Decoder {
 public:
  explicit GeminiDecoder(std::shared_ptr<StreamControl> c) : Decoder(std::move(c), "gemini") {}

  void feed(std::string_view bytes) override {
    if (!sse_.feed(bytes, [this](std::string_view, std::string_view data) { on_data(data); })) event_too_long();
  }

 private:
  void on_data(std::string_view data) {
    if (failure) return;
    auto j = parse_json(data);
    if (!j.is_object()) {
      fail(unparsable("gemini", data));
      return;
    }
    if (auto e = obj_field(j, "error")) {  // its details of the wrong type are left out
      const auto msg = str_field(*e, "message");
      const auto code = int_field(*e, "code").value_or(0);
      const int status = code > 0 && code < 1000 ? static_cast<int>(code) : 0;
      fail(in_stream_error("gemini", status, msg, msg));
      return;
    }
    if (auto u = obj_field(j, "usageMetadata")) {
      // Cumulative in every chunk. promptTokenCount includes the cached tokens; thoughts
      // are counted apart from the candidates. Counts of the wrong type are ignored; without a
      // prompt or candidates count there is no usage (the engine estimates it, §8.14).
      if (count_field(*u, "promptTokenCount") || count_field(*u, "candidatesTokenCount")) has_usage = true;
      const auto count = [&](const char* k) { return count_field(*u, k).value_or(0); };
      usage.cached_input = std::min(count("cachedContentTokenCount"), count("promptTokenCount"));
      usage.input = count("promptTokenCount") - usage.cached_input;
      usage.output = count("candidatesTokenCount") + count("thoughtsTokenCount");
    }
    // A blocked prompt has feedback and no candidate: a stop like a filtered answer (§8.2).
    if (auto fb = obj_field(j, "promptFeedback"))
      if (auto reason = str_field(*fb, "blockReason"); !reason.empty()) {
        stop_raw = reason;
        done = true;
        return;
      }
    // Candidates, their parts and the finish reason carry the answer: a wrong type is a
    // malformed response.
    Strict f;
    const json* cand = nullptr;
    if (auto cands = f.array(j, "candidates"); cands && !cands->empty()) cand = f.element((*cands)[0], "candidates[0]");
    if (!cand) {
      malformed(f);
      return;
    }
    if (auto content = f.object(*cand, "content"))
      if (auto parts = f.array(*content, "parts"))
        for (const auto& item : *parts) {
          const json* part = f.element(item, "a part");
          if (!part || !read_part(*part, f)) break;
        }
    if (malformed(f) || failure) return;
    if (auto stop = f.str(*cand, "finishReason"); !stop.empty()) {
      stop_raw = stop;
      done = true;  // gemini's stream has no end marker of its own
    }
    malformed(f);
  }

  // False when the stream must stop.
  bool read_part(const json& part, Strict& f) {
    if (auto fc = f.object(part, "functionCall")) {
      std::string id = f.str(*fc, "id");
      if (id.empty()) id = generated_id();
      const auto name = f.str(*fc, "name");
      const json* args = f.object(*fc, "args");
      auto arguments = dump_json(args ? *args : empty_object());
      if (!f.ok() || too_long(arguments.size(), "tool call '" + name.substr(0, 64) + "' arguments")) return false;
      if (auto sig = f.str(part, "thoughtSignature"); !sig.empty())
        reasoning_items.push_back(dump_json(json{{"call_id", id}, {"thoughtSignature", sig}}));
      call(ToolCall{id, name, std::move(arguments)});
    } else if (f.boolean(part, "thought").value_or(false)) {
      reasoning(f.str(part, "text"));
    } else {
      text(f.str(part, "text"));
    }
    return f.ok();
  }

  SseParser sse_;
};

// Gemini's schema dialect is an OpenAPI subset: it rejects some JSON Schema keywords.
void strip_schema(json& j) {
  if (j.is_object()) {
    for (const char* k : {"$schema", "additionalProperties", "$id", "$defs", "definitions"}) j.erase(k);
    for (auto& [k, v] : j.items()) strip_schema(v);
  } else if (j.is_array()) {
    for (auto& v : j) strip_schema(v);
  }
}

class GeminiBackend : public HttpBackend {
 public:
  using HttpBackend::HttpBackend;

  Result<Stream> stream(const ChatRequest& req, EventSink sink) override {
    const auto model = pick_model(req);
    json b{{"contents", contents(req)}};
    std::string system = req.system;
    for (const auto& m : req.messages)
      if (m.role == Role::system) system += (system.empty() ? "" : "\n\n") + m.content;
    if (!system.empty()) b["systemInstruction"] = {{"parts", json::array({{{"text", system}}})}};
    if (!req.tools.empty()) {
      json decls = json::array();
      for (const auto& t : req.tools) {
        auto params = parse_json(t.parameters);
        if (!params.is_object()) params = json{{"type", "object"}};
        strip_schema(params);
        decls.push_back({{"name", t.name}, {"description", t.description}, {"parameters", params}});
      }
      b["tools"] = json::array({{{"functionDeclarations", std::move(decls)}}});
    }
    const auto& p = req.params;
    json g = json::object();
    if (p.max_tokens) g["maxOutputTokens"] = *p.max_tokens;
    if (p.temperature) g["temperature"] = *p.temperature;
    if (p.top_p) g["topP"] = *p.top_p;
    if (p.top_k) g["topK"] = *p.top_k;
    if (p.presence_penalty) g["presencePenalty"] = *p.presence_penalty;
    if (p.frequency_penalty) g["frequencyPenalty"] = *p.frequency_penalty;
    if (!p.stop.empty()) g["stopSequences"] = p.stop;
    if (p.response_format == "json") g["responseMimeType"] = "application/json";
    if (p.reasoning > 0 || p.include_reasoning.value_or(false)) {
      json t{{"includeThoughts", p.include_reasoning.value_or(true)}};
      if (p.reasoning > 0) t["thinkingBudget"] = p.reasoning;
      g["thinkingConfig"] = std::move(t);
    }
    if (!g.empty()) b["generationConfig"] = std::move(g);

    auto c = control(std::move(sink));
    auto r = json_request(s_, "POST", s_.url + "/v1beta/models/" + model + ":streamGenerateContent?alt=sse", dump_json(b));
    r.headers.push_back("x-goog-api-key: " + s_.key);
    start_stream(c, std::move(r), std::make_shared<GeminiDecoder>(c), context(model, request_bytes(req)));
    return Stream(c);
  }

  Result<std::vector<std::string>> list_models() override {
    return cached_models([this]() -> Result<std::vector<std::string>> {
      // One page of at most 1000: the default page (50) leaves models out, and with them their
      // context lengths (§8.16).
      auto r = fetch_request(s_, "GET", s_.url + "/v1beta/models?pageSize=1000");
      r.headers.push_back("x-goog-api-key: " + s_.key);
      auto j = fetch_json(std::move(r));
      if (!j.ok()) return j.error();
      Strict f;
      const json* models = f.array(*j, "models");
      if (!models) return malformed(s_.name, f.ok() ? "no model list" : f.problem());
      std::vector<std::string> ids;
      std::lock_guard lk(mu_);
      for (const auto& m : *models) {
        auto id = str_field(m, "name");
        if (id.rfind("models/", 0) == 0) id.erase(0, 7);
        if (id.empty()) continue;
        if (auto n = length_field(m, "inputTokenLimit")) ctx_cache_[id] = *n;
        ids.push_back(std::move(id));
      }
      return ids;
    });
  }

  Result<int> context_length(std::string_view model) override {
    auto l = list_models();
    if (!l.ok()) return l.error();
    std::lock_guard lk(mu_);
    if (auto it = ctx_cache_.find(model); it != ctx_cache_.end()) return it->second;
    return Error{ErrorClass::client, "gemini: unknown model: " + std::string(model), 0, {}};
  }

 private:
  // Roles are user and model; consecutive same-role contents merge. A function response
  // names its function, found from the call it answers.
  json contents(const ChatRequest& req) const {
    json out = json::array();
    std::map<std::string, std::string> names;
    auto append = [&](const char* role, json parts) {
      if (parts.empty()) return;
      if (!out.empty() && out.back()["role"] == role) {
        for (auto& p : parts) out.back()["parts"].push_back(std::move(p));
      } else {
        out.push_back({{"role", role}, {"parts", std::move(parts)}});
      }
    };
    for (const auto& m : req.messages) {
      json parts = json::array();
      switch (m.role) {
        case Role::system: continue;
        case Role::user:
          if (!m.content.empty()) parts.push_back({{"text", m.content}});
          append("user", std::move(parts));
          break;
        case Role::tool:
          parts.push_back({{"functionResponse",
                            {{"name", names.count(m.tool_call_id) ? names[m.tool_call_id] : m.tool_call_id},
                             {"response", {{"content", m.content}}}}}});
          append("user", std::move(parts));
          break;
        case Role::assistant: {
          std::map<std::string, std::string> sigs;
          if (m.reasoning_backend == s_.name)
            for (const auto& item : m.reasoning_items)
              if (auto j = parse_json(item); j.is_object()) sigs[str_field(j, "call_id")] = str_field(j, "thoughtSignature");
          if (!m.content.empty()) parts.push_back({{"text", m.content}});
          for (const auto& c : m.tool_calls) {
            names[c.id] = c.name;
            json part{{"functionCall", {{"name", c.name}, {"args", arguments_object(c.arguments)}}}};
            if (auto it = sigs.find(c.id); it != sigs.end() && !it->second.empty()) part["thoughtSignature"] = it->second;
            parts.push_back(std::move(part));
          }
          append("model", std::move(parts));
          break;
        }
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Backend> make_gemini(BackendSettings s, HttpEngine& e) {
  return std::make_unique<GeminiBackend>(std::move(s), e);
}

}  // namespace ollie::backend
