// Kiro (AWS CodeWhisperer): generateAssistantResponse, answered as AWS event-stream frames.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>

#include "backend/eventstream.hpp"
#include "backend/http_backend.hpp"

namespace ollie::backend {

namespace {

constexpr int kiro_context = 128000;

class KiroDecoder : public Decoder {
 public:
  explicit KiroDecoder(std::shared_ptr<StreamControl> c) : Decoder(std::move(c), "kiro") {}

  void feed(std::string_view bytes) override {
    if (!es_.feed(bytes, [this](const EventStreamMessage& m) { on_message(m); }))
      fail(Error{ErrorClass::client, "kiro: unparsable response: " + es_.error(), 200, {}});
  }

  // The stream has no end event of its own: a body that ends cleanly on a frame boundary, after
  // at least one frame, is complete; anything else (an empty 200 among them) is a drop.
  void end(bool clean) override {
    if (failure) return;
    for (auto& [id, p] : pending_) call(ToolCall{id, p.name, p.input});
    pending_.clear();
    done = clean && !es_.partial() && frames_ > 0;
    if (done) stop_raw = calls ? "tool_use" : "end_turn";
    if (context_pct_ >= 0) {
      usage.input = static_cast<std::int64_t>(context_pct_ * kiro_context / 100.0);
      usage.output = static_cast<std::int64_t>(out_bytes / 4);
      usage.estimated = true;
      has_usage = true;
    }
  }

 private:
  struct Pending {
    std::string name, input;
  };

  void on_message(const EventStreamMessage& m) {
    ++frames_;
    if (failure) return;
    const auto header = [&](const char* k) {
      auto it = m.headers.find(k);
      return it == m.headers.end() ? std::string() : it->second;
    };
    const auto mtype = header(":message-type");
    if (mtype == "exception" || mtype == "error") {
      auto kind = header(":exception-type");
      if (kind.empty()) kind = header(":error-code");
      const auto msg = str_field(parse_json(m.payload), "message");
      ErrorClass cls = ErrorClass::client;
      if (kind.find("Throttling") != std::string::npos) cls = ErrorClass::rate_limit;
      else if (kind.find("ContentLength") != std::string::npos || has_overflow_marker(msg)) cls = ErrorClass::context_overflow;
      else if (kind.find("InternalServer") != std::string::npos || kind.find("ServiceUnavailable") != std::string::npos)
        cls = ErrorClass::transient;
      // A transient one reads as a server error does (§8.2's `retry` block: `server error: …`).
      fail(Error{cls, std::string(cls == ErrorClass::transient ? "kiro: server error: " : "kiro: ") + kind + ": " + msg, 0, {}});
      return;
    }
    auto j = parse_json(m.payload);
    if (!j.is_object()) {
      fail(Error{ErrorClass::client, "kiro: unparsable event payload", 200, {}});
      return;
    }
    // Text, reasoning and tool-use fields carry the answer: a wrong type is a malformed
    // response. A usage percentage of the wrong type is ignored.
    Strict f;
    const auto ev = header(":event-type");
    if (ev == "assistantResponseEvent") {
      text(f.str(j, "content"));
    } else if (ev == "reasoningContentEvent") {
      reasoning(f.str(j, "text"));
    } else if (ev == "toolUseEvent") {
      const auto id = f.str(j, "toolUseId");
      auto& p = pending_[id];
      if (auto n = f.str(j, "name"); !n.empty()) p.name = n;
      if (const json* in = f.any(j, "input")) p.input += in->is_string() ? in->get<std::string>() : dump_json(*in);
      if (malformed(f) || too_long(p.input.size(), "tool call '" + p.name.substr(0, 64) + "' arguments")) return;
      if (f.boolean(j, "stop").value_or(false)) {
        call(ToolCall{id, p.name, p.input.empty() ? "{}" : p.input});
        pending_.erase(id);
      }
    } else if (ev == "contextUsageEvent") {
      if (auto pct = num_field(j, "contextUsagePercentage"); pct && *pct >= 0) context_pct_ = std::min(*pct, 100.0);
    }
    malformed(f);
  }

  EventStreamDecoder es_;
  std::map<std::string, Pending> pending_;
  double context_pct_ = -1;
  std::size_t frames_ = 0;
};

class KiroBackend : public HttpBackend {
 public:
  using HttpBackend::HttpBackend;

  Result<Stream> stream(const ChatRequest& req, EventSink sink) override {
    auto token = bearer();
    if (!token.ok()) return token.error();
    const auto model = pick_model(req);
    auto c = control(std::move(sink));
    auto r = json_request(s_, "POST", s_.url + "/generateAssistantResponse", dump_json(body(req, model)));
    r.headers.push_back("Authorization: Bearer " + *token);
    auto ctx = context(model, request_bytes(req));
    ctx.secret = *token;
    ctx.classify = [](int status, std::string_view body) -> std::optional<Error> {
      auto j = parse_json(body);
      if (status == 400 && str_field(j, "reason") == "CONTENT_LENGTH_EXCEEDS_THRESHOLD")
        return Error{ErrorClass::context_overflow, "kiro: context overflow: " + str_field(j, "message"), status, {}};
      return std::nullopt;
    };
    start_stream(c, std::move(r), std::make_shared<KiroDecoder>(c), std::move(ctx));
    return Stream(c);
  }

  // The streaming API has no model listing of its own.
  Result<std::vector<std::string>> list_models() override {
    std::vector<std::string> v{"claude-sonnet-4", "claude-sonnet-4.5", "claude-haiku-4.5", "auto"};
    if (std::find(v.begin(), v.end(), model()) == v.end()) v.insert(v.begin(), model());
    return v;
  }

  Result<int> context_length(std::string_view) override { return kiro_context; }
  std::optional<int> known_context_length() const override { return kiro_context; }

 private:
  Result<std::string> bearer() const {
    if (s_.key.rfind("sqlite://", 0) != 0) return s_.key;
    if (auto t = read_kiro_token_db(s_.key.substr(9))) return *t;
    return Error{ErrorClass::config, "kiro: missing key: set " + s_.key_var, 0, {}};
  }

  // History alternates userInputMessage and assistantResponseMessage; the last user turn
  // (text and tool results) is the current message. The system prompt leads the first turn.
  json body(const ChatRequest& req, const std::string& model) const {
    json history = json::array();
    json pending{{"content", ""}};
    json results = json::array();
    bool have_pending = false;
    std::string system = req.system;
    for (const auto& m : req.messages)
      if (m.role == Role::system) system += (system.empty() ? "" : "\n\n") + m.content;
    auto user_message = [&]() {
      json u{{"content", pending["content"]}, {"modelId", model}, {"origin", "AI_EDITOR"}};
      if (!results.empty()) u["userInputMessageContext"]["toolResults"] = results;
      return u;
    };
    for (const auto& m : req.messages) {
      if (m.role == Role::user || m.role == Role::tool) {
        if (m.role == Role::user) {
          auto& c = pending["content"];
          c = c.get<std::string>() + (c.get<std::string>().empty() ? "" : "\n\n") + m.content;
        } else {
          results.push_back({{"toolUseId", m.tool_call_id}, {"content", json::array({{{"text", m.content}}})},
                             {"status", "success"}});
        }
        have_pending = true;
      } else if (m.role == Role::assistant) {
        if (have_pending) history.push_back({{"userInputMessage", user_message()}});
        pending = {{"content", ""}};
        results = json::array();
        have_pending = false;
        json a{{"content", m.content}};
        if (!m.tool_calls.empty()) {
          json uses = json::array();
          for (const auto& c : m.tool_calls)
            uses.push_back({{"toolUseId", c.id}, {"name", c.name}, {"input", arguments_object(c.arguments)}});
          a["toolUses"] = std::move(uses);
        }
        history.push_back({{"assistantResponseMessage", std::move(a)}});
      }
    }
    auto current = user_message();
    if (current["content"].get<std::string>().empty()) current["content"] = results.empty() ? "continue" : "tool results";
    if (!system.empty()) {
      json* first = &current;
      if (!history.empty() && history[0].contains("userInputMessage")) first = &history[0]["userInputMessage"];
      (*first)["content"] = system + "\n\n" + (*first)["content"].get<std::string>();
    }
    if (!req.tools.empty()) {
      json tools = json::array();
      for (const auto& t : req.tools) {
        auto params = parse_json(t.parameters);
        tools.push_back({{"toolSpecification", {{"name", t.name}, {"description", t.description},
                                                {"inputSchema", {{"json", params.is_object() ? params : json::object()}}}}}});
      }
      current["userInputMessageContext"]["tools"] = std::move(tools);
    }
    static std::atomic<unsigned> seq{0};
    json state{{"chatTriggerType", "MANUAL"},
               {"conversationId", "ollie-" + std::to_string(::getpid()) + "-" + std::to_string(++seq)},
               {"currentMessage", {{"userInputMessage", std::move(current)}}}};
    if (!history.empty()) state["history"] = std::move(history);
    return json{{"conversationState", std::move(state)}};
  }
};

}  // namespace

std::unique_ptr<Backend> make_kiro(BackendSettings s, HttpEngine& e) {
  return std::make_unique<KiroBackend>(std::move(s), e);
}

}  // namespace ollie::backend
