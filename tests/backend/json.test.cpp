// The JSON helpers every decoder goes through: a nesting bound, typed reads that never throw,
// and a dump that never throws on invalid UTF-8.
#include <gtest/gtest.h>

#include "backend/json.hpp"
#include "backend/limits.hpp"

namespace ollie::backend {
namespace {

TEST(BackendJson, NestingPastTheBoundIsUnparsable) {
  const int deep = 100000;  // copying or dumping this recursed 100000 frames deep
  const std::string text = std::string(deep, '[') + std::string(deep, ']');
  EXPECT_TRUE(parse_json(text).is_discarded());
  const int ok = limits::json_depth;
  EXPECT_FALSE(parse_json(std::string(ok, '[') + std::string(ok, ']')).is_discarded());
  EXPECT_FALSE(parse_json("{\"s\":\"" + std::string(1000, '[') + "\"}").is_discarded())
      << "brackets inside strings are no nesting";
}

// A provider's bad event names what is wrong and where, never the bytes themselves.
TEST(BackendJson, AnUnparsableResponseSaysWhy) {
  EXPECT_EQ(unparsable("openai", "{\"a\":\"\xff\"}").message,
            "openai: unparsable response: invalid string: ill-formed UTF-8 byte at byte 7");
  EXPECT_EQ(unparsable("openai", R"({"a":"\ud800"})").message.rfind("openai: unparsable response: invalid string: surrogate", 0), 0u);
  EXPECT_EQ(unparsable("gemini", "<html>").message,
            "gemini: unparsable response: invalid literal at byte 1");
  EXPECT_EQ(unparsable("ollama", "[1]").message, "ollama: unparsable response: an array, not an object");
  EXPECT_EQ(unparsable("x", std::string(100000, '[')).message,
            "x: unparsable response: nested deeper than " + std::to_string(limits::json_depth));
  EXPECT_EQ(unparsable("x", "{", 502).http_status, 502);
  EXPECT_EQ(unparsable("x", "{").cls, ErrorClass::client);
}

TEST(BackendJson, StrictReadsRecordTheFirstWrongTypeAndNeverThrow) {
  const auto j = parse_json(R"({"index":"0","done":"true","n":null,"parts":[1],"big":18446744073709551615})");
  Strict f;
  EXPECT_FALSE(f.integer(j, "index").has_value());
  EXPECT_FALSE(f.boolean(j, "done").has_value());
  EXPECT_FALSE(f.integer(j, "n").has_value()) << "null is absent";
  EXPECT_EQ(f.problem(), "\"index\" is a string, not an integer");
  EXPECT_FALSE(int_field(j, "big").has_value()) << "an integer no int64 holds is no integer";
  EXPECT_FALSE(length_field(j, "index").has_value());
  Strict g;
  const auto* parts = g.array(j, "parts");
  ASSERT_NE(parts, nullptr);
  EXPECT_EQ(g.element((*parts)[0], "a part"), nullptr);
  EXPECT_EQ(g.problem(), "a part is an integer, not an object");
  Strict h;
  EXPECT_EQ(h.str(parse_json("[1]"), "data"), "");
  EXPECT_EQ(h.problem(), "an array in place of an object with \"data\"");
}

TEST(BackendJson, DumpReplacesInvalidUtf8) {
  const json j{{"text", std::string("caf\xC3")}};
  EXPECT_EQ(dump_json(j), "{\"text\":\"caf\xEF\xBF\xBD\"}");
}

}  // namespace
}  // namespace ollie::backend
