// lsp_definition, lsp_references, lsp_hover, lsp_rename against the real clangd on a small C++
// project in the session cwd, through a real toolsrv: the bridge they start outlives each call and
// is reused, and every test stops it (by its pid file) so no process is left behind.
#include <gtest/gtest.h>
#include <glob.h>
#include <poll.h>
#include <sys/syscall.h>

#include <sstream>

#include "tools/host.hpp"

using namespace tools_test;

namespace {

bool have_clangd() {
  for (const char* d : {"/usr/bin/clangd", "/usr/local/bin/clangd"})
    if (::access(d, X_OK) == 0) return true;
  return false;
}

void make_project(const std::string& cwd) {
  write_file(cwd + "/calc.h", "#pragma once\n\n/// Adds two numbers.\nint add(int a, int b);\n");
  write_file(cwd + "/calc.cpp", "#include \"calc.h\"\n\nint add(int a, int b) { return a + b; }\n");
  write_file(cwd + "/main.cpp",
             "#include \"calc.h\"\n\nint twice(int x) { return add(x, x); }\n\nint main() { return add(1, 2) + twice(3); }\n");
  write_file(cwd + "/compile_flags.txt", "-std=c++17\n");
}

/// The pids in the bridges' pid files ($TMPDIR/lsp/*.pid of the host's session).
std::vector<pid_t> bridges(const ToolHost& host) {
  std::vector<pid_t> out;
  glob_t g{};
  if (::glob((host.root + "/run/ollie/tmp/*/lsp/*.pid").c_str(), 0, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; i++) out.push_back(std::stoi(read_file(g.gl_pathv[i])));
  ::globfree(&g);
  return out;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

/// The children of `parent` (from /proc/*/stat).
std::vector<pid_t> children(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file(e.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != "Z") out.push_back(std::stoi(name));
  }
  return out;
}

/// Waits (bounded) for `pid` to exit; true when it did.
bool exits(pid_t pid, int ms) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const bool done = ::poll(&p, 1, ms) == 1;
  ::close(fd);
  return done;
}

void stop(pid_t pid, int sig = SIGTERM) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return;
  ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 10000), 1) << "bridge " << pid << " did not exit";
  ::close(fd);
}

class Lsp : public testing::Test {
 protected:
  void SetUp() override {
    if (!have_clangd()) GTEST_SKIP() << "clangd is not installed (Debian: apt install clangd)";
    make_project(host.cwd);
    host.load("lsp_definition lsp_references lsp_hover lsp_rename");
  }
  void TearDown() override {
    for (pid_t p : bridges(host)) stop(p);
  }
  ToolHost host;
};

TEST_F(Lsp, DefinitionFindsTheFunctionInTheOtherFileAndTheBridgeStaysWarm) {
  auto r = host.call("lsp_definition", R"({"path":"main.cpp","line":3,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "calc.cpp:3:5: int add(int a, int b) { return a + b; }\n");
  const auto first = bridges(host);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(alive(first[0])) << "the bridge died with the call";

  // The second call (another file of the project, by column) reaches the same bridge; at a
  // definition, clangd answers with the declaration.
  r = host.call("lsp_definition", R"({"path":"calc.cpp","line":3,"column":5})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "calc.h:4:5: int add(int a, int b);\n");
  r = host.call("lsp_hover", R"({"path":"main.cpp","line":5,"symbol":"twice"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(bridges(host), first);
  // Nothing written into the project or HOME (clangd's index is in $TMPDIR).
  EXPECT_FALSE(std::filesystem::exists(host.cwd + "/.cache"));
  EXPECT_FALSE(std::filesystem::exists(host.home + "/.cache"));
}

TEST_F(Lsp, AServerThatCrashedIsRestartedByTheSameBridge) {
  auto r = host.call("lsp_hover", R"({"path":"main.cpp","line":3,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  const auto bridge = bridges(host);
  ASSERT_EQ(bridge.size(), 1u);
  const auto servers = children(bridge[0]);
  ASSERT_EQ(servers.size(), 1u) << "one clangd";
  stop(servers[0], SIGKILL);
  r = host.call("lsp_references", R"({"path":"main.cpp","line":3,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("main.cpp:5:21: "), std::string::npos) << r.out;
  EXPECT_EQ(bridges(host), bridge);
  const auto now = children(bridge[0]);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], servers[0]);
}

TEST_F(Lsp, ReferencesListTheCallsInEveryFile) {
  auto r = host.call("lsp_references", R"({"path":"calc.h","line":4,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_NE(r.out.find("4 references to `add`:\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("calc.h:4:5: int add(int a, int b);\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("calc.cpp:3:5: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("main.cpp:3:27: int twice(int x) { return add(x, x); }\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("main.cpp:5:21: "), std::string::npos) << r.out;

  r = host.call("lsp_references", R"({"path":"calc.h","line":4,"symbol":"add","include_declaration":false})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out.find("calc.h:4:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("main.cpp:5:21: "), std::string::npos) << r.out;
}

TEST_F(Lsp, HoverShowsTheSignatureAndTheDocComment) {
  auto r = host.call("lsp_hover", R"({"path":"main.cpp","line":3,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_NE(r.out.find("int add(int a, int b)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Adds two numbers."), std::string::npos) << r.out;
  r = host.call("lsp_hover", R"({"path":"main.cpp","line":2,"column":1})", 60);  // an empty line
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("no hover information"), std::string::npos) << r.out;
}

TEST_F(Lsp, RenameRenamesAcrossFilesAndTheServerSeesTheNewText) {
  auto r = host.call("lsp_rename", R"({"path":"main.cpp","line":5,"symbol":"add","new_name":"plus"})", 60);
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_NE(r.out.find("renamed `add` to `plus`: 4 edits in 3 files\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("main.cpp: 2 edits\n"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(host.cwd + "/calc.h"), "#pragma once\n\n/// Adds two numbers.\nint plus(int a, int b);\n");
  EXPECT_EQ(read_file(host.cwd + "/calc.cpp"), "#include \"calc.h\"\n\nint plus(int a, int b) { return a + b; }\n");
  EXPECT_EQ(read_file(host.cwd + "/main.cpp"),
            "#include \"calc.h\"\n\nint twice(int x) { return plus(x, x); }\n\nint main() { return plus(1, 2) + twice(3); }\n");
  // The warm server works on the files as they are now.
  r = host.call("lsp_definition", R"({"path":"main.cpp","line":3,"symbol":"plus"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "calc.cpp:3:5: int plus(int a, int b) { return a + b; }\n");
  // A name the server refuses changes nothing.
  r = host.call("lsp_rename", R"({"path":"main.cpp","line":5,"symbol":"plus","new_name":"int"})", 60);
  EXPECT_EQ(r.exit(), 1) << r.out;
  EXPECT_NE(read_file(host.cwd + "/main.cpp").find("plus(1, 2)"), std::string::npos);
}

// A use added by a shell or an editor (not through the file tools, which tell the bridge) is
// found by the warm server, and renamed with the rest: its index held the file as it was.
TEST_F(Lsp, AFileChangedBehindTheServersBackIsSeen) {
  auto r = host.call("lsp_references", R"({"path":"calc.h","line":4,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_NE(r.out.find("4 references to `add`:\n"), std::string::npos) << r.out;
  write_file(host.cwd + "/calc.cpp", read_file(host.cwd + "/calc.cpp") + "int thrice(int x) { return add(add(x, x), x); }\n");
  r = host.call("lsp_references", R"({"path":"calc.h","line":4,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("6 references to `add`:\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("calc.cpp:4:28: "), std::string::npos) << r.out;
  r = host.call("lsp_rename", R"({"path":"main.cpp","line":5,"symbol":"add","new_name":"plus"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("renamed `add` to `plus`: 6 edits in 3 files\n"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(host.cwd + "/calc.cpp"),
            "#include \"calc.h\"\n\nint plus(int a, int b) { return a + b; }\nint thrice(int x) { return plus(plus(x, x), x); }\n");
}

// Past 32 files changed behind its back, the server is not fed them one by one: it is started
// again, to index the project anew, and answers with what the files hold now.
TEST_F(Lsp, ManyFilesChangedStartTheServerAgain) {
  auto r = host.call("lsp_references", R"({"path":"calc.h","line":4,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  const auto bridge = bridges(host);
  ASSERT_EQ(bridge.size(), 1u);
  const auto before = children(bridge[0]);
  ASSERT_EQ(before.size(), 1u);
  for (int i = 0; i < 40; i++)
    write_file(host.cwd + "/more" + std::to_string(i) + ".cpp", "#include \"calc.h\"\nint m" + std::to_string(i) + "() { return add(1, 1); }\n");
  r = host.call("lsp_definition", R"({"path":"main.cpp","line":3,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "calc.cpp:3:5: int add(int a, int b) { return a + b; }\n");
  const auto after = children(bridge[0]);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0], before[0]) << "the server was not started again";
}

// A source reached through a link is edited in the file the link names; the link stays a link.
TEST_F(Lsp, RenameThroughALinkEditsTheFileItNames) {
  std::filesystem::create_symlink("calc.cpp", host.cwd + "/alias.cpp");
  auto r = host.call("lsp_rename", R"({"path":"alias.cpp","line":3,"symbol":"add","new_name":"plus"})", 60);
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_TRUE(std::filesystem::is_symlink(host.cwd + "/alias.cpp"));
  EXPECT_EQ(read_file(host.cwd + "/calc.cpp"), "#include \"calc.h\"\n\nint plus(int a, int b) { return a + b; }\n");
  EXPECT_EQ(read_file(host.cwd + "/main.cpp"),
            "#include \"calc.h\"\n\nint twice(int x) { return plus(x, x); }\n\nint main() { return plus(1, 2) + twice(3); }\n");
  EXPECT_EQ(r.out.find("alias.cpp"), std::string::npos) << r.out;
}

// clangd starts its background index once it has read the compile database, which can be after
// the opened file's diagnostics (CI's red once: a rename that changed main.cpp alone). A clangd
// whose index announces itself 2 s late, and a calc.cpp slow to index: the first rename still
// waits for the index and renames in every file.
TEST_F(Lsp, TheFirstCallWaitsForAnIndexThatBeginsAfterTheDiagnostics) {
  write_file(host.cwd + "/bin/clangd",
             "#!/usr/bin/python3\n"
             "import subprocess, sys, threading\n"
             "real = subprocess.Popen(['/usr/bin/clangd'] + sys.argv[1:], stdout=subprocess.PIPE)\n"
             "lock = threading.Lock()\n"
             "def put(frame):\n"
             "    with lock:\n"
             "        sys.stdout.buffer.write(frame)\n"
             "        sys.stdout.buffer.flush()\n"
             "while True:\n"
             "    header = b''\n"
             "    while not header.endswith(b'\\r\\n\\r\\n'):\n"
             "        c = real.stdout.read(1)\n"
             "        if not c:\n"
             "            sys.exit(0)\n"
             "        header += c\n"
             "    body = real.stdout.read(int(header.split(b':')[1].split(b'\\r')[0]))\n"
             "    if b'window/workDoneProgress/create' in body:\n"
             "        threading.Timer(2, put, [header + body]).start()\n"
             "    else:\n"
             "        put(header + body)\n",
             0755);
  write_file(host.cwd + "/calc.cpp",
             "#include <algorithm>\n#include <functional>\n#include <iostream>\n#include <map>\n#include <regex>\n"
             "#include \"calc.h\"\n\nint add(int a, int b) { return a + b; }\n");
  ASSERT_TRUE(host.ctl("env PATH=" + host.cwd + "/bin:/usr/bin:/bin\n"));
  const auto r = host.call("lsp_rename", R"({"path":"main.cpp","line":5,"symbol":"add","new_name":"plus"})", 60);
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_NE(r.out.find("renamed `add` to `plus`: 4 edits in 3 files\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("still indexing"), std::string::npos) << r.out;
  EXPECT_NE(read_file(host.cwd + "/calc.cpp").find("int plus(int a, int b)"), std::string::npos);
}

TEST_F(Lsp, ManyReferencesAreCappedAndCounted) {
  std::string text = "#include \"calc.h\"\n";
  for (int i = 0; i < 200; i++) text += "int f" + std::to_string(i) + "() { return add(" + std::to_string(i) + ", 1); }\n";
  write_file(host.cwd + "/many.cpp", text);
  const auto r = host.call("lsp_references", R"({"path":"many.cpp","line":2,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out.rfind("204 references to `add`:\n", 0), 0u) << r.out.substr(0, 300);
  EXPECT_NE(r.out.find("\n… 54 more references not shown\n"), std::string::npos) << r.out.substr(r.out.size() - 300);
  EXPECT_LT(r.out.size(), 8192u);
}

TEST_F(Lsp, ASymbolOnANearbyLineIsFoundAndSaidSo) {
  auto r = host.call("lsp_definition", R"({"path":"main.cpp","line":4,"symbol":"twice"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "`twice` is not on line 4; used line 3.\nmain.cpp:3:5: int twice(int x) { return add(x, x); }\n");
}

TEST_F(Lsp, BadArgumentsAreRefusedWithTheReason) {
  write_file(host.cwd + "/blob.cpp", std::string("int\0x", 5));
  write_file(host.cwd + "/big.cpp", std::string(17u << 20, ' '));
  write_file(host.home + "/secret.cpp", "int s;\n");
  const std::pair<std::string, std::string> cases[] = {
      {R"({"line":3,"symbol":"add"})", "missing argument: path"},
      {R"({"path":"main.cpp","symbol":"add"})", "missing argument: line"},
      {R"({"path":"main.cpp","line":3})", "missing argument: symbol (the name on that line) or column"},
      {R"({"path":"main.cpp","line":"3","symbol":"add"})", "invalid line: must be an integer from 1 to 100000000"},
      {R"({"path":"main.cpp","line":0,"symbol":"add"})", "invalid line: must be an integer from 1 to 100000000"},
      {R"({"path":"main.cpp","line":3,"symbol":7})", "invalid symbol: must be a string"},
      {R"({"path":"main.cpp","line":3,"symbol":""})", "invalid symbol: empty"},
      {R"({"path":"main.cpp","line":99,"symbol":"add"})", "line 99 is past the end of main.cpp (5 lines)"},
      {R"({"path":"main.cpp","line":1,"symbol":"main"})", "`main` does not occur on line 1 of main.cpp (nor within 3 lines), which reads: #include \"calc.h\""},
      {R"({"path":"main.cpp","line":3,"column":90})", "column 90 is past the end of line 3 (38 characters)"},
      {R"({"path":"nope.cpp","line":1,"symbol":"x"})", "cannot read nope.cpp: No such file or directory"},
      {R"({"path":".","line":1,"symbol":"x"})", " is not a regular file"},
      {R"({"path":"blob.cpp","line":1,"symbol":"int"})", "blob.cpp is a binary file"},
      {R"({"path":"big.cpp","line":1,"column":1})", "big.cpp is too large"},
  };
  for (const auto& [args, error] : cases) {
    const auto r = host.call("lsp_definition", args, 60);
    EXPECT_EQ(r.exit(), 1) << args;
    EXPECT_NE(r.out.find(error), std::string::npos) << args << " → " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;
  }
  auto r = host.call("lsp_definition", R"({"path":")" + host.home + R"(/secret.cpp","line":1,"symbol":"s"})", 60);
  EXPECT_EQ(r.exit(), 1);
  EXPECT_NE(r.out.find("Permission denied"), std::string::npos) << r.out;
  r = host.call("lsp_rename", R"({"path":"main.cpp","line":3,"symbol":"add"})", 60);
  EXPECT_EQ(r.out, "missing argument: new_name\n");
  r = host.call("lsp_rename", R"({"path":"main.cpp","line":3,"symbol":"add","new_name":"a b"})", 60);
  EXPECT_EQ(r.out, "invalid new_name: give the new identifier, without spaces\n");
  EXPECT_TRUE(bridges(host).empty()) << "no bridge for calls that never reached a server";
}

TEST_F(Lsp, ALanguageWithoutAServerSaysWhatWouldBeNeeded) {
  write_file(host.cwd + "/notes.txt", "add\n");
  auto r = host.call("lsp_definition", R"({"path":"notes.txt","line":1,"symbol":"add"})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_NE(r.out.find("no language server for "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(.txt files): known are C/C++/Objective-C (clangd)"), std::string::npos) << r.out;
  // A known language whose server is not installed: pointed at a PATH without it.
  write_file(host.cwd + "/main.go", "package main\n\nfunc main() {}\n");
  ASSERT_TRUE(host.ctl("env PATH=/nonexistent\n"));
  r = host.call("lsp_hover", R"({"path":"main.go","line":3,"symbol":"main"})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_NE(r.out.find("go files need gopls"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gopls is not on PATH"), std::string::npos) << r.out;
}

TEST_F(Lsp, AServerThatCannotStartIsReported) {
  // A "pylsp" that exits at once, first on PATH.
  write_file(host.cwd + "/bin/pylsp", "#!/bin/sh\necho broken >&2\nexit 3\n", 0755);
  write_file(host.cwd + "/tool.py", "def f():\n    return 1\n");
  ASSERT_TRUE(host.ctl("env PATH=" + host.cwd + "/bin:/usr/bin:/bin\n"));
  const auto r = host.call("lsp_hover", R"({"path":"tool.py","line":1,"symbol":"f"})", 60);
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out.rfind("pylsp: " + host.cwd + "/bin/pylsp exited at once (its stderr is in " + host.root + "/run/ollie/tmp/", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("/bridge.log;"), std::string::npos) << r.out;
}

TEST_F(Lsp, ABridgeThatDiedIsReplacedAndAnIdleOneExits) {
  ASSERT_TRUE(host.ctl("env OLLIE_LSP_IDLE=2\n"));
  auto r = host.call("lsp_hover", R"({"path":"main.cpp","line":3,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  const auto first = bridges(host);
  ASSERT_EQ(first.size(), 1u);
  stop(first[0], SIGKILL);  // its socket and pid file stay behind, stale

  r = host.call("lsp_hover", R"({"path":"main.cpp","line":3,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_NE(r.out.find("int add(int a, int b)"), std::string::npos) << r.out;
  const auto second = bridges(host);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(second[0], first[0]);
  // Idle for OLLIE_LSP_IDLE seconds: it exits by itself and removes its pid file.
  EXPECT_TRUE(exits(second[0], 15000)) << "the idle bridge did not exit";
  EXPECT_TRUE(bridges(host).empty());
}

TEST_F(Lsp, ABridgeEndsWithTheToolsrvThatStartedIt) {
  // The bridge left the call's process group, so toolsrv's exit does not kill it; it watches
  // toolsrv instead, and a stopped olliesrv (whose toolsrv dies with it) leaves no clangd behind.
  auto r = host.call("lsp_hover", R"({"path":"main.cpp","line":3,"symbol":"add"})", 60);
  ASSERT_TRUE(r.ok()) << r.out;
  const auto bridge = bridges(host);
  ASSERT_EQ(bridge.size(), 1u);
  const auto servers = children(bridge[0]);
  ASSERT_EQ(servers.size(), 1u) << "one clangd";
  ASSERT_EQ(::kill(host.pid(), SIGTERM), 0);
  EXPECT_TRUE(exits(bridge[0], 5000)) << "the bridge outlived its toolsrv";
  EXPECT_TRUE(exits(servers[0], 5000)) << "clangd outlived its bridge";
}

}  // namespace
