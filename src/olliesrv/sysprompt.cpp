#include "olliesrv/sysprompt.hpp"

#include <algorithm>
#include <cstddef>

#include "lib9p/utf8.hpp"

namespace ollie {

namespace detail {
extern const unsigned char system_prompt_data[];  // generated from data/prompts/system.md
extern const std::size_t system_prompt_size;
}  // namespace detail

std::string trim_trailing_newlines(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

namespace {

/// True when the first line of `prompt` is the heading `## <name>` (trailing blanks ignored).
bool starts_with_heading(const std::string& prompt, const std::string& name) {
  const std::string heading = "## " + name;
  if (prompt.compare(0, heading.size(), heading) != 0) return false;
  for (std::size_t i = heading.size(); i < prompt.size(); i++) {
    if (prompt[i] == '\n') return true;
    if (prompt[i] != ' ' && prompt[i] != '\t' && prompt[i] != '\r') return false;
  }
  return true;
}

}  // namespace

const std::string& default_system_prompt() {
  static const std::string text = trim_trailing_newlines(
      std::string(reinterpret_cast<const char*>(detail::system_prompt_data), detail::system_prompt_size));
  return text;
}

std::string render_system_prompt(const SystemPromptParts& p) {
  std::vector<std::string> sections;
  if (auto s = trim_trailing_newlines(p.system); !s.empty()) sections.push_back(std::move(s));

  sections.push_back("# Environment\n\n- Working directory: " + p.cwd + "\n- Platform: " + p.platform +
                     "\n- Git repository: " + (p.git ? "yes" : "no") + "\n- Session: " + p.session_name + " (" +
                     p.session_id + ")\n- Agent: " + p.agent_name + " (" + p.agent_id + ")");

  if (auto a = trim_trailing_newlines(p.agent); !a.empty()) sections.push_back(std::move(a));

  if (!p.tools.empty()) {
    std::vector<const ToolInfo*> tools;
    for (const auto& t : p.tools) tools.push_back(&t);
    std::stable_sort(tools.begin(), tools.end(), [](const ToolInfo* a, const ToolInfo* b) { return a->name < b->name; });
    std::string s = "# Tools";
    for (const ToolInfo* t : tools) {
      std::string text = trim_trailing_newlines(t->prompt.empty() ? t->description : t->prompt);
      s += "\n\n";
      if (!t->prompt.empty() && starts_with_heading(text, t->name)) {
        s += text;
      } else {
        s += "## " + t->name;
        if (!text.empty()) s += "\n\n" + text;
      }
    }
    sections.push_back(std::move(s));
  }

  std::string out;
  for (const auto& s : sections) out += (out.empty() ? "" : "\n\n") + s;
  // A prompt file, a command's output or a tool's prompt need not be UTF-8: `ctl systemprompt`
  // shows what the provider gets, which is UTF-8 (§1.2).
  return p9::valid_utf8(out);
}

}  // namespace ollie
