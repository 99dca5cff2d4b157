// file_edit through a real toolsrv under the shipped sandbox.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "tools/host.hpp"

using namespace tools_test;

namespace {

struct FileEdit : ::testing::Test {
  ToolHost host;
  void SetUp() override { host.load("file_edit"); }
  std::string at(const std::string& rel) { return host.cwd + "/" + rel; }
  Reply edit(const std::string& path, const std::string& from, const std::string& to, bool all = false) {
    nlohmann::json j{{"path", path}, {"old_string", from}, {"new_string", to}};
    if (all) j["replace_all"] = true;
    return host.call("file_edit", j.dump());
  }
};

}  // namespace

TEST_F(FileEdit, UniqueMatchIsReplacedAndShownAsADiff) {
  write_file(at("a.c"), "int a;\nint b;\nint c;\nint d;\nint e;\nint f;\nint g;\nint h;\n");
  auto r = edit("a.c", "int e;", "long e;");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out,
            "edited a.c: 1 replacement, -1 +1 lines\n"
            "--- a/a.c\n+++ b/a.c\n"
            "@@ -2,7 +2,7 @@\n int b;\n int c;\n int d;\n-int e;\n+long e;\n int f;\n int g;\n int h;\n");
  EXPECT_EQ(read_file(at("a.c")), "int a;\nint b;\nint c;\nint d;\nlong e;\nint f;\nint g;\nint h;\n");
}

// The diff stops at 7 KiB with a count, so the engine's 8192-byte cut (§8.3.4) never takes its middle.
TEST_F(FileEdit, ALongDiffIsCutWithACount) {
  std::string text;
  for (int i = 0; i < 2000; i++) text += "x\n";
  write_file(at("many.txt"), text);
  const Reply r = edit("many.txt", "x", "y", true);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out.rfind("edited many.txt: 2000 replacements, -2000 +2000 lines\n--- a/many.txt\n", 0), 0u) << r.out.substr(0, 200);
  EXPECT_LE(r.out.size(), 7u * 1024 + 100);
  EXPECT_TRUE(r.out.ends_with(" more diff lines not shown]\n")) << r.out.substr(r.out.size() - 100);
}

TEST_F(FileEdit, AmbiguousMatchNamesItsLines) {
  write_file(at("a.c"), "x = 1;\ny = 2;\nx = 1;\nz = 3;\nx = 1;\n");
  auto r = edit("a.c", "x = 1;", "x = 9;");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "old_string matches 3 times in a.c (at lines 1, 3, 5): include more surrounding lines to make it unique, "
                   "or set replace_all to true\n");
  EXPECT_EQ(read_file(at("a.c")), "x = 1;\ny = 2;\nx = 1;\nz = 3;\nx = 1;\n");
  r = edit("a.c", "x = 1;", "x = 9;", true);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "edited a.c: 3 replacements, -3 +3 lines");
  EXPECT_EQ(read_file(at("a.c")), "x = 9;\ny = 2;\nx = 9;\nz = 3;\nx = 9;\n");
}

TEST_F(FileEdit, MissingMatchGivesAHint) {
  write_file(at("f.py"), "def f():\n    return x\n\ndef g():\n    pass\n");
  auto r = edit("f.py", "def f():\n  return x", "def f():\n  return y");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "old_string not found in f.py; text that differs only in whitespace or indentation starts at line 1: "
                   "copy it exactly as file_read shows it (after the line number and tab)\n");
  r = edit("f.py", "def g():\n    return z", "x");
  EXPECT_EQ(r.out, "old_string not found in f.py; its first line occurs at line 4 but the lines after it differ: read the "
                   "file again with file_read\n");
  r = edit("f.py", "nothing like it", "x");
  EXPECT_EQ(r.out, "old_string not found in f.py; read the file again with file_read (it may have changed) and copy the text exactly\n");
}

// The hint's search is bounded: 4,000 lines of `x` and a `y`, against 400,000 lines of `x`,
// compared every start line on for 4,000 lines and ran past the call's timeout.
TEST_F(FileEdit, TheHintOfAMissingMatchIsFoundInBoundedTime) {
  std::string text, old;
  for (int i = 0; i < 400000; i++) text += "x\n";
  for (int i = 0; i < 4000; i++) old += "x\n";
  write_file(at("xs.txt"), text);
  auto r = edit("xs.txt", old + "y", "z");
  EXPECT_EQ(r.exit(), 1) << r.status() << r.out;
  EXPECT_EQ(r.out.rfind("old_string not found in xs.txt; ", 0), 0u) << r.out;
}

TEST_F(FileEdit, MultiLineMatchKeepsTheModeAndCrlf) {
  write_file(at("run.sh"), "#!/bin/sh\r\necho one\r\necho two\r\nexit 0\r\n", 0751);
  auto r = edit("run.sh", "echo one\necho two\n", "echo three\n");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(read_file(at("run.sh")), "#!/bin/sh\r\necho three\r\nexit 0\r\n");
  EXPECT_NE(r.out.find("@@ -1,4 +1,3 @@\n #!/bin/sh\n-echo one\n-echo two\n+echo three\n exit 0\n"), std::string::npos) << r.out;
  struct stat st {};
  ::stat(at("run.sh").c_str(), &st);
  EXPECT_EQ(st.st_mode & 07777, 0751u);
}

TEST_F(FileEdit, ReplacementWithoutNewlineJoinsLinesInTheDiff) {
  write_file(at("j.txt"), "a\nb\nc\n");
  auto r = edit("j.txt", "b\n", "B");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(read_file(at("j.txt")), "a\nBc\n");
  EXPECT_NE(r.out.find("-b\n-c\n+Bc\n"), std::string::npos) << r.out;
}

// A last line without its newline is marked as diff(1) and git mark it: an edit that only drops
// or adds the final newline shows a difference, and an unchanged last line in the context says so.
TEST_F(FileEdit, ALastLineWithoutItsNewlineIsMarkedInTheDiff) {
  const std::string marker = "\\ No newline at end of file\n";
  write_file(at("n.txt"), "a\nb\n");
  auto r = edit("n.txt", "b\n", "b");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(read_file(at("n.txt")), "a\nb");
  EXPECT_EQ(r.out, "edited n.txt: 1 replacement, -1 +1 lines\n--- a/n.txt\n+++ b/n.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n" + marker);
  r = edit("n.txt", "a", "A");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "edited n.txt: 1 replacement, -1 +1 lines\n--- a/n.txt\n+++ b/n.txt\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n" + marker);
  r = edit("n.txt", "b", "b\n");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(read_file(at("n.txt")), "A\nb\n");
  EXPECT_EQ(r.out, "edited n.txt: 1 replacement, -1 +1 lines\n--- a/n.txt\n+++ b/n.txt\n@@ -1,2 +1,2 @@\n A\n-b\n" + marker + "+b\n");
  r = edit("m.txt", "", "one\ntwo");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "created m.txt: 2 lines\n--- /dev/null\n+++ b/m.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n" + marker);
}

TEST_F(FileEdit, EmptyOldStringCreatesOnlyAMissingFile) {
  auto r = edit("new/file.txt", "", "hello\nworld\n");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "created new/file.txt: 2 lines\n--- /dev/null\n+++ b/new/file.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n");
  EXPECT_EQ(read_file(at("new/file.txt")), "hello\nworld\n");
  r = edit("new/file.txt", "", "again");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "old_string is empty but new/file.txt is not: give the text to replace, or use file_write to replace the whole file\n");
  r = edit("absent.txt", "x", "y");
  EXPECT_EQ(r.out, "file not found: absent.txt; to create a file, use file_write (or file_edit with an empty old_string)\n");
  // An empty new_string too makes an empty file (it was refused as nothing to change).
  r = edit("empty.txt", "", "");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out.rfind("created empty.txt: 0 lines\n", 0), 0u) << r.out;
  EXPECT_EQ(read_file(at("empty.txt")), "");
  EXPECT_EQ(edit("empty.txt", "", "").out, "old_string and new_string are the same: there is nothing to change\n");
}

TEST_F(FileEdit, RefusalsAndBadArguments) {
  write_file(at("a.txt"), "same\n");
  auto r = edit("a.txt", "same", "same");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "old_string and new_string are the same: there is nothing to change\n");
  write_file(at("b.bin"), std::string("ab\0cd", 5));
  EXPECT_EQ(edit("b.bin", "ab", "x").out, "binary file (5 B): b.bin; file_edit edits text files only\n");
  std::filesystem::create_directories(at("d"));
  EXPECT_EQ(edit("d", "a", "b").out, "is a directory: d; give the path of a file\n");
  const std::pair<const char*, const char*> cases[] = {
      {R"({"path":"a.txt","new_string":"x"})", "missing argument: old_string\n"},
      {R"({"path":"a.txt","old_string":"x"})", "missing argument: new_string\n"},
      {R"({"old_string":"x","new_string":"y"})", "missing argument: path\n"},
      {R"({"path":"a.txt","old_string":"same","new_string":"x","replace_all":"yes"})", "invalid replace_all: must be true or false\n"},
  };
  for (const auto& [args, want] : cases) {
    auto c = host.call("file_edit", args);
    EXPECT_EQ(c.exit(), 1) << args;
    EXPECT_EQ(c.out, want) << args;
  }
  EXPECT_EQ(read_file(at("a.txt")), "same\n");
}

TEST_F(FileEdit, OutsideTheSandboxIsPermissionDenied) {
  write_file(host.home + "/notes.txt", "secret\n");
  auto r = edit(host.home + "/notes.txt", "secret", "public");
  EXPECT_EQ(r.status(), "exited");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "permission denied: " + host.home + "/notes.txt (outside the sandbox's paths)\n");
  EXPECT_EQ(read_file(host.home + "/notes.txt"), "secret\n");
}
