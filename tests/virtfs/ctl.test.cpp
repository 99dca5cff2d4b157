// The ctl table: one place for unknown verbs, usage, who may, idle only and free text.
#include <gtest/gtest.h>

#include "virtfs/ctl.hpp"

using namespace virtfs;

namespace {

struct Agent {
  std::string model = "m1";
  std::string injected;
};
using Fn = p9::Result<std::string> (*)(Agent&, const Command&);

p9::Result<std::string> model(Agent& a, const Command& c) {
  if (!c.args.empty()) a.model = c.args[0];
  return a.model + "\n";
}
p9::Result<std::string> clear(Agent&, const Command&) { return std::string("cleared\n"); }
p9::Result<std::string> tools(Agent&, const Command&) { return std::string("echo\n"); }
p9::Result<std::string> inject(Agent& a, const Command& c) {
  a.injected = c.args[0];
  return std::string("injected\n");
}
p9::Result<std::string> peeradd(Agent&, const Command& c) {
  if (c.args[0] == "self") return c.usage();
  return "peer " + c.args[0] + "\n";
}

// A slice of spec §3.3: each Self and Idle-only value once.
constexpr Verb<Fn> agent_verbs[] = {
    {.name = "model", .synopsis = "[name]", .max_args = 1, .self = Self::query, .idle = Idle::set, .run = model},
    {.name = "clear", .idle = Idle::yes, .run = clear},
    {.name = "tools", .self = Self::yes, .run = tools},
    {.name = "inject", .synopsis = "<text>", .min_args = 1, .max_args = 1, .free_text = true, .run = inject},
    {.name = "peeradd", .synopsis = "name", .min_args = 1, .max_args = 1, .run = peeradd},
};

p9::Result<std::string> run(Agent& a, std::string_view request, Caller who = {}) {
  auto m = match(agent_verbs, request, who);
  if (!m) return m.error();
  return m->verb->run(a, m->command);
}

}  // namespace

TEST(CtlTable, FindsTheVerbAndTokenizesItsArguments) {
  Agent a;
  EXPECT_EQ(*run(a, "  model  \n"), "m1\n");
  EXPECT_EQ(*run(a, "model 'qwen3 8b'\n"), "qwen3 8b\n");
  EXPECT_EQ(a.model, "qwen3 8b");
}

TEST(CtlTable, UnknownVerbsAndCountsAnswerFromTheTable) {
  Agent a;
  EXPECT_EQ(run(a, "frob x").ename(), "unknown command: frob");
  EXPECT_EQ(run(a, "").ename(), "unknown command: ");  // `/` alone (spec §3.4)
  EXPECT_EQ(run(a, "model a b").ename(), "usage: model [name]");
  EXPECT_EQ(run(a, "clear now").ename(), "usage: clear");
  EXPECT_EQ(run(a, "peeradd").ename(), "usage: peeradd name");
  EXPECT_EQ(run(a, "peeradd self").ename(), "usage: peeradd name");  // a handler's own refusal
  EXPECT_EQ(run(a, "model 'x").ename(), "unterminated quote");
}

TEST(CtlTable, OneCommandPerRequestUnlessFreeText) {
  Agent a;
  EXPECT_EQ(run(a, "clear\nclear\n").ename(), "one command per request");
  EXPECT_EQ(*run(a, "inject  look at\n'this'\n"), "injected\n");
  EXPECT_EQ(a.injected, " look at\n'this'");  // the raw rest after the verb and one blank
  EXPECT_EQ(run(a, "inject").ename(), "usage: inject <text>");
}

TEST(CtlTable, SelfColumn) {
  Agent a;
  Caller self{.self = true};
  EXPECT_EQ(*run(a, "tools", self), "echo\n");                      // yes
  EXPECT_EQ(*run(a, "model", self), "m1\n");                        // query only: showing
  EXPECT_EQ(run(a, "model big", self).ename(), "permission denied");  // query only: setting
  EXPECT_EQ(run(a, "clear", self).ename(), "permission denied");      // no
  EXPECT_EQ(run(a, "clear extra", self).ename(), "permission denied");  // before usage
  EXPECT_EQ(run(a, "frob", self).ename(), "permission denied");       // no verb: nothing named
  EXPECT_EQ(*run(a, "model big"), "big\n");                         // the hostowner may
}

TEST(CtlTable, IdleOnlyColumn) {
  Agent a;
  Caller busy{.running = true};
  EXPECT_EQ(run(a, "clear", busy).ename(), "cannot clear while agent is running");  // yes
  EXPECT_EQ(*run(a, "model", busy), "m1\n");                                          // set: showing
  EXPECT_EQ(run(a, "model big", busy).ename(), "cannot model while agent is running");  // set: setting
  EXPECT_EQ(*run(a, "tools", busy), "echo\n");                                        // no
  EXPECT_EQ(*run(a, "clear"), "cleared\n");
}

TEST(CtlTable, WriteFilesRunLinesInOrderUntilTheFirstError) {
  Agent a;
  std::vector<std::string> ran;
  auto st = each_line("model x\n\n  \ninject keep  trailing  \nfrob\nmodel y\n", [&](std::string_view line) -> p9::Status {
    auto m = match_line(agent_verbs, line);
    if (!m) return m.error();
    ran.push_back(m->command.verb);
    if (auto r = m->verb->run(a, m->command); !r) return r.error();
    return {};
  });
  EXPECT_EQ(st.ename(), "unknown command: frob");
  EXPECT_EQ(ran, (std::vector<std::string>{"model", "inject"}));
  EXPECT_EQ(a.model, "x");
  EXPECT_EQ(a.injected, "keep  trailing  ");  // a line's free text keeps its trailing blanks
}
