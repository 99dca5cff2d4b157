// The one module that says where a user's files are: fallbacks, and the private-directory check
// both daemons and ollie-9p make of a socket's directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include "lib9p/dirs.hpp"
#include "support/testserver.hpp"

namespace {

p9::Env env_of(std::map<std::string, std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST(Dirs, XdgVariablesWinOverHomeFallbacks) {
  auto e = env_of({{"HOME", "/h"}, {"XDG_CONFIG_HOME", "/c"}, {"XDG_DATA_HOME", "/d"}, {"XDG_CACHE_HOME", "/k"},
                   {"XDG_STATE_HOME", "/s"}, {"XDG_RUNTIME_DIR", "/r"}});
  EXPECT_EQ(p9::config_root(e), "/c/ollie");
  EXPECT_EQ(p9::data_root(e), "/d/ollie");
  EXPECT_EQ(p9::cache_home(e), "/k");
  EXPECT_EQ(p9::state_home(e), "/s");
  EXPECT_EQ(p9::runtime_home(e), "/r");
  EXPECT_EQ(p9::runtime_root(e), "/r/ollie");
}

TEST(Dirs, UnsetOrEmptyVariablesFallBackToHome) {
  auto e = env_of({{"HOME", "/h"}, {"XDG_CONFIG_HOME", ""}});
  EXPECT_EQ(p9::config_root(e), "/h/.config/ollie");
  EXPECT_EQ(p9::data_root(e), "/h/.local/share/ollie");
  EXPECT_EQ(p9::cache_home(e), "/h/.cache");
  EXPECT_EQ(p9::state_home(e), "/h/.local/state");
  const auto uid = std::to_string(::getuid());
  EXPECT_EQ(p9::runtime_home(e), "/run/user/" + uid);  // the template value
  EXPECT_EQ(p9::runtime_root(e), "/tmp/ollie-" + uid);  // where sockets go without XDG_RUNTIME_DIR
}

// A relative value is ignored (XDG Base Directory spec): it would be taken against the cwd of
// whoever reads it, a session's among them, where the model writes (a tool directory there).
TEST(Dirs, RelativeXdgVariablesAreIgnored) {
  auto e = env_of({{"HOME", "/h"}, {"XDG_CONFIG_HOME", "cfg"}, {"XDG_DATA_HOME", "./d"}, {"XDG_CACHE_HOME", "k"},
                   {"XDG_STATE_HOME", "s/"}, {"XDG_RUNTIME_DIR", "r"}});
  EXPECT_EQ(p9::config_root(e), "/h/.config/ollie");
  EXPECT_EQ(p9::data_root(e), "/h/.local/share/ollie");
  EXPECT_EQ(p9::cache_home(e), "/h/.cache");
  EXPECT_EQ(p9::state_home(e), "/h/.local/state");
  EXPECT_EQ(p9::runtime_home(e), "/run/user/" + std::to_string(::getuid()));
  EXPECT_EQ(p9::runtime_root(e), "/tmp/ollie-" + std::to_string(::getuid()));
  EXPECT_NE(p9::config_root(env_of({{"HOME", "rel"}})).front(), 'r');  // a relative HOME is none
}

TEST(Dirs, WithoutHomeThePasswordDatabaseAnswers) {
  auto home = p9::home_dir(env_of({}));
  EXPECT_FALSE(home.empty());
  EXPECT_EQ(home.front(), '/');
}

TEST(Dirs, NamespaceDirCanonicalisesDisplayAsPlan9portDoes) {
  const auto me = p9::login_name();
  EXPECT_EQ(p9::namespace_dir(env_of({{"NAMESPACE", "/n"}, {"DISPLAY", ":1"}})), "/n");
  EXPECT_EQ(p9::namespace_dir(env_of({})), "/tmp/ns." + me + ".:0");
  EXPECT_EQ(p9::namespace_dir(env_of({{"DISPLAY", ":1.0"}})), "/tmp/ns." + me + ".:1");
  EXPECT_EQ(p9::namespace_dir(env_of({{"DISPLAY", "/tmp/launch/org:0"}})), "/tmp/ns." + me + "._tmp_launch_org:0");
}

TEST(Dirs, SocketDirOfAPath) {
  EXPECT_EQ(p9::socket_dir("/a/b/sock"), "/a/b");
  EXPECT_EQ(p9::socket_dir("/sock"), "/");
  EXPECT_EQ(p9::socket_dir("sock"), ".");
}

TEST(PrivateDir, MadeWith0700AndAccepted) {
  testing_support::TempDir t;
  const auto d = t.path + "/a/b";
  ASSERT_TRUE(p9::ensure_private_dir(d)) << p9::ensure_private_dir(d).ename();
  struct stat st {};
  ASSERT_EQ(::lstat(d.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST(PrivateDir, AWideModeIsRefusedWithTheFix) {
  testing_support::TempDir t;
  const auto d = t.path + "/ns";
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(d.c_str(), 0777), 0);
  auto st = p9::ensure_private_dir(d);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.ename(), d + ": mode 0777, not 0700: chmod 700 " + d);
}

// /tmp itself (root's, 1777): chmod'ing it would break every other user of the machine.
TEST(PrivateDir, ASharedStickyDirectoryIsRefusedWithoutAChmod) {
  testing_support::TempDir t;
  const auto d = t.path + "/tmp";
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(d.c_str(), 01777), 0);
  auto st = p9::check_private_dir(d);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.ename(), d + ": mode 1777, a shared directory: use a directory of your own (mode 0700)");
  auto root_tmp = p9::check_private_dir("/tmp");
  ASSERT_FALSE(root_tmp);
  EXPECT_EQ(root_tmp.ename().find("chmod"), std::string::npos) << root_tmp.ename();
}

TEST(PrivateDir, ASymlinkToAPrivateDirIsRefused) {
  testing_support::TempDir t;
  const auto real = t.path + "/real", link = t.path + "/ns";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  auto st = p9::ensure_private_dir(link);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.ename(), link + ": a symbolic link, not a private directory: remove it");
}

TEST(PrivateDir, AFileIsRefused) {
  testing_support::TempDir t;
  const auto f = t.path + "/ns";
  ::close(::creat(f.c_str(), 0600));
  auto st = p9::check_private_dir(f);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.ename(), f + ": not a directory: remove it");
}

TEST(PrivateDir, AnotherUsersDirectoryIsRefused) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  testing_support::TempDir t;
  const auto d = t.path + "/ns";
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::chown(d.c_str(), 65534, 65534), 0);
  auto st = p9::check_private_dir(d);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.ename().rfind(d + ": owned by uid 65534, not 0: another user made it", 0), 0u) << st.ename();
}
