// The namespace directory in a shared /tmp (spec §1.4): another user who makes it first could
// swap olliesrv's socket for its own and receive $OLLIE_AUTH from ollie-9p. olliesrv refuses to
// start in such a directory and ollie-9p refuses to dial through it. Real binaries.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <thread>

#include "support/process.hpp"
#include "support/testserver.hpp"

using testing_support::built;
using testing_support::Child;
using testing_support::run;

using testing_support::wait_for;

TEST(NamespaceDir, OlliesrvRefusesAWorldWritableNamespaceDir) {
  testing_support::TempDir t;
  const auto ns = t.path + "/ns.me.:0";
  ASSERT_EQ(::mkdir(ns.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(ns.c_str(), 0777), 0);  // what another user's `mkdir -m 777` leaves
  auto r = run({built("bin/olliesrv")}, "", {"NAMESPACE=" + ns});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("olliesrv: " + ns + ": mode 0777, not 0700: chmod 700 " + ns + "\n"), std::string::npos) << r.err;
  struct stat s;
  EXPECT_NE(::stat((ns + "/ollie").c_str(), &s), 0) << "no socket was made";
}

TEST(NamespaceDir, OlliesrvRefusesASymlinkedNamespaceDir) {
  testing_support::TempDir t;
  const auto real = t.path + "/elsewhere", ns = t.path + "/ns.me.:0";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), ns.c_str()), 0);
  auto r = run({built("bin/olliesrv")}, "", {"NAMESPACE=" + ns});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(ns + ": a symbolic link, not a private directory: remove it"), std::string::npos) << r.err;
}

TEST(NamespaceDir, OlliesrvRefusesAnotherUsersNamespaceDir) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  testing_support::TempDir t;
  const auto ns = t.path + "/ns.me.:0";
  ASSERT_EQ(::mkdir(ns.c_str(), 0700), 0);
  ASSERT_EQ(::chown(ns.c_str(), 65534, 65534), 0);
  auto r = run({built("bin/olliesrv")}, "", {"NAMESPACE=" + ns});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(ns + ": owned by uid 65534"), std::string::npos) << r.err;
}

TEST(NamespaceDir, Ollie9pRefusesToDialThroughAWidenedDir) {
  testing_support::TempDir t;
  const auto ns = t.path + "/ns";
  Child srv({built("bin/olliesrv")}, {"NAMESPACE=" + ns, "XDG_DATA_HOME=" + t.path + "/data"});
  ASSERT_TRUE(wait_for(ns + "/ollie")) << srv.err_text();
  auto ok = run({built("bin/ollie-9p"), "ls"}, "", {"NAMESPACE=" + ns, "OLLIE_ADDR="});
  EXPECT_EQ(ok.status, 0) << ok.err;
  ASSERT_EQ(::chmod(ns.c_str(), 0777), 0);  // now anyone could have replaced the socket
  auto r = run({built("bin/ollie-9p"), "ls"}, "", {"NAMESPACE=" + ns, "OLLIE_ADDR="});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ollie-9p: ollie: " + ns + ": mode 0777, not 0700: chmod 700 " + ns + "\n");
  ::kill(srv.pid(), SIGTERM);
  ASSERT_TRUE(srv.wait());
}

// Another user's socket planted in a directory it made: ollie-9p never connects, so the
// impostor never sees $OLLIE_AUTH.
TEST(NamespaceDir, Ollie9pNeverConnectsToASocketInAForeignDir) {
  testing_support::TempDir t;
  const auto ns = t.path + "/ns";
  ASSERT_EQ(::mkdir(ns.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(ns.c_str(), 0777), 0);
  int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const auto path = ns + "/ollie";
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(l, 8), 0);
  auto r = run({built("bin/ollie-9p"), "read", "help"}, "",
               {"NAMESPACE=" + ns, "OLLIE_ADDR=", "OLLIE_UNAME=agent", "OLLIE_AUTH=the-secret"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("mode 0777, not 0700"), std::string::npos) << r.err;
  EXPECT_LT(::accept(l, nullptr, nullptr), 0) << "ollie-9p connected to the planted socket";
  ::close(l);
}
