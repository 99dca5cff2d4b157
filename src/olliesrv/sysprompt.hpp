#pragma once
/// System prompt assembly (spec §7.6).

#include <string>
#include <vector>

#include "toolhost.hpp"

namespace ollie {

/// The embedded default system prompt: data/prompts/system.md, built into olliesrv.
const std::string& default_system_prompt();

struct SystemPromptParts {
  std::string system;  ///< the System section: the default or the profile's systemPrompt file text
  std::string cwd, platform;  ///< platform `linux/amd64` (from toolsrv info os/arch)
  bool git = false;
  std::string session_name, session_id, agent_name, agent_id;
  std::string agent;   ///< the resolved `prompt` entries
  std::vector<ToolInfo> tools;  ///< loaded tools, any order (rendered by name)
};

/// `s` without its trailing line ends (LF and CR): a prompt file's text as a section holds it.
std::string trim_trailing_newlines(std::string s);

/// The four sections joined by a blank line, empty ones left out (§7.6); bytes that are not
/// UTF-8 become U+FFFD.
std::string render_system_prompt(const SystemPromptParts& p);

}  // namespace ollie
