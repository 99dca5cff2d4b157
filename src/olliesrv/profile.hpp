#pragma once
/// Agent profiles (spec §7.5) and prompt entries (§7.5.1).

#include <chrono>
#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "lib9p/dirs.hpp"
#include "lib9p/result.hpp"

namespace ollie {

struct Profile {
  std::string name;
  std::vector<std::string> prompt, user_prompts;  ///< entries (§7.5.1), unresolved
  std::string system_prompt;                      ///< a path; "" = the embedded default
  std::vector<std::string> auto_load;
  std::string backend, model;
  /// The generation parameters the profile sets, keyed by their cfg names (§2.8.3:
  /// maxTokens ... verbosity), values validated (numbers, bools, `stop` an array of strings).
  std::string params = "{}";  ///< JSON object text
  /// `compactAt`: compact when the context estimate reaches this % of the context length (§8.5.2).
  int compact_at = 50;
  std::vector<std::string> warnings;  ///< `agent profile <p>: unknown field <f>` per unknown field
};

/// A name a profile file may have: not empty, no `/`, no leading `.`, no control character.
bool valid_profile_name(const std::string& name);
/// `<config root>/agents/<name>.json`. A missing `default` is `{}`; another missing profile is
/// `unknown agent profile: <p>`; bad JSON or a field of the wrong type is
/// `agent profile <p>: <parse error>`. A name valid_profile_name refuses is unknown.
p9::Result<Profile> load_profile(const std::string& config_root, const std::string& name);
/// `agent profile <p>: <what>`: a profile's mistake, named.
p9::Error bad_profile(const std::string& name, const std::string& what);
/// Stored cfg overrides (JSON object text, as session.json keeps them) with each entry checked
/// as a profile's parameter is: an unknown key or a value a `cfg` write would refuse is left
/// out, and `dropped` is told why (`temperature must be a number`, `invalid maxTokens: -5`).
std::string checked_params(const std::string& params, const std::function<void(const std::string&)>& dropped);
/// The profile names (`agents/*.json` without `.json`), sorted (root `agents`, §2.1).
std::vector<std::string> profile_names(const std::string& config_root);

/// What prompt entries are resolved against.
struct PromptContext {
  std::string config_root;   ///< relative paths are taken under <config root>/prompts/
  p9::Env env;               ///< olliesrv's environment for $VAR
  std::string session_id, agent_id;  ///< also $OLLIE_SESSION_ID, $OLLIE_AGENT_ID
  std::string cwd;           ///< where `!` commands run when it exists locally, else $HOME
  int stop_fd = -1;          ///< readable: olliesrv stops, a running `!` command is killed
  int cancel_fd = -1;        ///< readable: whoever asked went away (a flush, a stop): the same
  std::set<std::string> secrets;  ///< backend secret variables (§7.4): unset for $VAR and `!` commands
};

struct ResolvedText {
  std::string text;                   ///< the texts joined with one blank line
  std::vector<std::string> warnings;  ///< e.g. `prompt entry not found: <entry>`
  bool ended = false;                 ///< cut short by the stop or cancel fd: not a resolution
};

/// Resolves entries as §7.5.1 says. Blocks (a `!` entry runs up to 30 s, in its own process
/// group, killed as a group on timeout): call it off the I/O threads.
ResolvedText resolve_entries(const std::vector<std::string>& entries, const PromptContext& ctx);

/// The System section (§7.6) for a profile's `systemPrompt`: the embedded default when it is "",
/// else that file ($VAR and `~` expanded, relative to <config root>/prompts/, trailing newlines
/// removed). A missing or unreadable file → a warning as for entries, and the default. Reads a
/// file: call it off the I/O threads.
ResolvedText resolve_system_prompt(const std::string& system_prompt, const PromptContext& ctx);

/// True when one of `entries` is a command (`!`, once its variables are expanded).
bool runs_commands(const std::vector<std::string>& entries, const PromptContext& ctx);

namespace detail {
/// resolve_entries with the `!` command timeout and stdout cap chosen (the public one uses 30 s
/// and 256 KiB); for tests.
ResolvedText resolve_entries(const std::vector<std::string>& entries, const PromptContext& ctx,
                             std::chrono::milliseconds command_timeout, std::size_t output_cap);
}  // namespace detail

}  // namespace ollie
