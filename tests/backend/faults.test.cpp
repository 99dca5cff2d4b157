// Every error class, produced by the fake provider in each provider's own format and
// classified; cancellation and timeouts; keys never in logs or errors.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "harness.hpp"
#include "server.hpp"

namespace ollie::backend {
namespace {

using nlohmann::json;
using test::Collected;
using test::Collector;
using namespace std::chrono_literals;

struct Fault {
  const char* provider;
  const char* fault;
  ErrorClass expected;
};

std::vector<Fault> all_faults() {
  std::vector<Fault> v;
  for (const char* p : {"ollama", "openai", "openrouter", "anthropic", "gemini", "copilot", "kiro"}) {
    v.push_back({p, "rate_limit", ErrorClass::rate_limit});
    v.push_back({p, "server_error", ErrorClass::transient});
    v.push_back({p, "drop", ErrorClass::stream_drop});
    v.push_back({p, "truncate", ErrorClass::stream_drop});
    v.push_back({p, "stream_error", ErrorClass::transient});
    if (std::string(p) != "ollama") v.push_back({p, "context_overflow", ErrorClass::context_overflow});
    v.push_back({p, "tool_unsupported", ErrorClass::tool_unsupported});
    v.push_back({p, "auth", ErrorClass::auth});
    v.push_back({p, "bad_request", ErrorClass::client});
    v.push_back({p, "not_a_stream", ErrorClass::client});  // §8.2: unparsable, not a drop to retry
  }
  return v;
}

Collected run_fault(const Fault& f, fakeprovider::Server& fake, HttpEngine& engine) {
  fake.push({{"fault", f.fault}, {"retry_after", 7}, {"echo_key", true}, {"drop_after", 3},
             {"text", "some text that streams for a while"}, {"chunk", 4}});
  auto b = make_backend(test::fake_settings(f.provider, fake.url()), engine);
  EXPECT_TRUE(b.ok());
  Collector col;
  auto s = (*b)->stream(test::simple_request(), col.sink());
  EXPECT_TRUE(s.ok());
  return col.wait();
}

class BackendFaults : public ::testing::TestWithParam<Fault> {
 protected:
  fakeprovider::Server fake;
  HttpEngine engine;
};

TEST_P(BackendFaults, IsClassified) {
  const auto& f = GetParam();
  auto got = run_fault(f, fake, engine);
  ASSERT_TRUE(got.is_error()) << "expected an error event";
  const auto& e = got.error();
  EXPECT_EQ(e.cls, f.expected) << e.message;
  EXPECT_EQ(e.message.find(test::test_key), std::string::npos) << e.message;
  const std::string name = f.provider;
  if (f.expected == ErrorClass::rate_limit) {
    EXPECT_EQ(e.retry_after_s, 7) << e.message;
  }
  if (f.expected == ErrorClass::auth) {
    const auto var = test::fake_settings(name, "").key_var;
    EXPECT_EQ(e.message, name + ": authentication failed" + (var.empty() ? "" : " (check " + var + ")"));
  }
  if (f.expected == ErrorClass::tool_unsupported) {
    EXPECT_EQ(e.message, "model does not support tool calls: " + test::fake_settings(name, "").model);
  }
  if (std::string(f.fault) == "bad_request") {
    EXPECT_GT(e.http_status, 399);
  }
  if (std::string(f.fault) == "not_a_stream") {  // ollama's and kiro's parsers say why themselves
    EXPECT_EQ(e.message.rfind(name + ": unparsable response", 0), 0u) << e.message;
    if (name != "ollama" && name != "kiro") {
      EXPECT_EQ(e.message, name + ": unparsable response: text/html, not a stream");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, BackendFaults, ::testing::ValuesIn(all_faults()), [](const auto& info) {
  std::string n = std::string(info.param.provider) + "_" + info.param.fault;
  std::string out;
  bool up = true;
  for (char c : n) {
    if (c == '_') { up = true; continue; }
    out.push_back(up ? static_cast<char>(std::toupper(c)) : c);
    up = false;
  }
  return out;
});

TEST(BackendSecrets, KeyNeverInLogsOrErrors) {
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  auto logger = std::make_shared<spdlog::logger>("capture", sink);
  logger->set_level(spdlog::level::trace);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  {
    fakeprovider::Server fake;
    HttpEngine engine;
    std::string errors;
    for (const auto& f : all_faults()) errors += run_fault(f, fake, engine).error().message + "\n";
    EXPECT_EQ(errors.find(test::test_key), std::string::npos);
    // The key really travelled (and the auth faults echoed it back): redaction kept it out.
    int carried = 0;
    for (const auto& r : fake.requests())
      for (const auto& [k, v] : r.headers) carried += v.find(test::test_key) != std::string::npos;
    EXPECT_GT(carried, 30);
  }
  spdlog::set_default_logger(previous);
  const auto text = log.str();
  EXPECT_GT(std::count(text.begin(), text.end(), '\n'), 40) << "every failure must be logged";
  EXPECT_EQ(text.find(test::test_key), std::string::npos);
  EXPECT_EQ(text.find("tid=fake;"), std::string::npos) << "the exchanged Copilot token is a secret too";
  EXPECT_NE(text.find("***"), std::string::npos) << "an echoed key shows redacted";
}

class BackendStreaming : public ::testing::Test {
 protected:
  fakeprovider::Server fake;
  HttpEngine engine;
};

TEST_F(BackendStreaming, CancelAbortsTheTransferAtOnce) {
  fake.push({{"text", std::string(400, 'x')}, {"chunk", 1}, {"delay_ms", 50}});
  auto b = make_backend(test::fake_settings("openai", fake.url()), engine);
  Collector col;
  auto s = (*b)->stream(test::simple_request(), col.sink());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(col.wait_events(2, 5s));
  const auto t0 = std::chrono::steady_clock::now();
  s->cancel();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 1s) << "cancel took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
  const auto n = col.snapshot().events.size();
  // The server sees the connection go away.
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    closed = !fake.requests().empty() && fake.requests()[0].client_closed;
    if (!closed) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(closed);
  EXPECT_EQ(col.snapshot().events.size(), n) << "no event after cancel";
  EXPECT_FALSE(col.snapshot().end.has_value());
}

TEST_F(BackendStreaming, DestroyingTheStreamCancelsIt) {
  fake.push({{"fault", "hang"}});
  auto b = make_backend(test::fake_settings("anthropic", fake.url()), engine);
  Collector col;
  {
    auto s = (*b)->stream(test::simple_request(), col.sink());
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 100 && fake.requests().empty(); ++i) std::this_thread::sleep_for(10ms);
  }
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    closed = fake.requests()[0].client_closed;
    if (!closed) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(closed);
  EXPECT_FALSE(col.snapshot().end.has_value());
}

TEST_F(BackendStreaming, AStreamThatEndedLetsGoWithoutWaitingOnTheEngine) {
  // The agent drops each stream once its last event came, on its I/O thread: that must not wait
  // for the engine thread, which may be busy with other transfers.
  fake.push({{"text", "done"}});
  auto b = make_backend(test::fake_settings("openai", fake.url()), engine);
  Collector col;
  auto s = (*b)->stream(test::simple_request(), col.sink());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(col.wait(5s).end.has_value());
  // Another transfer holds the engine thread in its handler for 2 s.
  fake.push({{"text", "slow"}});
  std::atomic<bool> held{false};
  HttpRequest slow;
  slow.url = fake.url() + "/v1/chat/completions";
  slow.body = R"({"model":"fake-model","messages":[],"stream":true})";
  TransferHandler h;
  h.on_head = [&](const HttpHead&) {
    held = true;
    std::this_thread::sleep_for(2s);
  };
  engine.start(std::move(slow), std::move(h));
  for (int i = 0; i < 500 && !held; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(held);
  const auto t0 = std::chrono::steady_clock::now();
  s->cancel();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 1s) << "letting go of an ended stream took "
                      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
}

TEST_F(BackendStreaming, IdleTimeoutIsTransient) {
  fake.push({{"fault", "hang"}});
  auto s = test::fake_settings("ollama", fake.url());
  s.idle_timeout = 300ms;
  auto b = make_backend(s, engine);
  Collector col;
  auto st = (*b)->stream(test::simple_request(), col.sink());
  auto got = col.wait(5s);
  ASSERT_TRUE(got.is_error());
  EXPECT_EQ(got.error().cls, ErrorClass::transient);
  EXPECT_NE(got.error().message.find("idle timeout"), std::string::npos) << got.error().message;
}

TEST_F(BackendStreaming, SlowTokensWithinTheIdleTimeoutComplete) {
  fake.push({{"text", "slow but steady"}, {"chunk", 2}, {"delay_ms", 60}});
  auto s = test::fake_settings("gemini", fake.url());
  s.idle_timeout = 400ms;
  auto b = make_backend(s, engine);
  Collector col;
  auto st = (*b)->stream(test::simple_request(), col.sink());
  auto got = col.wait(10s);
  ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done) << (got.end ? got.error().message : "timeout");
  EXPECT_EQ(got.text, "slow but steady");
  EXPECT_TRUE(got.end->usage.estimated) << "no usage reported: estimated from bytes";
  EXPECT_EQ(got.end->usage.output, static_cast<std::int64_t>(std::string("slow but steady").size() / 4));
  // §8.14: input is the request's context estimate (§8.5.1), which leaves out the tool schemas.
  EXPECT_EQ(got.end->usage.input, static_cast<std::int64_t>((std::string("You are a test.") + "hello").size() / 4));
}

// §8.2: ollama refuses tools for some models in the stream as well as with a 400; both read alike.
TEST_F(BackendStreaming, OllamasInStreamToolRefusalReadsAsTheHttpOne) {
  fake.push({{"fault", "stream_error"}, {"drop_after", 0}, {"error_text", "registry.ollama.ai/library/m1 does not support tools"}});
  auto s = test::fake_settings("ollama", fake.url());
  auto b = make_backend(s, engine);
  Collector col;
  auto st = (*b)->stream(test::simple_request(), col.sink());
  auto got = col.wait(5s);
  ASSERT_TRUE(got.is_error());
  EXPECT_EQ(got.error().cls, ErrorClass::tool_unsupported);
  EXPECT_EQ(got.error().message, "model does not support tool calls: " + s.model);
}

// OpenAI streams a refusal in `delta.refusal` and ends it with an ordinary `stop`: it is the
// answer's text, and the stop is the refusal (§8.2: the turn ends `stopped: refusal`). It used
// to be dropped: the turn ended with nothing shown.
TEST_F(BackendStreaming, AnOpenaiRefusalIsTheTextAndTheStop) {
  for (const char* name : {"openai", "openrouter", "copilot"}) {
    fake.push({{"text", "Well. "}, {"refusal", "I can't help with that."}});
    auto b = make_backend(test::fake_settings(name, fake.url()), engine);
    Collector col;
    auto st = (*b)->stream(test::simple_request(), col.sink());
    auto got = col.wait(5s);
    ASSERT_TRUE(got.end && !got.is_error()) << name << ": " << (got.end ? got.error().message : "no end");
    EXPECT_EQ(got.text, "Well. I can't help with that.") << name;
    EXPECT_EQ(got.end->stop_raw, "refusal") << name;
    EXPECT_EQ(got.end->stop, StopReason::filtered) << name;
  }
}

// §8.2: an error event inside the stream is classed by the code it carries, as an HTTP answer
// would be: a 4xx other than 429 is a client error and is not retried.
TEST_F(BackendStreaming, AnInStreamErrorIsClassedByItsCode) {
  struct Case {
    const char* backend;
    json fault;
    ErrorClass cls;
  };
  const std::vector<Case> cases{
      {"openai", {{"error_code", 400}}, ErrorClass::client},
      {"openai", {{"error_code", 429}}, ErrorClass::rate_limit},
      {"openai", json::object(), ErrorClass::transient},  // its usual 502
      {"gemini", {{"error_code", 400}}, ErrorClass::client},
      {"gemini", json::object(), ErrorClass::transient},  // its usual 500
      {"anthropic", {{"error_type", "invalid_request_error"}}, ErrorClass::client},
      {"anthropic", json::object(), ErrorClass::transient},  // overloaded_error
  };
  for (const auto& c : cases) {
    json f = {{"fault", "stream_error"}, {"drop_after", 0}};
    f.update(c.fault);
    fake.push(f);
    auto b = make_backend(test::fake_settings(c.backend, fake.url()), engine);
    Collector col;
    auto st = (*b)->stream(test::simple_request(), col.sink());
    auto got = col.wait(5s);
    ASSERT_TRUE(got.is_error()) << c.backend << " " << f.dump();
    EXPECT_EQ(class_name(got.error().cls), class_name(c.cls)) << c.backend << " " << f.dump() << ": " << got.error().message;
  }
  // A transient one, of every dialect, reads as a server error does: its `retry` block says
  // `server error: …` (§8.2), on one line.
  for (const char* name : {"openai", "anthropic", "gemini", "ollama", "kiro"}) {
    fake.push({{"fault", "stream_error"}, {"drop_after", 0}, {"error_text", "boom\nsecond line"}});
    auto b = make_backend(test::fake_settings(name, fake.url()), engine);
    Collector col;
    auto st = (*b)->stream(test::simple_request(), col.sink());
    auto got = col.wait(5s);
    ASSERT_TRUE(got.is_error()) << name;
    EXPECT_EQ(got.error().cls, ErrorClass::transient) << name << ": " << got.error().message;
    EXPECT_EQ(got.error().message.rfind(std::string(name) + ": server error: ", 0), 0u) << got.error().message;
    EXPECT_EQ(got.error().message.find('\n'), std::string::npos) << got.error().message;
  }
}

TEST_F(BackendStreaming, ConnectionRefusedIsTransient) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);  // bound once, now nobody listens there
  auto b = make_backend(test::fake_settings("openai", "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port))), engine);
  Collector col;
  auto st = (*b)->stream(test::simple_request(), col.sink());
  auto got = col.wait(5s);
  ASSERT_TRUE(got.is_error());
  EXPECT_EQ(got.error().cls, ErrorClass::transient);
  EXPECT_EQ(got.error().http_status, 0);
}

TEST_F(BackendStreaming, ConnectTimeoutIsTransient) {
  // A listener with a full accept queue leaves new connections unanswered (SYNs dropped).
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 0), 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fillers.push_back(c);
  }
  std::this_thread::sleep_for(50ms);
  auto s = test::fake_settings("openai", "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
  s.connect_timeout = 300ms;
  auto b = make_backend(s, engine);
  Collector col;
  auto st = (*b)->stream(test::simple_request(), col.sink());
  auto got = col.wait(5s);
  for (int c : fillers) ::close(c);
  ::close(lfd);
  ASSERT_TRUE(got.is_error());
  EXPECT_EQ(got.error().cls, ErrorClass::transient);
  EXPECT_NE(got.error().message.find("connect timeout"), std::string::npos) << got.error().message;
}

TEST_F(BackendStreaming, ManyConcurrentStreamsShareOneEngine) {
  constexpr int n = 12;
  for (int i = 0; i < n; ++i) fake.push({{"text", "stream " + std::to_string(i)}, {"chunk", 2}, {"delay_ms", 5}});
  auto b = make_backend(test::fake_settings("anthropic", fake.url()), engine);
  std::vector<std::unique_ptr<Collector>> cols;
  std::vector<Stream> streams;
  for (int i = 0; i < n; ++i) {
    cols.push_back(std::make_unique<Collector>());
    auto s = (*b)->stream(test::simple_request(), cols.back()->sink());
    ASSERT_TRUE(s.ok());
    streams.push_back(std::move(*s));
  }
  std::set<std::string> texts;
  for (auto& c : cols) {
    auto got = c->wait();
    ASSERT_TRUE(got.end && got.end->kind == StreamEvent::Kind::done);
    texts.insert(got.text);
  }
  EXPECT_EQ(texts.size(), static_cast<std::size_t>(n));
}

// The fake provider's `loop: true` repeats its list forever, each `when` still only for its own
// requests (a queue left with only a `when` for other requests answered 500 to the rest).
TEST(FakeProvider, ALoopRepeatsEveryResponseWithItsWhen) {
  fakeprovider::Server fake({{"loop", true}, {"responses", json::array({{{"when", "apple"}, {"text", "A"}}, {{"text", "B"}}})}});
  HttpEngine engine;
  auto b = make_backend(test::fake_settings("openai", fake.url()), engine);
  ASSERT_TRUE(b.ok());
  std::string got;
  for (const char* prompt : {"apple pie", "plain", "plain", "apple tart", "apple", "plain"}) {
    Collector col;
    auto s = (*b)->stream(test::simple_request(prompt), col.sink());  // held: dropping it cancels
    ASSERT_TRUE(s.ok());
    const auto c = col.wait();
    got += c.is_error() ? "!" : c.text;
  }
  EXPECT_EQ(got, "ABBABB");  // the first in the queue that is for it: B is for any
}

}  // namespace
}  // namespace ollie::backend
