// doc/namespace.md's tree is the namespace declaration (root `help`), so the user's reference
// cannot drift from the server. On a mismatch the test prints the table; run it with
// OLLIE_UPDATE_DOC=1 to rewrite the block in the source tree.
#include <gtest/gtest.h>

#include "olliesrv/world.hpp"

using namespace convo;

namespace {

const std::string begin_marker = "<!-- tree: generated from root `help`";
const std::string end_marker = "<!-- end of tree -->";

std::string cell(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

/// `help` (path, kind, mode, doc per line) as the doc's Markdown table.
std::string table(const std::string& help) {
  std::string out = "| Path | Kind | Mode | What it is |\n|---|---|---|---|\n";
  std::size_t pos = 0;
  while (pos < help.size()) {
    auto nl = help.find('\n', pos);
    std::string line = help.substr(pos, nl - pos);
    pos = nl == std::string::npos ? help.size() : nl + 1;
    std::vector<std::string> f;
    std::size_t p = 0;
    for (int i = 0; i < 3; i++) {
      auto t = line.find('\t', p);
      f.push_back(line.substr(p, t - p));
      p = t == std::string::npos ? line.size() : t + 1;
    }
    f.push_back(line.substr(p));
    out += "| `" + f[0] + "` | " + f[1] + " | " + f[2] + " | " + cell(f[3]) + " |\n";
  }
  return out;
}

}  // namespace

TEST(NamespaceDoc, TheTreeBlockIsTheDeclaration) {
  World w;
  auto help = w.read("help");
  ASSERT_TRUE(help) << help.ename();
  const std::string path = source("doc/namespace.md");
  std::string doc = read_file(path);
  const auto b = doc.find(begin_marker);
  ASSERT_NE(b, std::string::npos) << path << " has no tree block";
  const auto start = doc.find('\n', b) + 1;
  const auto end = doc.find(end_marker, start);
  ASSERT_NE(end, std::string::npos);
  const std::string want = table(*help);
  if (doc.substr(start, end - start) != want && std::getenv("OLLIE_UPDATE_DOC")) {
    doc.replace(start, end - start, want);
    write_file(path, doc);
    return;
  }
  EXPECT_EQ(doc.substr(start, end - start), want)
      << "doc/namespace.md's tree differs from the declaration: rerun with OLLIE_UPDATE_DOC=1";
}
