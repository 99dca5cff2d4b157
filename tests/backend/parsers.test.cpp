#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "backend/eventstream.hpp"
#include "backend/ndjson.hpp"
#include "backend/sse.hpp"
#include "render.hpp"

namespace ollie::backend {
namespace {

using Events = std::vector<std::pair<std::string, std::string>>;

Events sse_in_pieces(const std::string& stream, std::size_t cut_a, std::size_t cut_b) {
  SseParser p;
  Events out;
  auto on = [&](std::string_view e, std::string_view d) { out.emplace_back(e, d); };
  EXPECT_TRUE(p.feed(std::string_view(stream).substr(0, cut_a), on));
  EXPECT_TRUE(p.feed(std::string_view(stream).substr(cut_a, cut_b - cut_a), on));
  EXPECT_TRUE(p.feed(std::string_view(stream).substr(cut_b), on));
  return out;
}

// "é" and "🙂" are multi-byte; the JSON value spans reads at every possible cut.
const std::string sse_stream =
    ": keep-alive comment\r\n"
    "event: content_block_delta\r\n"
    "data: {\"text\":\"caf\xC3\xA9 \xF0\x9F\x99\x82\"}\r\n"
    "\r\n"
    "data: first line\n"
    "data:second line\n"
    "\n"
    "id: 7\r"
    "data: cr only\r"
    "\r"
    "data: [DONE]\n\n";

const Events sse_expected{
    {"content_block_delta", "{\"text\":\"caf\xC3\xA9 \xF0\x9F\x99\x82\"}"},
    {"message", "first line\nsecond line"},
    {"message", "cr only"},
    {"message", "[DONE]"},
};

TEST(BackendSse, EveryTwoWaySplitGivesTheSameEvents) {
  for (std::size_t a = 0; a <= sse_stream.size(); ++a)
    for (std::size_t b = a; b <= sse_stream.size(); b += 3)
      ASSERT_EQ(sse_in_pieces(sse_stream, a, b), sse_expected) << "cuts at " << a << ", " << b;
}

TEST(BackendSse, ByteByByteGivesTheSameEvents) {
  SseParser p;
  Events out;
  for (char c : sse_stream)
    ASSERT_TRUE(p.feed(std::string_view(&c, 1), [&](std::string_view e, std::string_view d) { out.emplace_back(e, d); }));
  EXPECT_EQ(out, sse_expected);
}

TEST(BackendSse, EventWithoutBlankLineIsNotDispatchedYet) {
  SseParser p;
  int n = 0;
  ASSERT_TRUE(p.feed("data: {\"a\":1}\n", [&](auto, auto) { ++n; }));
  EXPECT_EQ(n, 0);
  ASSERT_TRUE(p.feed("\n", [&](auto, auto) { ++n; }));
  EXPECT_EQ(n, 1);
}

TEST(BackendSse, OverlongLineFailsInsteadOfGrowing) {
  SseParser p;
  std::string big(1 << 20, 'x');
  bool ok = true;
  for (int i = 0; i < 40 && ok; ++i) ok = p.feed(big, [](auto, auto) {});
  EXPECT_FALSE(ok);
}

TEST(BackendSse, DataLinesOfOneEventAreBounded) {
  SseParser p;
  const std::string line = "data: " + std::string(64 << 10, 'x') + "\n";
  bool ok = true;
  std::size_t fed = 0;
  while (ok && fed < (16u << 20)) {
    ok = p.feed(line, [](auto, auto) {});
    fed += line.size();
  }
  EXPECT_FALSE(ok) << "data lines without the blank line that ends the event must not grow forever";
  EXPECT_LE(fed, SseParser::max_event + line.size());
  EXPECT_FALSE(p.feed("\n\ndata: x\n\n", [](auto, auto) {})) << "a failed parser stays failed";
}

const std::string nd_stream =
    "{\"message\":{\"content\":\"h\xC3\xA9\"},\"done\":false}\n"
    "\n"
    "{\"message\":{\"content\":\"llo\"},\"done\":false}\r\n"
    "{\"done\":true,\"eval_count\":3}\n";

const std::vector<std::string> nd_expected{
    "{\"message\":{\"content\":\"h\xC3\xA9\"},\"done\":false}",
    "{\"message\":{\"content\":\"llo\"},\"done\":false}",
    "{\"done\":true,\"eval_count\":3}",
};

TEST(BackendNdjson, EveryTwoWaySplitGivesTheSameLines) {
  for (std::size_t a = 0; a <= nd_stream.size(); ++a)
    for (std::size_t b = a; b <= nd_stream.size(); ++b) {
      NdjsonParser p;
      std::vector<std::string> out;
      auto on = [&](std::string_view l) { out.emplace_back(l); };
      ASSERT_TRUE(p.feed(std::string_view(nd_stream).substr(0, a), on));
      ASSERT_TRUE(p.feed(std::string_view(nd_stream).substr(a, b - a), on));
      ASSERT_TRUE(p.feed(std::string_view(nd_stream).substr(b), on));
      ASSERT_EQ(out, nd_expected) << "cuts at " << a << ", " << b;
    }
}

TEST(BackendNdjson, LastLineWithoutNewlineComesWithFinish) {
  NdjsonParser p;
  std::vector<std::string> out;
  auto on = [&](std::string_view l) { out.emplace_back(l); };
  ASSERT_TRUE(p.feed("{\"a\":1}\n{\"done\":tr", on));
  ASSERT_TRUE(p.feed("ue}", on));
  EXPECT_EQ(out.size(), 1u);
  p.finish(on);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1], "{\"done\":true}");
}

std::string two_frames() {
  return fakeprovider::event_frame({{":event-type", "assistantResponseEvent"}, {":message-type", "event"}},
                                   R"({"content":"caf\u00e9"})") +
         fakeprovider::event_frame({{":event-type", "toolUseEvent"}, {":message-type", "event"}},
                                   R"({"name":"read","toolUseId":"t1","input":"{\"pa"})");
}

TEST(BackendEventStream, EverySplitDecodesBothFrames) {
  const auto bytes = two_frames();
  for (std::size_t a = 0; a <= bytes.size(); ++a) {
    EventStreamDecoder d;
    std::vector<EventStreamMessage> out;
    auto on = [&](const EventStreamMessage& m) { out.push_back(m); };
    ASSERT_TRUE(d.feed(std::string_view(bytes).substr(0, a), on));
    ASSERT_TRUE(d.feed(std::string_view(bytes).substr(a), on));
    ASSERT_EQ(out.size(), 2u) << "cut at " << a;
    EXPECT_EQ(out[0].headers.at(":event-type"), "assistantResponseEvent");
    EXPECT_EQ(out[0].payload, R"({"content":"caf\u00e9"})");
    EXPECT_EQ(out[1].headers.at(":event-type"), "toolUseEvent");
    EXPECT_FALSE(d.partial());
  }
}

TEST(BackendEventStream, CorruptCrcIsRejected) {
  auto bytes = two_frames();
  bytes[20] ^= 0x55;  // inside the first frame's headers
  EventStreamDecoder d;
  int n = 0;
  EXPECT_FALSE(d.feed(bytes, [&](const EventStreamMessage&) { ++n; }));
  EXPECT_EQ(n, 0);
  EXPECT_NE(d.error().find("CRC"), std::string::npos);
}

TEST(BackendEventStream, ImpossibleLengthIsRejected) {
  std::string bytes = two_frames();
  bytes[0] = '\x7f';  // total length ~2 GB: the prelude CRC no longer matches either
  EventStreamDecoder d;
  EXPECT_FALSE(d.feed(bytes, [](const EventStreamMessage&) {}));
}

TEST(BackendEventStream, Crc32MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);
}

}  // namespace
}  // namespace ollie::backend
