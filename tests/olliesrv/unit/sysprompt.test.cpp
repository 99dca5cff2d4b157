#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "olliesrv/sysprompt.hpp"

using namespace ollie;

namespace {

std::string source_file(const std::string& rel) {
  const char* src = (std::getenv("OLLIE_SOURCE_DIR") ? std::getenv("OLLIE_SOURCE_DIR") : OLLIE_TEST_SOURCE_DIR);
  std::ifstream in(std::string(src ? src : ".") + "/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

SystemPromptParts parts() {
  SystemPromptParts p;
  p.system = "You are an agent.\n";
  p.cwd = "/home/me/src/proj";
  p.platform = "linux/amd64";
  p.git = true;
  p.session_name = "work";
  p.session_id = "3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77";
  p.agent_name = "main";
  p.agent_id = "9b1c0d2e-1111-4222-8333-944455556666";
  return p;
}

const std::string kEnv =
    "# Environment\n\n"
    "- Working directory: /home/me/src/proj\n"
    "- Platform: linux/amd64\n"
    "- Git repository: yes\n"
    "- Session: work (3f0c2b9e-8c1d-4d5e-9a51-0b9f6d0e2a77)\n"
    "- Agent: main (9b1c0d2e-1111-4222-8333-944455556666)";

}  // namespace

TEST(Sysprompt, DefaultIsTheShippedSystemMd) {
  std::string file = source_file("data/prompts/system.md");
  ASSERT_FALSE(file.empty()) << "set OLLIE_SOURCE_DIR";
  while (!file.empty() && file.back() == '\n') file.pop_back();
  EXPECT_EQ(default_system_prompt(), file);
  // §7.6's Tools section is the rendered prompt's one `# Tools` heading.
  EXPECT_EQ(("\n" + file).find("\n# Tools\n"), std::string::npos);
}

TEST(Sysprompt, EnvironmentSectionAsSpecified) {
  auto p = parts();
  EXPECT_EQ(render_system_prompt(p), "You are an agent.\n\n" + kEnv);
  p.git = false;
  EXPECT_NE(render_system_prompt(p).find("- Git repository: no\n"), std::string::npos);
}

TEST(Sysprompt, FourSectionsJoinedByABlankLineEmptyOnesLeftOut) {
  auto p = parts();
  p.agent = "Be brief.\n\n";
  ToolInfo shell{"shell", "Runs a command.", "## shell\n\nRun commands with care.\n"};
  ToolInfo grep{"file_grep", "Searches files.", ""};
  ToolInfo read{"file_read", "Reads a file.", "Read before you edit."};
  p.tools = {shell, read, grep};
  EXPECT_EQ(render_system_prompt(p),
            "You are an agent.\n\n" + kEnv +
                "\n\nBe brief.\n\n"
                "# Tools\n\n"
                "## file_grep\n\nSearches files.\n\n"
                "## file_read\n\nRead before you edit.\n\n"
                "## shell\n\nRun commands with care.");
  p.system.clear();
  p.agent.clear();
  p.tools.clear();
  EXPECT_EQ(render_system_prompt(p), kEnv);
}

TEST(Sysprompt, HeadingRuleNeedsTheWholeHeadingLine) {
  auto p = parts();
  p.system.clear();
  // "## shells" is not the heading "## shell"; a heading of another tool is not either.
  p.tools = {ToolInfo{"shell", "d", "## shells\nx"}, ToolInfo{"tool_load", "", "## tool_load  \nLoads."},
             ToolInfo{"web", "", ""}};
  EXPECT_EQ(render_system_prompt(p), kEnv +
                                         "\n\n# Tools\n\n"
                                         "## shell\n\n## shells\nx\n\n"
                                         "## tool_load  \nLoads.\n\n"
                                         "## web");
}
