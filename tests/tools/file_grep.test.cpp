// file_grep through a real toolsrv under the shipped sandbox, with ripgrep (the .meta variant
// chosen when rg is installed), and its own engine run directly, giving the same output.
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tools/host.hpp"

using namespace tools_test;

namespace {

bool have_rg() { return ::access("/usr/bin/rg", X_OK) == 0 || ::access("/usr/local/bin/rg", X_OK) == 0; }

struct FileGrep : ::testing::Test {
  ToolHost host;
  void SetUp() override {
    host.load("file_grep");
    write_file(at(".gitignore"), "build/\n*.log\n");
    write_file(at("src/a.c"), "int foo(void);\nint bar;\n/* FOO again */\nint baz;\nfoo();\n");
    write_file(at("src/b.h"), "#define FOO 1\n");
    write_file(at("src/deep/c.c"), "void foo_bar(int x) { return; }\n");
    write_file(at("build/gen.c"), "int foo;\n");
    write_file(at("run.log"), "foo\n");
    write_file(at(".git/HEAD"), "foo\n");
    write_file(at("blob.bin"), std::string("foo\0bar\n", 8));
    write_file(at("crlf.txt"), "one crlf\r\ntwo crlf\r\nlf crlf\nend");
  }
  std::string at(const std::string& rel) { return host.cwd + "/" + rel; }
  Reply grep(const std::string& args) { return host.call("file_grep", args); }
  // The executable's own engine, run directly in the session cwd (outside the sandbox).
  std::string direct(const std::string& args, bool rg = false) {
    const std::string in = host.root + "/in.json", out = host.root + "/out.txt";
    write_file(in, args);
    const std::string cmd = "cd '" + host.cwd + "' && '" + testing_support::built("tools/file_grep") + "'" + (rg ? " --rg" : "") +
                            " <'" + in + "' >'" + out + "'";
    (void)!std::system(cmd.c_str());
    return read_file(out);
  }
};

const char* queries[] = {
    R"({"pattern":"foo"})",
    R"({"pattern":"foo","ignore_case":true})",
    R"({"pattern":"foo","output":"files"})",
    R"({"pattern":"foo","output":"count","ignore_case":true})",
    R"({"pattern":"ba[rz]","context":1,"path":"src"})",
    R"({"pattern":"foo","glob":"*.h","ignore_case":true})",
    R"({"pattern":"int \\w+;","glob":"src/**/*.{c,h}"})",
    R"({"pattern":"^int","path":"src/a.c"})",
    R"({"pattern":"\\d","path":"src"})",
    R"({"pattern":"nothing here"})",
    // Patterns that match the empty string find no line past the last (the own engine read past
    // its line table, with context, and made up a line after the last newline).
    R"({"pattern":"^","path":"src/a.c","context":2})",
    R"({"pattern":"^$","path":"src/a.c"})",
    R"({"pattern":"x*","path":"src/b.h","output":"count"})",
    // `$` matches before a CRLF line's CR (the CR is not shown, so it cannot be matched).
    R"({"pattern":"crlf$","path":"crlf.txt"})",
};

}  // namespace

// A CRLF line's CR is not shown, and `$` matches before it, with either engine (rg --crlf);
// `crlf$` found only the LF line.
TEST_F(FileGrep, DollarMatchesBeforeTheCrOfACrlfLine) {
  const std::string q = R"({"pattern":"crlf$","path":"crlf.txt"})";
  const std::string want = "crlf.txt:1:one crlf\ncrlf.txt:2:two crlf\ncrlf.txt:3:lf crlf\n";
  EXPECT_EQ(grep(q).out, want);
  EXPECT_EQ(direct(q), want);
}

TEST_F(FileGrep, ContentWithLineNumbersSkippingIgnoredAndBinary) {
  auto r = grep(R"({"pattern":"foo"})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out, "src/a.c:1:int foo(void);\nsrc/a.c:5:foo();\nsrc/deep/c.c:1:void foo_bar(int x) { return; }\n");
  r = grep(R"({"pattern":"ba[rz]","context":1,"path":"src"})");
  EXPECT_EQ(r.out, "src/a.c-1-int foo(void);\nsrc/a.c:2:int bar;\nsrc/a.c-3-/* FOO again */\nsrc/a.c:4:int baz;\nsrc/a.c-5-foo();\n"
                   "--\nsrc/deep/c.c:1:void foo_bar(int x) { return; }\n");
  EXPECT_EQ(grep(R"({"pattern":"nothing here"})").out, "no matches for nothing here in .\n");
}

// A NUL past rg's first block: rg prints the lines it matched before it, then a warning on stdout
// that was glued to the next file's record (`a.dat: WARNING: …\n./b.txt":1:…`), and lists the file
// in files mode. Either engine now skips the file, as a binary one, in every mode.
TEST_F(FileGrep, AFileWithANulPastItsFirstBlockIsSkippedAsBinaryByEitherEngine) {
  write_file(at("late.dat"), "foo\n" + std::string(70000, 'z') + std::string("\0\n", 2));
  for (const char* q : {R"({"pattern":"foo"})", R"({"pattern":"foo","output":"files"})", R"({"pattern":"foo","output":"count"})"}) {
    const auto r = grep(q);
    ASSERT_TRUE(r.ok()) << q << r.out << r.err;
    EXPECT_EQ(r.out.find("late.dat"), std::string::npos) << q << r.out;
    EXPECT_EQ(r.out.find("WARNING"), std::string::npos) << q << r.out;
    EXPECT_NE(r.out.find("src/a.c"), std::string::npos) << q << r.out;
    EXPECT_EQ(direct(q), r.out) << q;
    if (have_rg()) {
      EXPECT_EQ(direct(q, true), r.out) << q;
    }
  }
}

// A file name may hold a newline, and its first line may read as one of rg's binary-file notices:
// it is a file all the same. Taken for a notice, it dropped the matches of the file rg printed
// before it and gave its own lines to a path that does not exist (`q`).
TEST_F(FileGrep, AFileNamedLikeABinaryNoticeIsAFile) {
  write_file(at("victim.txt"), "x secret\n");
  write_file(at("victim.txt: binary file matches (found \"\\0\" byte around offset 5)\nq"), "x decoy\n");
  for (const char* q : {R"j({"pattern":"x (secret|decoy)"})j", R"j({"pattern":"x (secret|decoy)","output":"files"})j"})
    for (int run = 0; run < 3; run++) {  // rg's order varies with its threads
      const auto r = grep(q);
      ASSERT_TRUE(r.ok()) << r.out << r.err;
      EXPECT_NE(r.out.find("victim.txt"), std::string::npos) << q << r.out;
      EXPECT_NE(r.out.find("\"victim.txt: binary file matches"), std::string::npos) << q << r.out;
      EXPECT_EQ(r.out.find("\nq"), std::string::npos) << q << r.out;
      EXPECT_EQ(direct(q), r.out) << q;
      if (have_rg()) {
        EXPECT_EQ(direct(q, true), r.out) << q;
      }
    }
}

// Two context groups in one file. rg --crlf ends its `--` separator with a CR too; the separator
// was taken for part of the next line, and every group after a file's first was lost.
TEST_F(FileGrep, EveryContextGroupOfAFileIsShown) {
  write_file(at("groups.txt"), "match one\nx\nx\nx\nx\nmatch two\n");
  const std::string q = R"({"pattern":"match","context":1,"path":"groups.txt"})";
  const std::string want = "groups.txt:1:match one\ngroups.txt-2-x\n--\ngroups.txt-5-x\ngroups.txt:6:match two\n";
  EXPECT_EQ(grep(q).out, want);
  EXPECT_EQ(direct(q), want);
  if (have_rg()) {
    EXPECT_EQ(direct(q, true), want);
  }
}

TEST_F(FileGrep, FilesCountGlobAndCase) {
  EXPECT_EQ(grep(R"({"pattern":"foo","output":"files","ignore_case":true})").out, "src/a.c\nsrc/b.h\nsrc/deep/c.c\n");
  EXPECT_EQ(grep(R"({"pattern":"foo","output":"count","ignore_case":true})").out,
            "src/a.c:3\nsrc/b.h:1\nsrc/deep/c.c:1\n[5 matching lines in 3 files]\n");
  EXPECT_EQ(grep(R"({"pattern":"FOO","glob":"*.h"})").out, "src/b.h:1:#define FOO 1\n");
  EXPECT_EQ(grep(R"({"pattern":"foo","glob":"src/deep/**/*.c"})").out, "src/deep/c.c:1:void foo_bar(int x) { return; }\n");
}

// `src/*.c` is the files directly in src, `src/**/*.c` src and below.
TEST_F(FileGrep, AGlobWithADirectorySearchesItAloneUnlessItSaysStarStar) {
  const char* shallow = R"({"pattern":"foo","glob":"src/*.c"})";
  EXPECT_EQ(grep(shallow).out, "src/a.c:1:int foo(void);\nsrc/a.c:5:foo();\n");
  EXPECT_EQ(direct(shallow), grep(shallow).out);
  EXPECT_EQ(grep(R"({"pattern":"foo","glob":"src/**/*.c"})").out,
            "src/a.c:1:int foo(void);\nsrc/a.c:5:foo();\nsrc/deep/c.c:1:void foo_bar(int x) { return; }\n");
  // `dir/**` is every file below dir, as file_glob takes it (it was the files directly in it).
  for (const char* all : {R"({"pattern":"foo","glob":"src/**","ignore_case":true})", R"({"pattern":"foo","glob":"src/deep/**"})"}) {
    const auto r = grep(all);
    EXPECT_NE(r.out.find("src/deep/c.c:1:void foo_bar"), std::string::npos) << all << r.out;
    EXPECT_EQ(direct(all), r.out) << all;
  }
  EXPECT_NE(grep(R"({"pattern":"foo","glob":"src/**","ignore_case":true})").out.find("src/b.h:1:#define FOO 1"), std::string::npos);
}

// A newline in a file name: the match is listed under its own name, quoted, never under the name
// of the file its last line spells (rg's records were split at the newline before the NUL).
TEST_F(FileGrep, AFileNameWithANewlineIsListedQuoted) {
  write_file(at("n/a\nb.txt"), "hello newline name\n");
  write_file(at("n/b.txt"), "nothing\n");
  const char* q = R"({"pattern":"hello","path":"n"})";
  const auto r = grep(q);
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "\"n/a\\nb.txt\":1:hello newline name\n");
  EXPECT_EQ(direct(q), r.out);
  if (have_rg()) {
    EXPECT_EQ(direct(q, true), r.out);
  }
  EXPECT_EQ(grep(R"({"pattern":"hello","path":"n","output":"files"})").out, "\"n/a\\nb.txt\"\n");
}

TEST_F(FileGrep, TheRipgrepVariantIsChosenWhenRgIsInstalled) {
  if (!have_rg()) GTEST_SKIP() << "rg is not installed";
  EXPECT_NE(host.catalog().find("Syntax: Rust regex (ripgrep)"), std::string::npos);
}

TEST_F(FileGrep, BothEnginesGiveTheSameOutput) {
  if (!have_rg()) GTEST_SKIP() << "rg is not installed";
  for (const char* q : queries) {
    const auto r = grep(q);
    EXPECT_TRUE(r.ok()) << q << r.out;
    EXPECT_EQ(direct(q), r.out) << q;
    EXPECT_EQ(direct(q, true), r.out) << q;
  }
}

// A file the tool cannot read is skipped by either engine: a search that matches nothing then
// says so (rg exits 2 for the unreadable file, and that was reported as `rg failed`).
TEST_F(FileGrep, AnUnreadableFileIsSkipped) {
  write_file(at("src/locked.c"), "int foo;\n", 0);
  for (const char* q : {R"({"pattern":"nowhere to be found"})", R"({"pattern":"foo\\(","path":"src"})"}) {
    const auto r = grep(q);
    EXPECT_TRUE(r.ok()) << q << r.out << r.err;
    EXPECT_EQ(r.out, direct(q)) << q;
  }
}

TEST_F(FileGrep, OutputIsCappedWithTheCountOfWhatWasCut) {
  std::string many;
  for (int i = 0; i < 150; i++) many += "match " + std::to_string(i) + "\n";
  for (int f = 0; f < 3; f++) write_file(at("many/f" + std::to_string(f) + ".txt"), many);
  const std::string q = R"({"pattern":"^match","path":"many"})";
  auto r = grep(q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 201);
  EXPECT_NE(r.out.find("many/f1.txt:50:match 49\n[… 250 more matching lines not shown (450 in 3 files); narrow the pattern"),
            std::string::npos)
      << r.out.substr(r.out.size() - 300);
  EXPECT_EQ(direct(q), r.out);
}

TEST_F(FileGrep, BadRegexAndBadArgumentsAreClearErrors) {
  auto r = grep(R"({"pattern":"(unclosed"})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out.rfind("invalid regex: ", 0), 0u) << r.out;
  EXPECT_EQ(direct(R"({"pattern":"(unclosed"})").rfind("invalid regex: ", 0), 0u);
  // rg's reason, not the hint that follows it.
  if (have_rg()) {
    EXPECT_EQ(direct(R"j({"pattern":"a(?=b)"})j", true),
              "invalid regex: look-around, including look-ahead and look-behind, is not supported (Rust regex syntax)\n");
    EXPECT_EQ(direct(R"({"pattern":"a\nb"})", true), "rg failed: the literal '\"\\n\"' is not allowed in a regex\n");
  }
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "missing argument: pattern\n"},
      {R"({"pattern":""})", "invalid pattern: empty\n"},
      {R"({"pattern":"x","context":30})", "invalid context: must be an integer from 0 to 20\n"},
      {R"({"pattern":"x","output":"lines"})", "invalid output: lines; must be content, files or count\n"},
      {R"({"pattern":"x","ignore_case":1})", "invalid ignore_case: must be true or false\n"},
      {R"({"pattern":"x","path":"missing"})", "file not found: missing\n"},
      {R"({"pattern":"x","path":"blob.bin"})", "binary file (8 B): blob.bin; file_grep searches text files\n"},
      {R"({"pattern":"x","glob":"src/*/x/*.c"})",
       "invalid glob: src/*/x/*.c; a glob matches file names (e.g. *.cpp); put directories in path\n"},
  };
  for (const auto& [args, want] : cases) {
    auto c = grep(args);
    EXPECT_EQ(c.exit(), 1) << args;
    EXPECT_EQ(c.out, want) << args;
  }
}

TEST_F(FileGrep, OutsideTheSandboxIsPermissionDenied) {
  write_file(host.home + "/private/keys.txt", "foo\n");
  auto r = grep(R"({"pattern":"foo","path":")" + host.home + R"(/private"})");
  EXPECT_EQ(r.status(), "exited");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "permission denied: " + host.home + "/private (outside the sandbox's paths)\n");
  r = grep(R"({"pattern":"foo","path":")" + host.home + R"(/private/keys.txt"})");
  EXPECT_EQ(r.out, "permission denied: " + host.home + "/private/keys.txt (outside the sandbox's paths)\n");
}
