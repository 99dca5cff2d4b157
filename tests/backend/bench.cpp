// backend-bench: parser throughput (SSE, NDJSON) and per-event overhead from the socket to
// the callback, through the whole stack (fake provider → loopback → libcurl → SSE →
// openai decoder → EventSink). Each figure has a baseline measured in the same run: for the
// parsers, splitting the same bytes into lines with memchr (the least any line parser does);
// for socket → callback, a bare loopback TCP socket read by a blocked thread.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "backend/ndjson.hpp"
#include "backend/sse.hpp"
#include "server.hpp"

using namespace ollie::backend;
using Clock = std::chrono::steady_clock;

namespace {

std::string openai_chunk(int i) {
  return "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,"
         "\"delta\":{\"content\":\"token " + std::to_string(i) + " w\\u00f6rd\"},\"finish_reason\":null}]}\n\n";
}

template <class F>
double mb_per_s(const std::string& data, std::size_t read_size, F&& feed_all) {
  const int rounds = 20;
  const auto t0 = Clock::now();
  for (int r = 0; r < rounds; ++r) feed_all(data, read_size);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(data.size()) * rounds / s / 1e6;
}

// The floor of a line parser: find every newline of each read with memchr.
std::size_t split_lines(const std::string& d, std::size_t n) {
  std::size_t lines = 0;
  for (std::size_t i = 0; i < d.size(); i += n) {
    const char* p = d.data() + i;
    const char* end = d.data() + std::min(d.size(), i + n);
    while ((p = static_cast<const char*>(std::memchr(p, '\n', end - p)))) {
      ++lines;
      ++p;
    }
  }
  return lines;
}

// The floor of socket → callback: a stamp written to a loopback TCP socket every 2 ms, read by
// a thread blocked in read(2). Median latency in µs.
double bare_socket_latency_us(int events) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(lfd, 1);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  int wfd = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(wfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  int rfd = ::accept(lfd, nullptr, nullptr);
  std::vector<double> us;
  std::thread reader([&] {
    long long stamp;
    for (int i = 0; i < events && ::read(rfd, &stamp, sizeof stamp) == sizeof stamp; ++i)
      us.push_back(static_cast<double>(Clock::now().time_since_epoch().count() - stamp) / 1000.0);
  });
  for (int i = 0; i < events; ++i) {
    long long stamp = Clock::now().time_since_epoch().count();
    if (::write(wfd, &stamp, sizeof stamp) != sizeof stamp) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  reader.join();
  for (int fd : {lfd, wfd, rfd}) ::close(fd);
  std::sort(us.begin(), us.end());
  return us.empty() ? 0.0 : us[us.size() / 2];
}

}  // namespace

int main() {
  std::string sse_data, nd_data;
  for (int i = 0; i < 100000; ++i) {
    sse_data += openai_chunk(i);
    nd_data += "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"token " + std::to_string(i) +
               "\"},\"done\":false}\n";
  }
  std::size_t events = 0;
  for (std::size_t read : {16384u, 1024u, 64u}) {
    const double sse = mb_per_s(sse_data, read, [&](const std::string& d, std::size_t n) {
      SseParser p;
      for (std::size_t i = 0; i < d.size(); i += n) p.feed(std::string_view(d).substr(i, n), [&](auto, auto) { ++events; });
    });
    const double nd = mb_per_s(nd_data, read, [&](const std::string& d, std::size_t n) {
      NdjsonParser p;
      for (std::size_t i = 0; i < d.size(); i += n) p.feed(std::string_view(d).substr(i, n), [&](auto) { ++events; });
    });
    const double sse_floor = mb_per_s(sse_data, read, [&](const std::string& d, std::size_t n) { events += split_lines(d, n); });
    const double nd_floor = mb_per_s(nd_data, read, [&](const std::string& d, std::size_t n) { events += split_lines(d, n); });
    std::printf("parser  sse    %6.0f MB/s (%.2fx memchr line split)   ndjson %6.0f MB/s (%.2fx)   (reads of %zu bytes)\n",
                sse, sse / sse_floor, nd, nd / nd_floor, read);
  }

  // Socket → callback: the fake provider stamps each content delta with the monotonic clock
  // just before writing it; the callback subtracts it on arrival.
  fakeprovider::Server fake;
  HttpEngine engine;
  BackendSettings s;
  s.name = "openai";
  s.url = fake.url() + "/v1";
  s.model = "m";
  s.key = "bench";
  auto b = make_backend(s, engine);
  const double bare_us = bare_socket_latency_us(200);
  for (int pass = 0; pass < 2; ++pass) {
    const int n = pass ? 2000 : 200;
    fake.push({{"stamp", true}, {"events", n}, {"delay_ms", pass ? 0 : 2}});
    std::vector<double> us;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    ChatRequest req;
    req.messages.push_back(Message{Role::user, "bench"});
    const auto t0 = Clock::now();
    auto st = (*b)->stream(req, [&](StreamEvent ev) {
      const auto now = Clock::now().time_since_epoch().count();
      std::lock_guard lk(mu);
      if (ev.kind == StreamEvent::Kind::content) us.push_back(static_cast<double>(now - std::stoll(ev.text)) / 1000.0);
      if (ev.kind == StreamEvent::Kind::done || ev.kind == StreamEvent::Kind::error) {
        done = true;
        cv.notify_all();
      }
    });
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done; });
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::sort(us.begin(), us.end());
    auto q = [&](double p) { return us.empty() ? 0.0 : us[static_cast<std::size_t>(p * (us.size() - 1))]; };
    if (pass)  // back to back: the figure is throughput (latency there is only queueing)
      std::printf("socket→callback burst: %zu events in %.1f ms, %.0f events/s\n", us.size(), secs * 1e3, us.size() / secs);
    else
      std::printf("socket→callback, one event every 2 ms: %zu events, median %.1f µs, p99 %.1f µs, max %.1f µs;\n"
                  "  bare loopback socket → blocked reader: median %.1f µs, so the stack adds %.1f µs per event\n",
                  us.size(), q(0.5), q(0.99), q(1.0), bare_us, q(0.5) - bare_us);
  }

  // Cancellation: time from cancel() to its return while tokens are streaming.
  fake.push({{"text", std::string(2000, 'x')}, {"chunk", 1}, {"delay_ms", 5}});
  std::atomic<int> got{0};
  ChatRequest req;
  req.messages.push_back(Message{Role::user, "bench"});
  auto st = (*b)->stream(req, [&](StreamEvent) { ++got; });
  while (got < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto c0 = Clock::now();
  st->cancel();
  std::printf("cancel() returned after %.0f µs\n", std::chrono::duration<double, std::micro>(Clock::now() - c0).count());
  return events == 0;
}
