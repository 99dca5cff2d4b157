// file_write through a real toolsrv under the shipped sandbox.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include "tools/host.hpp"

using namespace tools_test;

namespace {

struct FileWrite : ::testing::Test {
  ToolHost host;
  void SetUp() override {
    host.load("file_write");
    host.load("file_read");
  }
  Reply write(const std::string& args) { return host.call("file_write", args); }
  std::string at(const std::string& rel) { return host.cwd + "/" + rel; }
  static mode_t mode_of(const std::string& p) {
    struct stat st {};
    ::stat(p.c_str(), &st);
    return st.st_mode & 07777;
  }
};

}  // namespace

TEST_F(FileWrite, CreatesWithParentDirectories) {
  auto r = write(R"({"path":"deep/er/new.txt","content":"one\ntwo\n"})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "created deep/er/new.txt: 8 bytes, 2 lines\n");
  EXPECT_EQ(read_file(at("deep/er/new.txt")), "one\ntwo\n");
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(mode_of(at("deep/er/new.txt")), 0666 & ~mask);
  r = write(R"({"path":"last.txt","content":"no newline"})");
  EXPECT_EQ(r.out, "created last.txt: 10 bytes, 1 line\n");
  EXPECT_EQ(write(R"({"path":"zero.txt","content":""})").out, "created zero.txt: 0 bytes, 0 lines\n");
}

// `..` after a symlink is the parent of its target, as the kernel (and `cat`) takes it: with
// deep -> sub/inner, deep/../x.txt is sub/x.txt. It was cleaned as text to ./x.txt, and the
// other file was overwritten.
TEST_F(FileWrite, DotDotAfterASymlinkIsTheParentOfItsTarget) {
  write_file(at("x.txt"), "TOP\n");
  write_file(at("sub/x.txt"), "SUB\n");
  write_file(at("sub/inner/keep"), "");
  ASSERT_EQ(::symlink("sub/inner", at("deep").c_str()), 0);
  auto r = write(R"({"path":"deep/../x.txt","content":"NEW\n"})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(read_file(at("sub/x.txt")), "NEW\n");
  EXPECT_EQ(read_file(at("x.txt")), "TOP\n");
  EXPECT_EQ(host.call("file_read", R"({"path":"deep/../x.txt"})").out, "     1\tNEW\n");
}

TEST_F(FileWrite, OverwriteKeepsTheModeAndLeavesNoTemporaryFile) {
  write_file(at("run.sh"), "old\n", 0750);
  auto r = write(R"({"path":"run.sh","content":"#!/bin/sh\necho hi\n"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "overwrote run.sh: 18 bytes, 2 lines\n");
  EXPECT_EQ(read_file(at("run.sh")), "#!/bin/sh\necho hi\n");
  EXPECT_EQ(mode_of(at("run.sh")), 0750u);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(host.cwd)) entries++;
  EXPECT_EQ(entries, 1u);
}

// A file made read-only is not replaced, as a shell's `>` is refused (the tool holds no
// capability, also when the tests run as root). It was: the rename asks only the directory.
TEST_F(FileWrite, RefusesAReadOnlyFile) {
  write_file(at("ro.txt"), "keep\n", 0444);
  auto r = write(R"({"path":"ro.txt","content":"overwritten\n"})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "permission denied: ro.txt (the file is read-only)\n");
  EXPECT_EQ(read_file(at("ro.txt")), "keep\n");
}

TEST_F(FileWrite, RefusesADirectory) {
  std::filesystem::create_directories(at("dir"));
  auto r = write(R"({"path":"dir","content":"x"})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "is a directory: dir; give the path of a file\n");
  EXPECT_TRUE(std::filesystem::is_directory(at("dir")));
}

TEST_F(FileWrite, WritesThroughASymlinkToItsTarget) {
  write_file(at("real.txt"), "old\n", 0600);
  std::filesystem::create_symlink("real.txt", at("link.txt"));
  auto r = write(R"({"path":"link.txt","content":"new\n"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "overwrote link.txt (through the symbolic link to real.txt): 4 bytes, 1 line\n");
  EXPECT_TRUE(std::filesystem::is_symlink(at("link.txt")));
  EXPECT_EQ(read_file(at("real.txt")), "new\n");
  EXPECT_EQ(mode_of(at("real.txt")), 0600u);
  // A link pointing out of the sandbox reaches nothing: Landlock checks the target.
  write_file(host.home + "/outside.txt", "keep\n");
  std::filesystem::create_symlink(host.home + "/outside.txt", at("escape.txt"));
  r = write(R"({"path":"escape.txt","content":"pwned\n"})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_NE(r.out.find("permission denied"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(host.home + "/outside.txt"), "keep\n");
}

TEST_F(FileWrite, OutsideTheSandboxIsPermissionDenied) {
  auto r = write(R"({"path":")" + host.home + R"(/new.txt","content":"x"})");
  EXPECT_EQ(r.status(), "exited");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out.rfind("permission denied: " + host.home, 0), 0u) << r.out;
  EXPECT_FALSE(std::filesystem::exists(host.home + "/new.txt"));
}

TEST_F(FileWrite, BadArgumentsAreClearErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"content":"x"})", "missing argument: path\n"},
      {R"({"path":"a.txt"})", "missing argument: content\n"},
      {R"({"path":"a.txt","content":7})", "invalid content: must be a string\n"},
      {R"({"path":["a"],"content":"x"})", "invalid path: must be a string\n"},
      // Cut at the NUL, the name would be another file's: `nul`.
      {R"({"path":"nul\u0000byte","content":"x"})", "invalid path: contains a NUL byte\n"},
      // The file before the slash is not the one meant.
      {R"({"path":"sub/","content":"x"})", "invalid path: sub/ names a directory (it ends with /); give the file's path\n"},
      {R"({"path":"new/.","content":"x"})", "invalid path: new/. names a directory (it ends with .); give the file's path\n"},
      {R"({"path":"..","content":"x"})", "invalid path: .. names a directory (it ends with ..); give the file's path\n"},
  };
  for (const auto& [args, want] : cases) {
    auto r = write(args);
    EXPECT_EQ(r.exit(), 1) << args;
    EXPECT_EQ(r.out, want) << args;
  }
  EXPECT_FALSE(std::filesystem::exists(at("a.txt")));
  EXPECT_FALSE(std::filesystem::exists(at("nul")));
  EXPECT_FALSE(std::filesystem::exists(at("sub")));
  EXPECT_FALSE(std::filesystem::exists(at("new")));
}

// A name near NAME_MAX: its temporary beside it must fit too.
TEST_F(FileWrite, ANameOf250BytesIsWrittenAndReplaced) {
  const std::string name(250, 'z');
  auto r = write(R"({"path":")" + name + R"(","content":"one\n"})");
  ASSERT_TRUE(r.ok()) << r.out;
  r = write(R"({"path":")" + name + R"(","content":"two\n"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(read_file(at(name)), "two\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(host.cwd), {}), 1) << "a temporary left behind";
}

// sandbox.yaml may grant one file rw (§7.3.2) and not its directory, where no temporary file can
// be made: the file is written in place, as `shell`'s `>` writes it. It was refused with
// `permission denied: … (outside the sandbox's paths)`. A new file beside it stays refused.
TEST(FileWriteGrant, AFileTheSandboxGrantsAloneIsWrittenInPlace) {
  std::string dir = "/tmp/ollie-grant-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string file = dir + "/one.txt";
  write_file(file, "old\n");
  std::string policy = read_file(source("data/sandbox.yaml"));
  const std::string rw = "rw:  [\"/dev/null\",";
  ASSERT_NE(policy.find(rw), std::string::npos);
  policy.replace(policy.find(rw), rw.size(), "rw:  [\"" + file + "\", \"/dev/null\",");
  {
    ToolHost host(policy);
    host.load("file_write");
    auto r = host.call("file_write", R"({"path":")" + file + R"(","content":"new\n"})");
    EXPECT_TRUE(r.ok()) << r.out << r.err;
    EXPECT_EQ(read_file(file), "new\n");
    r = host.call("file_write", R"({"path":")" + dir + R"(/two.txt","content":"x"})");
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.out.rfind("permission denied: " + dir + "/two.txt", 0), 0u) << r.out;
  }
  std::filesystem::remove_all(dir);
}
