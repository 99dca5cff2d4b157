// Qid identity comes from the object a template's Lookup binds, not from the walked name
// (spec §1.5); Qid.vers and Length from the file's options.
#include <gtest/gtest.h>

#include "support/demofs.hpp"
#include "support/testserver.hpp"

using namespace p9;
using testing_support::Raw;

namespace {

struct Identity : ::testing::Test {
  std::shared_ptr<testing_support::DemoState> st = std::make_shared<testing_support::DemoState>();
  std::shared_ptr<virtfs::Adapter<testing_support::DemoCtx>> fs = testing_support::demo_fs(st);
  testing_support::TestServer srv{fs};
  Raw c{srv.sock};

  void SetUp() override {
    c.version();
    ASSERT_EQ(c.attach(0, "glenda").type, Rattach);
  }
  // The qid of the last element of a fresh walk (the fid is clunked again).
  Qid qid(std::vector<std::string> path) {
    auto r = c.walk(0, 99, path);
    EXPECT_EQ(r.wqid.size(), path.size()) << r.ename;
    c.clunk(99);
    return r.wqid.empty() ? Qid{} : r.wqid.back();
  }
  Dir stat(std::uint32_t fid) {
    Fcall t;
    t.type = Tstat;
    t.fid = fid;
    auto d = decode_dir(c.rpc(t).stat);
    EXPECT_TRUE(d);
    return d ? *d : Dir{};
  }
};

}  // namespace

TEST_F(Identity, OneObjectByNameAndByIdHasOneQid) {
  EXPECT_EQ(qid({"item", "a"}), qid({"item", "id1"}));
  EXPECT_EQ(qid({"item", "a", "value"}), qid({"item", "id1", "value"}));
  EXPECT_NE(qid({"item", "a"}), qid({"item", "b"}));
  EXPECT_NE(qid({"item", "a", "value"}), qid({"item", "b", "value"}));
}

TEST_F(Identity, RenameKeepsTheQidAndOpenFids) {
  auto before = qid({"item", "a", "value"});
  ASSERT_EQ(c.walk(0, 2, {"item", "a", "value"}).type, Rwalk);
  ASSERT_EQ(c.open(2, OREAD).type, Ropen);
  st->rename_item("a", "renamed");
  EXPECT_EQ(qid({"item", "renamed", "value"}), before);
  EXPECT_EQ(c.walk(0, 1, {"item", "a"}).wqid.size(), 1u);  // item/ only: a is gone
  EXPECT_EQ(c.read(2, 0).data, "alpha\n");  // the fid refers to the object, not the path
}

TEST_F(Identity, ARecreatedNameGetsANewQid) {
  auto dir = qid({"item", "a"});
  auto file = qid({"item", "a", "value"});
  st->kill_item("a");
  EXPECT_EQ(c.walk(0, 1, {"item", "a"}).wqid.size(), 1u);
  st->add_item("a", "again");
  EXPECT_NE(qid({"item", "a"}), dir);
  EXPECT_NE(qid({"item", "a", "value"}), file);
}

TEST_F(Identity, DirectoryListingsCarryTheSameQids) {
  ASSERT_EQ(c.walk(0, 1, {"item"}).type, Rwalk);
  ASSERT_EQ(c.open(1, OREAD).type, Ropen);
  auto r = c.read(1, 0, 8168);
  auto ds = decode_dirs({reinterpret_cast<const std::uint8_t*>(r.data.data()), r.data.size()});
  ASSERT_TRUE(ds);
  ASSERT_EQ(ds->size(), 3u);
  c.clunk(1);
  EXPECT_EQ((*ds)[1].name, "a");
  EXPECT_EQ((*ds)[1].qid, qid({"item", "id1"}));
}

TEST_F(Identity, TheTableDoesNotGrowAfterObjectsDie) {
  for (int round = 0; round < 40; round++) {
    for (int i = 0; i < 20; i++) {
      auto name = "t" + std::to_string(i);
      st->add_item(name, "x");
      qid({"item", name, "value"});
      st->kill_item(name);
    }
  }
  // 800 instances came and went; the table holds the live ones (a, b) and at most about as
  // many dead ones as it has room for before its next sweep.
  EXPECT_LE(fs->instances(), 2 * (2 + 64u));
}

TEST_F(Identity, VersAndLengthComeFromTheFile) {
  ASSERT_EQ(c.walk(0, 1, {"item", "a", "value"}).type, Rwalk);
  auto d = stat(1);
  EXPECT_EQ(d.qid.vers, 0u);
  EXPECT_EQ(d.length, 6u);  // "alpha\n"
  st->set_item("a", "alphabet");
  d = stat(1);
  EXPECT_EQ(d.qid.vers, 1u);
  EXPECT_EQ(d.length, 9u);
  EXPECT_EQ(c.open(1, OREAD).qid.vers, 1u);
  st->set_item("a", "z");
  EXPECT_EQ(qid({"item", "a", "value"}).vers, 2u);
  EXPECT_EQ(qid({"item", "a", "value"}).path, d.qid.path);
  ASSERT_EQ(c.walk(0, 2, {"hello"}).type, Rwalk);
  EXPECT_EQ(stat(2).length, 0u);  // files without the options: 0, read to EOF
}
