// file_glob through a real toolsrv under the shipped sandbox.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include "tools/host.hpp"

using namespace tools_test;

namespace {

struct FileGlob : ::testing::Test {
  ToolHost host;
  void SetUp() override { host.load("file_glob"); }
  std::string at(const std::string& rel) { return host.cwd + "/" + rel; }
  Reply glob(const std::string& args) { return host.call("file_glob", args); }
  // Files with mtimes one second apart, in the order given (the last is the newest).
  void files(const std::vector<std::string>& rels) {
    long t = 1700000000;
    for (const auto& rel : rels) {
      write_file(at(rel), "x\n");
      const timespec ts[2] = {{t, 0}, {t, 0}};
      ::utimensat(AT_FDCWD, at(rel).c_str(), ts, AT_SYMLINK_NOFOLLOW);
      t++;
    }
  }
};

}  // namespace

TEST_F(FileGlob, NewestFirstRelativeToTheCwd) {
  files({"src/old.cpp", "src/lib/mid.cpp", "src/new.cpp", "src/x.h", "top.cpp"});
  auto r = glob(R"({"pattern":"**/*.cpp"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "top.cpp\nsrc/new.cpp\nsrc/lib/mid.cpp\nsrc/old.cpp\n");
  EXPECT_EQ(glob(R"({"pattern":"src/*.{h,cpp}"})").out, "src/x.h\nsrc/new.cpp\nsrc/old.cpp\n");
  EXPECT_EQ(glob(R"({"pattern":"*.cpp","path":"src"})").out, "src/new.cpp\nsrc/old.cpp\n");
  EXPECT_EQ(glob(R"({"pattern":"*.cpp","path":")" + at("src/lib") + R"("})").out, "src/lib/mid.cpp\n");
  EXPECT_EQ(glob(R"({"pattern":"**/*.rs"})").out, "no files match **/*.rs in .\n");
}

TEST_F(FileGlob, HonoursGitignoreAndSkipsDotGit) {
  files({".git/config", ".git/objects/a.c", "build/out.c", "src/gen/g.c", "src/keep.c", "src/skip.tmp.c", "src/a.c",
         "docs/build/x.c", "lib/only.c", "lib/sub/only.c", "x.log", "important.log", "deep/a/b/c.c", ".hidden.c"});
  write_file(at(".gitignore"), "# build output\n/build/\n*.tmp.c\n*.log\n!important.log\ndeep/**/c.c\n");
  write_file(at("src/.gitignore"), "gen/\n!skip.tmp.c\n");
  write_file(at("lib/.gitignore"), "/only.c\n");
  auto r = glob(R"({"pattern":"**/*.c"})");
  ASSERT_TRUE(r.ok()) << r.out;
  std::vector<std::string> got;
  for (std::size_t i = 0; i < r.out.size();) {
    const auto nl = r.out.find('\n', i);
    got.push_back(r.out.substr(i, nl - i));
    i = nl + 1;
  }
  std::sort(got.begin(), got.end());
  // /build/ is anchored (docs/build stays), gen/ is a directory pattern of src, the nested
  // !skip.tmp.c re-includes, /only.c in lib/ does not reach lib/sub, deep/**/c.c goes.
  EXPECT_EQ(got, (std::vector<std::string>{".hidden.c", "docs/build/x.c", "lib/sub/only.c", "src/a.c", "src/keep.c",
                                           "src/skip.tmp.c"}));
  EXPECT_EQ(glob(R"({"pattern":"*.log"})").out, "important.log\n");
}

// `logs/**` is what lies inside logs, not logs itself: the negations after it re-include a
// directory and its files, as git does (`git ls-files --others --exclude-standard`). The
// directory was taken as ignored, never walked, and logs/keep/k was lost.
TEST_F(FileGlob, ATrailingStarStarRuleLeavesTheDirectoryForNegationsInside) {
  files({"logs/keep/k", "logs/other/o", "logs/top", "src/a"});
  write_file(at(".gitignore"), "logs/**\n!logs/keep/\n!logs/keep/**\n");
  EXPECT_EQ(glob(R"({"pattern":"**/*"})").out, ".gitignore\nsrc/a\nlogs/keep/k\n");
}

TEST_F(FileGlob, CapsTheListAndCountsTheRest) {
  for (int i = 0; i < 1100; i++) write_file(at("n/" + std::to_string(i)), "");
  auto r = glob(R"({"pattern":"n/*"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1001);
  EXPECT_NE(r.out.find("[… 100 more files not shown (1100 in all); narrow the pattern or the path]\n"), std::string::npos);
  // And at most 7 KiB of paths, so the engine's 8192-byte cut (§8.3.4) never takes their middle:
  // 166 paths of 43 bytes.
  for (int i = 0; i < 300; i++) write_file(at("l/" + std::string(37, 'x') + std::to_string(100 + i)), "");
  r = glob(R"({"pattern":"l/*"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 167);
  EXPECT_NE(r.out.find("\n[… 134 more files not shown (300 in all); narrow the pattern or the path]\n"), std::string::npos);
}

TEST_F(FileGlob, ErrorsAreClear) {
  write_file(at("file.txt"), "x\n");
  EXPECT_EQ(glob(R"({"pattern":"*","path":"nowhere"})").out, "directory not found: nowhere\n");
  EXPECT_EQ(glob(R"({"pattern":"*","path":"file.txt"})").out,
            "not a directory: file.txt; path must be a directory to search\n");
  EXPECT_EQ(glob(R"({})").out, "missing argument: pattern\n");
  EXPECT_EQ(glob(R"({"pattern":3})").out, "invalid pattern: must be a string\n");
  EXPECT_EQ(glob(R"({"pattern":"sub/.."})").out, "invalid pattern: sub/.. names a directory, not files; e.g. sub/../*\n");
  EXPECT_EQ(glob(R"({"pattern":"*/../x"})").out, "invalid pattern: .. after a wildcard; put the directory in path\n");
  auto r = glob(R"({"pattern":"*","path":")" + host.home + R"("})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "permission denied: " + host.home + " (outside the sandbox's paths)\n");
}

// Several `**` over a deep tree: each component is matched against the reachable pattern
// positions, not by backtracking (8 groups over 60 levels took longer than the 30 s timeout).
TEST_F(FileGlob, ManyDoubleStarsOverADeepTreeAnswer) {
  std::string deep = "d";
  for (int i = 0; i < 59; i++) deep += "/d";
  write_file(at(deep + "/f"), "x\n");
  write_file(at(deep + "/q"), "x\n");
  auto r = glob(R"({"pattern":"**/d/**/d/**/d/**/d/**/d/**/d/**/d/**/d/**/q"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, deep + "/q\n");
  r = glob(R"({"pattern":"**/d/**/d/**/d/**/d/**/d/**/d/**/d/**/d/**/nothing"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "no files match **/d/**/d/**/d/**/d/**/d/**/d/**/d/**/d/**/nothing in .\n");
  EXPECT_EQ(glob(R"({"pattern":"d/*/d/f"})").out, "no files match d/*/d/f in d\n");
  EXPECT_EQ(glob(R"({"pattern":"d/*/d/**/f"})").out, deep + "/f\n");
}

// Brace groups whose alternatives pass the cap are refused, not cut short silently.
TEST_F(FileGlob, TooManyBraceAlternativesAreRefused) {
  files({"aaaaaaaa", "bbbbbbbb"});
  EXPECT_EQ(glob(R"({"pattern":"{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"})").out, "bbbbbbbb\naaaaaaaa\n");  // 256: the cap
  const auto r = glob(R"({"pattern":"{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "invalid pattern: its {…} groups make more than 256 alternatives; use fewer or a wider pattern\n");
}
