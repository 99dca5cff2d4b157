// The process table with real processes: end of call, timeouts, streaming, caps, control, GC.

#include <fcntl.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "toolsrv/process.hpp"
#include "world.hpp"

namespace toolsrv::test {
namespace {

using namespace std::chrono_literals;

Launch sh_launch(const std::string& cmd, std::chrono::seconds timeout = 0s, bool background = false) {
  Launch l;
  l.tool = "sh";
  l.agent = "a1";
  l.background = background;
  l.timeout = timeout;
  l.spec.argv = {"/bin/sh", "-c", cmd};
  l.spec.env = {"PATH=/usr/bin:/bin"};
  l.spec.cwd = "/";
  return l;
}

// Waits until the process is finished (via when_changed, no polling).
void wait_finished(Process& p, std::chrono::seconds limit = 30s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!p.finished() && std::chrono::steady_clock::now() < until) {
    // Shared with the wake-up, which may still be inside set_value on the table's thread when
    // this loop goes on: a promise on this stack was freed under it.
    auto changed = std::make_shared<std::promise<void>>();
    auto ready = changed->get_future();
    auto sub = p.when_changed(p.version(), [changed] { changed->set_value(); });
    if (p.finished()) break;
    ready.wait_until(until);
    sub.reset();
  }
}

// Running (a killed orphan may stay a zombie until init reaps it).
bool alive(pid_t pid) {
  const auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

TEST(ProcessTable, ExitStatusAndSeparateStreams) {
  ProcessTable t;
  auto l = sh_launch("cat; echo err >&2; exit 3");
  l.stdin_data = "{\"a\":1}";
  auto p = start_sync(t, std::move(l));
  wait_finished(*p);
  EXPECT_EQ(p->status(), ProcStatus::exited);
  EXPECT_EQ(p->wait_text(), "pid=1\nstatus=exited\nexit=3\nstdout=7\nstderr=4\n");
  EXPECT_EQ(p->reply(), "pid=1\nstatus=exited\nexit=3\nstdout=7\nstderr=4\n\n{\"a\":1}err\n");
  EXPECT_EQ(p->read_out(0, 100).data, "{\"a\":1}err\n");
  EXPECT_TRUE(p->read_out(11, 100).eof);
}

// Arguments larger than the pipe are written as the tool reads them, and a tool that reads none
// of them still ends its call (the rest meets a closed pipe).
TEST(ProcessTable, ArgumentsLargerThanThePipeReachTheToolOrAreDropped) {
  ProcessTable t;
  auto l = sh_launch("wc -c");
  l.stdin_data = std::string(1 << 20, 'x');
  auto p = start_sync(t, std::move(l));
  wait_finished(*p);
  EXPECT_EQ(p->read_out(0, 100).data, "1048576\n");
  auto ignoring = sh_launch("echo done");
  ignoring.stdin_data = std::string(1 << 20, 'x');
  auto q = start_sync(t, std::move(ignoring));
  wait_finished(*q);
  EXPECT_EQ(q->status(), ProcStatus::exited);
  EXPECT_EQ(q->read_out(0, 100).data, "done\n");
}

// toolsrv ignores SIGPIPE and catches SIGTERM; a tool starts with every disposition at default.
TEST(ProcessTable, ToolsStartWithDefaultSignalDispositions) {
  struct sigaction ign {}, caught {}, old_pipe {}, old_usr1 {};
  ign.sa_handler = SIG_IGN;
  caught.sa_handler = [](int) {};
  ASSERT_EQ(::sigaction(SIGPIPE, &ign, &old_pipe), 0);
  ASSERT_EQ(::sigaction(SIGUSR1, &caught, &old_usr1), 0);
  ProcessTable t;
  auto p = start_sync(t, sh_launch("exec cat /proc/self/status"));  // cat handles no signal of its own
  wait_finished(*p);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  ::sigaction(SIGUSR1, &old_usr1, nullptr);
  const auto status = p->read_out(0, 1 << 16).data;
  EXPECT_NE(status.find("\nSigIgn:\t0000000000000000\n"), std::string::npos) << status;
  EXPECT_NE(status.find("\nSigCgt:\t0000000000000000\n"), std::string::npos) << status;
}

TEST(ProcessTable, StrayBackgroundChildDoesNotHangTheCall) {
  ProcessTable t;
  const auto start = std::chrono::steady_clock::now();
  auto p = start_sync(t, sh_launch("sleep 1000 & echo $! ; echo started"));
  wait_finished(*p);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
  EXPECT_EQ(p->status(), ProcStatus::exited);
  const auto out = p->read_out(0, 100).data;
  const pid_t stray = std::stoi(out);
  EXPECT_NE(out.find("started"), std::string::npos);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(alive(stray)) << "the leftover child of the group was not killed";
}

TEST(ProcessTable, DrainStopsAfterTwoSecondsForEscapedChild) {
  ProcessTable t;
  const auto start = std::chrono::steady_clock::now();
  // setsid leaves the group: it is beyond the kill, and holds the pipe; the drain limit ends it.
  auto p = start_sync(t, sh_launch("setsid sleep 5 & sleep 0.2; echo x"));
  wait_finished(*p);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 1900ms);
  EXPECT_LT(took, 4000ms);
  EXPECT_EQ(p->status(), ProcStatus::exited);
}

TEST(ProcessTable, TimeoutKillsGrandchildren) {
  ProcessTable t;
  const auto dir = temp_dir("grand");
  auto p = start_sync(t, sh_launch("sh -c 'sleep 1000 & echo $! > " + dir + "/gc; wait' & wait", 1s));
  wait_finished(*p, 10s);
  EXPECT_EQ(p->status(), ProcStatus::timeout);
  EXPECT_EQ(p->wait_text().find("status=timeout\n"), 6u);
  const pid_t grandchild = std::stoi(read_file(dir + "/gc"));
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(alive(grandchild));
}

TEST(ProcessTable, BackgroundOutputStreamsWhileRunning) {
  ProcessTable t;
  auto p = start_sync(t, sh_launch("echo one; sleep 0.5; echo two; sleep 0.5", 0s, true));
  // The first line arrives while the process still runs.
  std::string got;
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (got.find("one") == std::string::npos && std::chrono::steady_clock::now() < until) {
    const auto v = p->version();
    got += p->read_out(got.size(), 4096).data;
    if (got.find("one") != std::string::npos) break;
    auto changed = std::make_shared<std::promise<void>>();  // as in wait_finished
    auto ready = changed->get_future();
    auto sub = p->when_changed(v, [changed] { changed->set_value(); });
    ready.wait_for(1s);
  }
  EXPECT_EQ(got, "one\n");
  EXPECT_FALSE(p->finished());
  EXPECT_EQ(p->wait_text(), "");
  EXPECT_NE(p->stat_text().find("background=true\nstatus=running\n"), std::string::npos);
  wait_finished(*p);
  EXPECT_EQ(p->read_out(0, 4096).data, "one\ntwo\n");
  EXPECT_EQ(p->wait_text(), "pid=1\nstatus=exited\nexit=0\nstdout=8\nstderr=0\n");
  const auto stat = p->stat_text();
  EXPECT_EQ(stat.rfind("pid=1\ntool=sh\nagent=a1\nbackground=true\nstatus=exited\nexit=0\nstarted=", 0), 0u) << stat;
  EXPECT_NE(stat.find("\noutput=8\n"), std::string::npos);
}

TEST(ProcessTable, HundredMegabytesAreCappedHeadAndTail) {
  ProcessTable t;
  auto p = start_sync(t, sh_launch("head -c 104857600 /dev/zero; echo END"));
  wait_finished(*p, 120s);
  ASSERT_EQ(p->status(), ProcStatus::exited);
  const auto reply = p->reply();
  const std::size_t omitted = 104857604 - output_head_cap - output_tail_cap;
  const std::string line = "\n[\u2026 " + std::to_string(omitted) + " bytes omitted \u2026]\n";
  EXPECT_EQ(header(reply, "stdout"), std::to_string(output_head_cap + line.size() + output_tail_cap));
  const auto out = body_stdout(reply);
  EXPECT_EQ(out.substr(output_head_cap, line.size()), line);
  EXPECT_EQ(out.substr(out.size() - 4), "END\n");
}

TEST(ProcessTable, ExecFailureIsAClearResult) {
  ProcessTable t;
  Launch l = sh_launch("");
  l.spec.argv = {"/nonexistent/tool"};
  auto p = start_sync(t, std::move(l));
  EXPECT_TRUE(p->finished());
  EXPECT_EQ(p->status(), ProcStatus::failed);
  EXPECT_EQ(body_stderr(p->reply()), "exec /nonexistent/tool: No such file or directory\n");
}

TEST(ProcessTable, NoDescriptorLeaks) {
  ProcessTable t;
  const int leak = ::open("/dev/null", O_RDONLY);  // not CLOEXEC on purpose
  auto p = start_sync(t, sh_launch("ls /proc/self/fd"));
  wait_finished(*p);
  ::close(leak);
  EXPECT_EQ(p->read_out(0, 4096).data, "0\n1\n2\n3\n");  // 3: ls's own directory handle
}

TEST(ProcessTable, ControlTermKillSignalDismiss) {
  ProcessTable t;
  auto p = start_sync(t, sh_launch("sleep 30", 0s, true));
  EXPECT_EQ(t.control(p->pid(), "signal 0").ename(), "invalid signal: 0");
  EXPECT_EQ(t.control(p->pid(), "signal x").ename(), "invalid signal: x");
  EXPECT_EQ(t.control(p->pid(), "frob").ename(), "unknown control message");
  EXPECT_TRUE(t.control(p->pid(), "signal 15"));
  wait_finished(*p);
  EXPECT_EQ(p->status(), ProcStatus::signaled);
  EXPECT_NE(p->wait_text().find("signal=15\n"), std::string::npos);
  EXPECT_EQ(t.control(p->pid(), "kill").ename(), "process has exited");
  EXPECT_EQ(t.control(p->pid(), "term").ename(), "process has exited");
  EXPECT_TRUE(t.control(p->pid(), "dismiss"));
  EXPECT_EQ(t.find(p->pid()), nullptr);
}

TEST(ProcessTable, CancelKillsTheGroup) {
  ProcessTable t;
  auto p = start_sync(t, sh_launch("sleep 30"));
  t.cancel(p->pid());
  wait_finished(*p);
  EXPECT_EQ(p->status(), ProcStatus::signaled);
  EXPECT_NE(p->wait_text().find("signal=9\n"), std::string::npos);
}

TEST(ProcessTable, FinishedProcessesAreCollected) {
  ProcessTable t(1s);
  auto p = start_sync(t, sh_launch("true"));
  wait_finished(*p);
  EXPECT_EQ(t.pids().size(), 1u);
  EXPECT_EQ(t.collect(), 0u);
  std::this_thread::sleep_for(1100ms);
  t.collect();  // the thread may have collected it already
  EXPECT_TRUE(t.pids().empty());
}

TEST(ProcessTable, ReadsKeepAProcessAlive) {
  ProcessTable t(1s);
  auto p = start_sync(t, sh_launch("true"));
  wait_finished(*p);
  std::this_thread::sleep_for(700ms);
  p->touch();
  std::this_thread::sleep_for(700ms);
  t.collect();
  EXPECT_EQ(t.pids().size(), 1u);
}

TEST(ProcessTable, DestructionKillsRunningGroups) {
  pid_t os_pid;
  {
    ProcessTable t;
    auto p = start_sync(t, sh_launch("sleep 30", 0s, true));
    os_pid = p->os_pid();
    EXPECT_TRUE(alive(os_pid));
  }
  EXPECT_FALSE(alive(os_pid));
}

// The table of finished processes is bounded: past proc_finished_max the least recently used go
// first, whatever their age; running ones are never dropped.
TEST(ProcessTable, FinishedTableIsCappedLeastRecentlyUsedFirst) {
  ProcessTable t;
  auto running = start_sync(t, sh_launch("sleep 30", 0s, true));
  auto first = t.add_finished("t", "a1", false, ProcStatus::failed, "first");
  std::this_thread::sleep_for(5ms);
  for (std::size_t i = 1; i < proc_finished_max; ++i) t.add_finished("t", "a1", false, ProcStatus::failed, "x");
  std::this_thread::sleep_for(5ms);
  first->touch();  // used again: now the most recent
  auto next = t.add_finished("t", "a1", false, ProcStatus::failed, "over");
  EXPECT_EQ(t.finished_count(), proc_finished_max);
  EXPECT_TRUE(t.find(first->pid()));
  EXPECT_TRUE(t.find(next->pid()));
  EXPECT_FALSE(t.find(first->pid() + 1)) << "the least recently used was kept";
  EXPECT_TRUE(t.find(running->pid()));
  for (int i = 0; i < 200; ++i) t.add_finished("t", "a1", false, ProcStatus::failed, "more");
  EXPECT_EQ(t.finished_count(), proc_finished_max);
  EXPECT_EQ(t.pids().size(), proc_finished_max + 1);
  t.dismiss(running->pid());
}

// The cap counts foreground and background processes apart: however many calls finish after
// it, a finished background process stays (its interrupt names its `out`, §6.10).
TEST(ProcessTable, CallsNeverPushOutAFinishedBackgroundProcess) {
  ProcessTable t;
  auto bg = t.add_finished("t", "a1", true, ProcStatus::failed, "background");
  for (std::size_t i = 0; i < 2 * proc_finished_max; ++i) t.add_finished("t", "a1", false, ProcStatus::failed, "x");
  EXPECT_TRUE(t.find(bg->pid()));
  EXPECT_EQ(t.finished_count(), proc_finished_max + 1);
  for (std::size_t i = 0; i < proc_finished_max; ++i) t.add_finished("t", "a1", true, ProcStatus::failed, "bg");
  EXPECT_FALSE(t.find(bg->pid())) << "background processes have a cap of their own";
  EXPECT_EQ(t.finished_count(), 2 * proc_finished_max);
}

// A background process has nobody to take its reply: once finished it keeps only what `out`
// serves, and its header still counts every byte.
TEST(ProcessTable, FinishedBackgroundProcessKeepsOnlyItsCombinedOutput) {
  ProcessTable t;
  auto p = start_sync(t, sh_launch("head -c 5000 /dev/zero; echo e >&2", 0s, true));
  wait_finished(*p);
  EXPECT_EQ(p->wait_text(), "pid=1\nstatus=exited\nexit=0\nstdout=5000\nstderr=2\n");
  EXPECT_EQ(p->reply(), p->wait_text() + "\n");
  EXPECT_EQ(p->read_out(0, 10000).data.size(), 5002u);
}

// One copy of the output once collected, not the separate captures' buffers kept besides it
// (3.3 copies were: an assignment of an empty capture kept their memory).
TEST(ProcessTable, ACollectedProcessHoldsOneCopyOfItsOutput) {
  constexpr std::size_t bytes = 4000000;
  ProcessTable t;
  auto bg = start_sync(t, sh_launch("head -c 4000000 /dev/zero", 0s, true));
  auto fg = start_sync(t, sh_launch("head -c 4000000 /dev/zero"));
  wait_finished(*bg);
  wait_finished(*fg);
  EXPECT_GE(fg->held(), 2 * bytes);  // stdout and out, for the reply
  ASSERT_EQ(body_stdout(fg->take_reply()).size(), bytes);
  for (const auto& p : {bg, fg}) {
    EXPECT_EQ(p->read_out(0, 16).data.size(), 16u);
    EXPECT_LT(p->held(), bytes + bytes / 4) << "pid " << p->pid();
  }
}

}  // namespace
}  // namespace toolsrv::test
