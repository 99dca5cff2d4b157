// Path locks: same-path writes serialize, different paths overlap, global excludes, read never waits.

#include <gtest/gtest.h>

#include <optional>

#include "toolsrv/locks.hpp"
#include "world.hpp"

namespace toolsrv::test {
namespace {

LockRequest write_req(const std::string& path) { return {LockRequest::Kind::write, path}; }
LockRequest global_req() { return {LockRequest::Kind::global, ""}; }
LockRequest read_req() { return {LockRequest::Kind::none, ""}; }

// Records the hold of one acquisition.
struct Slot {
  std::optional<LockHold> hold;
  std::function<void(LockHold)> cb() {
    return [this](LockHold h) { hold = std::move(h); };
  }
  bool granted() const { return hold.has_value(); }
};

TEST(PathLocks, SamePathWritesSerialize) {
  auto t = LockTable::create();
  Slot a, b;
  t->acquire(write_req("/p/f"), a.cb());
  t->acquire(write_req("/p/f"), b.cb());
  EXPECT_TRUE(a.granted());
  EXPECT_FALSE(b.granted());
  a.hold->release();
  EXPECT_TRUE(b.granted());
}

TEST(PathLocks, DifferentPathsOverlap) {
  auto t = LockTable::create();
  Slot a, b;
  t->acquire(write_req("/p/f"), a.cb());
  t->acquire(write_req("/p/g"), b.cb());
  EXPECT_TRUE(a.granted());
  EXPECT_TRUE(b.granted());
}

TEST(PathLocks, GlobalExcludesEverything) {
  auto t = LockTable::create();
  Slot w, g, w2, g2;
  t->acquire(write_req("/p/f"), w.cb());
  t->acquire(global_req(), g.cb());
  EXPECT_FALSE(g.granted()) << "global waits for running writes";
  t->acquire(write_req("/p/other"), w2.cb());
  EXPECT_FALSE(w2.granted()) << "a write arriving after a waiting global waits behind it";
  w.hold->release();
  EXPECT_TRUE(g.granted());
  EXPECT_FALSE(w2.granted());
  t->acquire(global_req(), g2.cb());
  EXPECT_FALSE(g2.granted());
  g.hold->release();
  EXPECT_TRUE(w2.granted());
  EXPECT_FALSE(g2.granted());
  w2.hold->release();
  EXPECT_TRUE(g2.granted());
}

TEST(PathLocks, ReadNeverWaits) {
  auto t = LockTable::create();
  Slot g, r;
  t->acquire(global_req(), g.cb());
  t->acquire(read_req(), r.cb());
  EXPECT_TRUE(r.granted());
  EXPECT_EQ(t->waiting(), 0u);
}

TEST(PathLocks, WaitingIsCancellable) {
  auto t = LockTable::create();
  Slot g, g2, w;
  t->acquire(global_req(), g.cb());
  const auto ticket = t->acquire(global_req(), g2.cb());
  t->acquire(write_req("/x"), w.cb());
  EXPECT_TRUE(t->cancel(ticket));
  EXPECT_FALSE(t->cancel(ticket));
  g.hold->release();
  EXPECT_FALSE(g2.granted());
  EXPECT_TRUE(w.granted()) << "a cancelled global no longer holds back later writes";
}

TEST(PathLocks, HoldReleasedWhenDestroyed) {
  auto t = LockTable::create();
  Slot b;
  {
    Slot a;
    t->acquire(write_req("/f"), a.cb());
    t->acquire(write_req("/f"), b.cb());
    EXPECT_FALSE(b.granted());
  }
  EXPECT_TRUE(b.granted());
}

TEST(PathLocks, RequestOfACall) {
  const auto dir = temp_dir("lock");
  std::filesystem::create_directories(dir + "/real");
  std::filesystem::create_directory_symlink(dir + "/real", dir + "/link");
  const auto w = LockRequest::for_call(Scope::write, {{"path", "link/../link/new.txt"}}, dir);
  EXPECT_EQ(w.kind, LockRequest::Kind::write);
  EXPECT_EQ(w.path, dir + "/real/new.txt");
  // `..` is taken textually, as the file tools take it before they open the path (the lock is
  // on the file they write: `deep/../x.txt` is <cwd>/x.txt for file_write).
  std::filesystem::create_directories(dir + "/real/sub");
  std::filesystem::create_directory_symlink(dir + "/real/sub", dir + "/deep");
  EXPECT_EQ(LockRequest::for_call(Scope::write, {{"path", "deep/../x.txt"}}, dir).path, dir + "/x.txt");
  // A dangling symlink is where a write through it lands (§6.7: symlinks resolved for the part
  // that exists; the link exists): it and its target serialize, relative and absolute targets.
  std::filesystem::create_symlink("later.txt", dir + "/dangling");
  EXPECT_EQ(LockRequest::for_call(Scope::write, {{"path", "dangling"}}, dir).path, dir + "/later.txt");
  std::filesystem::create_symlink(dir + "/link/deeper/f", dir + "/far");
  EXPECT_EQ(LockRequest::for_call(Scope::write, {{"path", "far"}}, dir).path, dir + "/real/deeper/f");
  std::filesystem::create_symlink("loop2", dir + "/loop1");
  std::filesystem::create_symlink("loop1", dir + "/loop2");
  EXPECT_EQ(LockRequest::for_call(Scope::write, {{"path", "loop1/x"}}, dir).path.rfind(dir + "/loop", 0), 0u);
  EXPECT_EQ(LockRequest::for_call(Scope::write, {{"path", 3}}, dir).kind, LockRequest::Kind::global);
  EXPECT_EQ(LockRequest::for_call(Scope::write, nlohmann::json::object(), dir).kind, LockRequest::Kind::global);
  EXPECT_EQ(LockRequest::for_call(Scope::read, {{"path", "x"}}, dir).kind, LockRequest::Kind::none);
  EXPECT_EQ(LockRequest::for_call(Scope::global, {{"path", "x"}}, dir).kind, LockRequest::Kind::global);
}

}  // namespace
}  // namespace toolsrv::test
