// codeintel: outlines and symbol search from the real Universal Ctags, through a real toolsrv.
#include <gtest/gtest.h>

#include "tools/host.hpp"

using namespace tools_test;

namespace {

class Codeintel : public testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/ctags", X_OK) != 0) GTEST_SKIP() << "Universal Ctags is not installed (Debian: apt install universal-ctags)";
    write_file(host.cwd + "/src/shapes.hpp",
               "#pragma once\n"
               "namespace geo {\n"
               "class Circle {\n"
               " public:\n"
               "  double area() const;\n"
               "  struct Center { int x; };\n"
               "};\n"
               "enum Color { Red, Green };\n"
               "int add(int a, int b);\n"
               "}\n");
    write_file(host.cwd + "/src/shapes.cpp", "#include \"shapes.hpp\"\nnamespace geo {\nint add(int a, int b) { return a + b; }\n}\n");
    write_file(host.cwd + "/tool.py", "class Adder:\n    def add_all(self, xs):\n        return sum(xs)\n\ndef main():\n    pass\n");
    host.load("codeintel");
  }
  ToolHost host;
};

TEST_F(Codeintel, OutlineNestsSymbolsByScope) {
  auto r = host.call("codeintel", R"({"path":"src/shapes.hpp"})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out,
            "src/shapes.hpp: 9 symbols\n"
            "namespace geo  :2\n"
            "  class Circle  :3\n"
            "    prototype area() const  :5\n"
            "    struct Center  :6\n"
            "      member x  :6\n"
            "  enum Color  :8\n"
            "    enumerator Red  :8\n"
            "    enumerator Green  :8\n"
            "  prototype add(int a,int b)  :9\n");
  r = host.call("codeintel", R"({"path":"tool.py"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "tool.py: 3 symbols\nclass Adder  :1\n  member add_all(self, xs)  :2\nfunction main()  :5\n");
}

TEST_F(Codeintel, QueryFindsDefinitionsInATreeExactMatchesFirst) {
  auto r = host.call("codeintel", R"({"path":".","query":"add"})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out,
            "4 definitions matching `add`:\n"
            "src/shapes.cpp:3: function geo::add(int a,int b)\n"
            "src/shapes.hpp:9: prototype geo::add(int a,int b)\n"
            "tool.py:1: class Adder\n"
            "tool.py:2: member Adder::add_all(self, xs)\n");
  r = host.call("codeintel", R"({"path":".","query":"ADD","kind":"function"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "1 definitions matching `ADD` of kind function:\nsrc/shapes.cpp:3: function geo::add(int a,int b)\n");
  r = host.call("codeintel", R"({"path":"src/shapes.hpp","kind":"enumerator"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "2 definitions of kind enumerator:\nsrc/shapes.hpp:8: enumerator geo::Color::Red\nsrc/shapes.hpp:8: enumerator geo::Color::Green\n");
  // A `.ctags.d/` in the cwd is the model's to write: ctags does not read it.
  write_file(host.cwd + "/.ctags.d/off.ctags", "--languages=-all\n");
  r = host.call("codeintel", R"({"path":".","query":"ADD","kind":"function"})");
  EXPECT_EQ(r.out, "1 definitions matching `ADD` of kind function:\nsrc/shapes.cpp:3: function geo::add(int a,int b)\n");
  r = host.call("codeintel", R"({"path":".","query":"nothing_like_this"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "no definitions matching `nothing_like_this` in .\n");
  // ctags gives no path for a file whose name is not UTF-8: its tags are left out, not shown
  // as `:1: …`, a line nobody can open.
  write_file(host.cwd + "/src/bad\xff.cpp", "int add_bad(int a) { return a; }\n");
  r = host.call("codeintel", R"({"path":".","query":"add"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out.find("\n:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("add_bad"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("src/shapes.cpp:3: function geo::add(int a,int b)\n"), std::string::npos) << r.out;
}

TEST_F(Codeintel, OutputIsCapped) {
  std::string text;
  for (int i = 0; i < 500; i++) text += "int f" + std::to_string(i) + "() { return " + std::to_string(i) + "; }\n";
  write_file(host.cwd + "/many.c", text);
  auto r = host.call("codeintel", R"({"path":"many.c"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out.rfind("many.c: 500 symbols\nfunction f0()  :1\n", 0), 0u) << r.out.substr(0, 200);
  EXPECT_NE(r.out.find("\n… 300 more symbols not shown\n"), std::string::npos) << r.out.substr(r.out.size() - 200);
  EXPECT_LT(r.out.size(), 8192u);
}

TEST_F(Codeintel, BadArgumentsAndFilesWithoutSymbols) {
  write_file(host.cwd + "/blob.bin", std::string("\0\1\2\3", 4));
  write_file(host.home + "/secret.c", "int s;\n");
  const std::pair<std::string, std::string> cases[] = {
      {R"({})", "missing argument: path\n"},
      {R"({"path":7})", "invalid path: must be a string\n"},
      {R"({"path":"src"})", "missing argument: query (src is a directory: give a symbol name to search it, or a file for its outline)\n"},
      {R"({"path":"src","query":""})", "invalid query: empty; give a symbol name or part of one\n"},
      {R"({"path":"src","query":"  "})", "invalid query: empty; give a symbol name or part of one\n"},
      {R"({"path":"nope.c"})", "cannot read nope.c: No such file or directory\n"},
      {R"({"path":")" + host.home + R"(/secret.c"})", "cannot read " + host.home + "/secret.c: Permission denied\n"},
      {R"({"path":")" + host.home + R"(","query":"s"})", "cannot read " + host.home + ": Permission denied\n"},
  };
  for (const auto& [args, error] : cases) {
    const auto r = host.call("codeintel", args);
    EXPECT_EQ(r.exit(), 1) << args;
    EXPECT_EQ(r.out, error) << args;
  }
  auto r = host.call("codeintel", R"({"path":"blob.bin"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "no symbols in blob.bin (ctags knows no definitions there, or not its language)\n");
}

// A symbolic link in the tree is not followed (a link to /usr had ctags index the system until its
// time ran out, and say "no definitions").
TEST_F(Codeintel, ASymbolicLinkInTheTreeIsNotFollowed) {
  write_file(host.cwd + "/elsewhere/x.c", "int add(int a) { return a; }\n");
  std::filesystem::create_directory_symlink("../elsewhere", host.cwd + "/src/out");
  const auto r = host.call("codeintel", R"({"path":"src","query":"add","kind":"function"})");
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, "1 definitions matching `add` of kind function:\nsrc/shapes.cpp:3: function geo::add(int a,int b)\n");
  // The directory named is searched when it is itself a link (as file_grep and file_glob do).
  std::filesystem::create_directory_symlink("src", host.cwd + "/srclink");
  for (const char* path : {"srclink", "srclink/"}) {
    const auto linked = host.call("codeintel", std::string(R"({"path":")") + path + R"(","query":"add","kind":"function"})");
    EXPECT_EQ(linked.out, "1 definitions matching `add` of kind function:\nsrclink/shapes.cpp:3: function geo::add(int a,int b)\n") << path;
  }
}

TEST_F(Codeintel, MissingCtagsIsSaidPlainly) {
  ASSERT_TRUE(host.ctl("env PATH=/nonexistent\n"));
  const auto r = host.call("codeintel", R"({"path":"src/shapes.hpp"})");
  EXPECT_EQ(r.exit(), 1);
  EXPECT_EQ(r.out, "codeintel needs Universal Ctags, and ctags is not on PATH (Debian: apt install universal-ctags)\n");
}

}  // namespace
