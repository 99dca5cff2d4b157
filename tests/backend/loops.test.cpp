// The HTTP engine on io_contexts it is given (olliesrv's I/O threads): a stream's events arrive
// on the thread that started it, a cancel there is immediate, and shutdown lets go of
// everything without waiting for anyone.

#include <gtest/gtest.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "harness.hpp"
#include "server.hpp"

namespace ollie::backend {
namespace {

using test::Collector;
using namespace std::chrono_literals;

/// Two io_contexts, each run by a thread of its own, as olliesrv's I/O pool.
struct Threads {
  asio::io_context io[2];
  std::thread::id id[2];
  std::vector<std::thread> threads;
  /// Runs `f` on context i's thread and returns what it returns.
  template <class F>
  auto on(int i, F f) {
    // Shared with the handler: it may still be inside the task when the result is taken.
    auto task = std::make_shared<std::packaged_task<decltype(f())()>>(std::move(f));
    auto fut = task->get_future();
    asio::post(io[i], [task] { (*task)(); });
    return fut.get();
  }
  Threads() {
    for (int i = 0; i < 2; i++)
      threads.emplace_back([this, i] {
        auto work = asio::make_work_guard(io[i]);
        io[i].run();
      });
    for (int i = 0; i < 2; i++) id[i] = on(i, [] { return std::this_thread::get_id(); });
  }
  ~Threads() { stop(); }
  void stop() {
    for (auto& c : io) c.stop();
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
  std::vector<asio::io_context*> contexts() { return {&io[0], &io[1]}; }
};

/// A sink that also notes the threads it was called on.
struct ThreadNotes {
  Collector col;
  std::mutex mu;
  std::set<std::thread::id> seen;
  EventSink sink() {
    auto inner = col.sink();
    return [this, inner](StreamEvent ev) {
      {
        std::lock_guard lk(mu);
        seen.insert(std::this_thread::get_id());
      }
      inner(std::move(ev));
    };
  }
  std::set<std::thread::id> threads() {
    std::lock_guard lk(mu);
    return seen;
  }
};

/// The fake provider, two loop threads and an engine on them; the threads end before the engine
/// shuts down, as in olliesrv, however the test ends.
struct HttpLoops : ::testing::Test {
  fakeprovider::Server fake;
  Threads t;
  HttpEngine engine{t.contexts()};

  void TearDown() override {
    t.stop();
    engine.shutdown();
  }
  std::unique_ptr<Backend> backend() {
    auto b = make_backend(test::fake_settings("openai", fake.url()), engine);
    if (!b.ok()) throw std::runtime_error(b.error().message);
    return std::move(*b);
  }
  /// A stream of 400 one-byte chunks, `delay` apart, started on context i's thread.
  Result<Stream> slow_stream(Backend& b, int i, Collector& col, std::chrono::milliseconds delay) {
    fake.push({{"text", std::string(400, 'x')}, {"chunk", 1}, {"delay_ms", delay.count()}});
    return t.on(i, [&] { return b.stream(test::simple_request(), col.sink()); });
  }
  HttpRequest models() const {
    HttpRequest req;
    req.method = "GET";
    req.url = fake.url() + "/v1/models";
    return req;
  }
};

TEST_F(HttpLoops, EventsArriveOnTheThreadThatStartedTheStream) {
  {
    auto b = backend();
    for (int i : {1, 0}) {
      fake.push({{"text", std::string(64, 'a' + i)}, {"chunk", 8}});
      ThreadNotes notes;
      auto s = t.on(i, [&] { return b->stream(test::simple_request(), notes.sink()); });
      ASSERT_TRUE(s.ok());
      const auto got = notes.col.wait();
      ASSERT_TRUE(got.end && !got.is_error()) << (got.end ? got.error().message : "no end");
      EXPECT_EQ(got.text, std::string(64, 'a' + i));
      EXPECT_EQ(notes.threads(), std::set<std::thread::id>{t.id[i]}) << "context " << i;
      t.on(i, [&] { s->cancel(); return 0; });
    }
    // From a thread that runs no loop: one of the loops, never the caller's thread.
    fake.push({{"text", "from outside"}});
    ThreadNotes notes;
    auto s = b->stream(test::simple_request(), notes.sink());
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(notes.col.wait().text, "from outside");
    const auto seen = notes.threads();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_TRUE(*seen.begin() == t.id[0] || *seen.begin() == t.id[1]);
    s->cancel();
  }
}

TEST_F(HttpLoops, CancelOnTheStreamsThreadStopsItsEventsAtOnce) {
  auto b = backend();
  Collector col;
  auto s = slow_stream(*b, 1, col, 20ms);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(col.wait_events(3, 5s));
  // The cancel and the count it leaves, in one handler of the loop: nothing can come in between.
  const auto [took, n] = t.on(1, [&] {
    const auto t0 = std::chrono::steady_clock::now();
    s->cancel();
    return std::make_pair(std::chrono::steady_clock::now() - t0, col.snapshot().events.size());
  });
  EXPECT_LT(took, 50ms) << "a cancel on the loop's own thread waits for nothing";
  bool closed = false;
  for (int i = 0; i < 200 && !closed; ++i) {
    closed = !fake.requests().empty() && fake.requests()[0].client_closed;
    if (!closed) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(closed) << "the provider sees the connection go";
  std::this_thread::sleep_for(100ms);  // five more chunks would have come
  EXPECT_EQ(col.snapshot().events.size(), n) << "no event after the cancel";
  EXPECT_FALSE(col.snapshot().end.has_value());
}

TEST_F(HttpLoops, FetchOnALoopsThreadAnswersInsteadOfWaitingForItself) {
  const auto req = models();
  const auto r = t.on(0, [&] { return engine.fetch(req); });
  EXPECT_EQ(r.end.kind, TransferEnd::Kind::network);
  EXPECT_NE(r.end.message.find("loop's thread"), std::string::npos) << r.end.message;
  // From any other thread it goes through.
  const auto ok = engine.fetch(req);
  EXPECT_EQ(ok.end.kind, TransferEnd::Kind::complete) << ok.end.message;
  EXPECT_EQ(ok.head.status, 200);
}

TEST_F(HttpLoops, ShutdownAfterTheThreadsEndedDropsEveryTransferWithoutWaiting) {
  auto b = backend();
  Collector col;
  auto s = slow_stream(*b, 0, col, 50ms);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(col.wait_events(1, 5s));
  t.stop();  // mid-stream, as olliesrv's pool at its end
  const auto t0 = std::chrono::steady_clock::now();
  engine.shutdown();
  s->cancel();  // a stream let go after the shutdown: nothing to wait for
  const auto r = engine.fetch(models());  // never runs: answers empty at once
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(r.head.status, 0);
  EXPECT_FALSE(col.snapshot().end.has_value()) << "no callback after the shutdown";
}

}  // namespace
}  // namespace ollie::backend
