// Text-based tool calls and small contexts (spec §8.15, §8.16), end to end: the real olliesrv and
// toolsrv, the fake provider over real HTTP.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>

#include "olliesrv/world.hpp"

using namespace convo;
using json = nlohmann::json;

TEST(TextCalls, AToolCallWrittenAsTextRunsAndItsResultIsSent) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  w.fake.push({{"text", "I will run it.\n<tool_call>{\"name\": \"shell\", \"arguments\": {\"cmd\": \"echo hi\"}}</tool_call>\n"}});
  w.fake.push({{"text", "It said hi."}});
  ASSERT_TRUE(w.write(a + "/prompt", "say hi")) << w.log_text();
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 2; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));

  // The transcript: the assistant text without the fragment, the call block, its result.
  auto blocks = blocks_of(w, a);
  std::vector<std::string> roles;
  for (auto& b : blocks) roles.push_back(b["role"]);
  ASSERT_EQ(roles, (std::vector<std::string>{"user", "assistant", "call", "tool", "assistant"})) << *w.read(a + "/log.raw");
  EXPECT_EQ(blocks[1]["content"], "I will run it.");
  EXPECT_EQ(blocks[2]["name"], "shell");
  EXPECT_EQ(blocks[2]["content"], R"({"cmd":"echo hi"})");
  EXPECT_NE(blocks[3]["content"].get<std::string>().find("hi"), std::string::npos) << blocks[3].dump();
  EXPECT_EQ(blocks[4]["content"], "It said hi.");
  const std::string id = "text-" + blocks[2]["id"].get<std::string>();

  // The next request carries the call (id text-<call block id>) and its result.
  auto body = chat_bodies(w).at(1);
  json assistant, tool;
  for (auto& m : body["messages"]) {
    if (m["role"] == "assistant") assistant = m;
    if (m["role"] == "tool") tool = m;
  }
  ASSERT_TRUE(assistant.is_object()) << body.dump();
  EXPECT_EQ(assistant["content"], "I will run it.");
  ASSERT_EQ(assistant["tool_calls"].size(), 1u) << assistant.dump();
  EXPECT_EQ(assistant["tool_calls"][0]["id"], id);
  EXPECT_EQ(assistant["tool_calls"][0]["function"]["name"], "shell");
  ASSERT_TRUE(tool.is_object()) << body.dump();
  EXPECT_EQ(tool["tool_call_id"], id);
  EXPECT_NE(tool["content"].get<std::string>().find("hi"), std::string::npos) << tool.dump();
}

// A response that is nothing but a call written as text: its streamed assistant block is still
// finalized (empty once the call is taken out), so a chat.raw reader holding its partials gets the
// final line that replaces them (§2.8.8).
TEST(TextCalls, AResponseThatIsOnlyATextCallStillFinalizesItsStreamedBlock) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  auto raw = w.open(a + "/chat.raw");
  w.fake.push({{"text", "<tool_call>{\"name\": \"shell\", \"arguments\": {\"cmd\": \"true\"}}</tool_call>"},
               {"chunk", 16},
               {"delay_ms", 40}});
  w.fake.push({{"text", "done"}});
  ASSERT_TRUE(w.write(a + "/prompt", "go"));
  std::set<std::string> partial, final;
  std::string pending;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool answered = false;
  while (!answered && std::chrono::steady_clock::now() < end) {
    auto r = raw.read(8192);
    ASSERT_TRUE(r && !r->empty());
    pending += *r;
    for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
      json b = json::parse(pending.substr(0, nl));
      pending.erase(0, nl + 1);
      if (b.value("role", "") != "assistant") continue;
      (b.value("partial", false) ? partial : final).insert(b["id"].get<std::string>());
      if (!b.value("partial", false) && b["content"] == "done") answered = true;
    }
  }
  ASSERT_TRUE(answered) << w.log_text();
  ASSERT_FALSE(partial.empty());  // 5 slow pieces: the reader saw the call's text stream
  for (const auto& id : partial) EXPECT_TRUE(final.count(id)) << "partials of " << id << " never finalized";

  auto blocks = blocks_of(w, a);
  std::vector<std::string> roles;
  for (auto& b : blocks) roles.push_back(b["role"]);
  ASSERT_EQ(roles, (std::vector<std::string>{"user", "assistant", "call", "tool", "assistant"})) << *w.read(a + "/log.raw");
  EXPECT_EQ(blocks[1]["content"], "");
  EXPECT_EQ(blocks[2]["name"], "shell");
}

TEST(TextCalls, TextNamingNoLoadedToolStaysTheAnswer) {
  World w;
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  const std::string text = "Try this:\n```json\n{\"name\": \"not_a_tool\", \"arguments\": {}}\n```";
  w.fake.push({{"text", text}});
  ASSERT_TRUE(w.write(a + "/prompt", "hello"));
  ASSERT_TRUE(eventually([&] { return chat_requests(w) == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  auto said = contents(w, a, "assistant");
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0], text);
  EXPECT_TRUE(contents(w, a, "call").empty());
}

// An ollama agent whose num_ctx (backends.conf) cannot hold its system prompt and tools is told
// once, not at every request; every ollama request sets options.num_ctx.
TEST(TextCalls, ASmallOllamaContextIsReportedOncePerAgent) {
  World w;
  write_file(w.config + "/backends.conf", "[ollama]\nurl = " + w.fake.url() + "\nnum_ctx = 1024\n");
  ASSERT_TRUE(w.rdwr("ctl", "invalidate"));
  auto s = w.session("work");
  auto a = w.agent(s, "main");
  ASSERT_TRUE(w.write(a + "/cfg", "backend=ollama model=fake-model")) << w.log_text();
  w.fake.push({{"text", "first"}});
  w.fake.push({{"text", "second"}});
  ASSERT_TRUE(w.write(a + "/prompt", "one"));
  ASSERT_TRUE(eventually([&] { return chat_bodies(w, "/api/chat").size() == 1; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  ASSERT_TRUE(w.write(a + "/prompt", "two"));
  ASSERT_TRUE(eventually([&] { return chat_bodies(w, "/api/chat").size() == 2; }));
  ASSERT_TRUE(w.wait_state(a, "idle"));
  std::vector<std::string> small;
  for (auto& c : contents(w, a, "info"))
    if (c.find("too small") != std::string::npos) small.push_back(c);
  ASSERT_EQ(small.size(), 1u) << *w.read(a + "/log.raw");
  EXPECT_EQ(small[0].rfind("context length 1024 is too small for the system prompt and tools (~", 0), 0u) << small[0];
  EXPECT_NE(small[0].find(" tokens): the model may answer tool calls as text; raise [ollama] num_ctx in backends.conf"),
            std::string::npos)
      << small[0];
  for (auto& b : chat_bodies(w, "/api/chat")) EXPECT_EQ(b["options"]["num_ctx"], 1024) << b.dump().substr(0, 300);
  EXPECT_EQ(contents(w, a, "assistant"), (std::vector<std::string>{"first", "second"}));
}
