// build() validates a whole declaration and names the node it refuses; help is generated.
#include <gtest/gtest.h>

#include "support/demofs.hpp"

using namespace virtfs;
using Ctx = testing_support::DemoCtx;
using D = Dsl<Ctx>;

namespace {

auto text(std::string s) {
  return Read([s](Ctx&) { return p9::Result<std::string>(s); });
}
auto sink() {
  return Write([](Ctx&, std::string) { return p9::Status{}; });
}
auto echo() {
  return Rdwr([](Ctx&, std::string r) -> asio::awaitable<p9::Result<std::string>> { co_return r; });
}
auto sig() {
  return [](Ctx&) { return std::make_shared<Signal>(); };
}

std::string refusal(Node<Ctx> root) {
  auto t = build(std::move(root));
  return t ? "accepted" : t.ename();
}

}  // namespace

TEST(Build, AcceptsTheDemoTree) { EXPECT_EQ(refusal(testing_support::demo_decl()), "accepted"); }

TEST(Build, RefusesADirectoryWithLeafHandlers) {
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Dir("sub", Mode{0555}, text("x")))), "/sub: directory with file handlers");
}

TEST(Build, RefusesMoreThanOneBlockingVariant) {
  auto open = [](Ctx& c) { return p9::Result<std::shared_ptr<Cursor>>(c.st->log->cursor()); };
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("f", Mode{0444}, BlockOnce(text("v").f, sig()), Stream(open)))),
            "/f: more than one blocking variant");
}

TEST(Build, RefusesATemplateWithoutList) {
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Template("{x}", Mode{0555},
                                                        Lookup([](const Ctx& c, const std::string&) { return std::optional(Instance<Ctx>{c, c.st}); })))),
            "/{x}: template without List");
}

TEST(Build, RefusesDuplicateNames) {
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Dir("d", Mode{0555}, D::Leaf("a", Mode{0444}, text("1")),
                                                   D::Leaf("a", Mode{0444}, text("2"))))),
            "/d: duplicate name a");
}

TEST(Build, RefusesHandlersTheModeCannotServe) {
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("ro", Mode{0444}, sink()))), "/ro: Write needs a write permission in its mode");
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("wo", Mode{0200}, text("x")))), "/wo: Read needs a read permission in its mode");
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("half", Mode{0444}, echo()))), "/half: Rdwr needs a write permission in its mode");
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("extra", Mode{0666}, text("x")))),
            "/extra: mode allows writing but nothing serves writes");
}

TEST(Build, RefusesAFileWithoutAHandler) {
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("empty", Mode{0444}))), "/empty: file without a handler");
}

TEST(Build, RefusesRdwrMixedWithReadOrWrite) {
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("x", Mode{0666}, echo(), text("y")))), "/x: Rdwr combined with Read or Write");
}

TEST(Build, RefusesBadNames) {
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("a/b", Mode{0444}, text("x")))), "/a/b: bad name");
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("..", Mode{0444}, text("x")))), "/..: bad name");
}

TEST(Build, RefusesRenameOutsideATemplate) {
  auto rename = Rename([](Ctx&, std::string) -> asio::awaitable<p9::Status> { co_return p9::Status{}; },
                       [](const Ctx&) { return std::string(); });
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Dir("d", Mode{0555}, rename))),
            "/d: Rename on a node that is not a template directory");
  EXPECT_EQ(refusal(D::Dir("/", Mode{0555}, D::Leaf("f", Mode{0444}, text("x"), rename))),
            "/f: Rename on a node that is not a template directory");
}

TEST(Build, HelpListsEveryNodeInDeclarationOrder) {
  auto t = build(testing_support::demo_decl());
  ASSERT_TRUE(t);
  std::string help = t->help();
  EXPECT_TRUE(help.starts_with("/\tdir\t0555\t\n/hello\tRead\t0444\ta greeting\n/counter\tRead\t0444\t")) << help;
  EXPECT_NE(help.find("/note\tRead+Write\t0644\tread and write\n"), std::string::npos);
  EXPECT_NE(help.find("/ctl\tRdwr\t0600\t"), std::string::npos);
  EXPECT_NE(help.find("/feed\tWrite+BlockOnce\t0600\t"), std::string::npos);
  EXPECT_NE(help.find("/log\tStream\t0444\t"), std::string::npos);
  EXPECT_NE(help.find("/event\tStreamRdwr\t0666\t"), std::string::npos);
  EXPECT_NE(help.find("/item/{item}\tdir\t0555\t\n/item/{item}/value\tRead\t0444\t\n"), std::string::npos);
}
