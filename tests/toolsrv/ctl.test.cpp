// The text side of toolsrv's control files, straight on a Session.
#include <gtest/gtest.h>

#include "toolsrv/ctl.hpp"
#include "world.hpp"

namespace toolsrv::test {
namespace {


TEST(Ctl, SandboxokTakesPairs) {
  Fixture f;
  const std::string hash(64, 'a');
  EXPECT_TRUE(run_ctl(*f.session, "sandboxok\n"));
  EXPECT_TRUE(run_ctl(*f.session, "sandboxok " + hash + " '/home/me/my proj'\n"));
  EXPECT_EQ(run_ctl(*f.session, "sandboxok " + hash).ename(), "usage: sandboxok [<sha256> <dir>]...");
  EXPECT_EQ(run_ctl(*f.session, "sandboxok xyz /tmp").ename(), "invalid hash: xyz");
  EXPECT_EQ(run_ctl(*f.session, "sandboxok " + hash + " rel").ename(), "dir must be absolute: rel");
}

TEST(Ctl, EnvValueIsTheRestOfTheLine) {
  Fixture f;
  f.load("shell");
  ASSERT_TRUE(run_ctl(*f.session, "env  X=a = 'b'  \n"));
  EXPECT_EQ(body_stdout(f.sh("printenv X")), "a = 'b'  \n");
  EXPECT_EQ(run_ctl(*f.session, "env X\n").ename(), "invalid env name: X");
  EXPECT_EQ(run_ctl(*f.session, "env =x\n").ename(), "invalid env name: ");
}

TEST(Ctl, BlankLinesAreSkippedAndUsageIsChecked) {
  Fixture f;
  EXPECT_TRUE(run_ctl(*f.session, "\n\n  \nforget a1\n"));
  EXPECT_EQ(run_ctl(*f.session, "forget").ename(), "usage: forget <agent>");
  EXPECT_EQ(run_ctl(*f.session, "agentcwd a1").ename(), "usage: agentcwd <agent> <dir>|-");
  EXPECT_EQ(run_ctl(*f.session, "unload a1").ename(), "usage: unload <agent> <tool>...");
  EXPECT_TRUE(run_ctl(*f.session, "unload a1 never-loaded"));
}

TEST(Ctl, ProcCtlChecksTheVerbBeforeTheProcess) {
  Fixture f;
  auto& procs = f.session->processes();
  EXPECT_EQ(run_proc_ctl(procs, 999, "stop\n").ename(), "unknown command: stop");
  EXPECT_EQ(run_proc_ctl(procs, 999, "term now\n").ename(), "usage: term");
  EXPECT_EQ(run_proc_ctl(procs, 999, "signal\n").ename(), "usage: signal <N>");
  EXPECT_EQ(run_proc_ctl(procs, 999, "\n  \nkill\n").ename(), "no such process: 999");
}

TEST(Info, RequestForms) {
  Fixture f;
  EXPECT_EQ(*answer_info(*f.session, ""), f.session->info(""));
  EXPECT_EQ(*answer_info(*f.session, "a1\n"), f.session->info("a1"));
  EXPECT_EQ(answer_info(*f.session, "a1 a2").ename(), "usage: [<agent> | stat <agent> <path>... | resolve <agent> <path>...]");
  EXPECT_EQ(*answer_info(*f.session, "stat a1 /nonexistent\n"), "/nonexistent\tfalse\t-\t-\n");
  EXPECT_EQ(answer_info(*f.session, "resolve a1").ename(), "usage: resolve <agent> <path>...");
  EXPECT_EQ(answer_tools(*f.session, "").ename(), "usage: <agent> | *");
}

}  // namespace
}  // namespace toolsrv::test
