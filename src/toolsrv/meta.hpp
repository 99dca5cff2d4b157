#pragma once
/// Tool metadata: the `.meta` JSON sidecar (spec §7.2.1) and its conditional variants (§7.2.3).

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib9p/result.hpp"

namespace toolsrv {

using p9::Result;

/// Concurrency class of a tool (§6.7).
enum class Scope { read, write, global };

/// The spelling of a scope in `.meta` and in listings.
std::string_view scope_name(Scope s);

/// What variant conditions are evaluated against: the tool host as sandboxed tools see it.
struct HostFacts {
  std::string os;                            ///< §7.2.3 names: linux, darwin, ...
  std::string arch;                          ///< §7.2.3 names: amd64, arm64, ...
  std::vector<std::string> path;             ///< PATH of sandboxed tools, tool dirs first
  std::map<std::string, std::string> env;    ///< environment of sandboxed tools
};

/// `os` and `arch` of this host in the names of §7.2.3 (uname -m mapped).
std::pair<std::string, std::string> host_os_arch();

/// A valid tool, its variant (if any) applied.
struct Tool {
  std::string name;
  std::string description;
  std::string prompt;
  nlohmann::json args;
  std::string tier = "hot";
  Scope scope = Scope::global;
  std::optional<std::string> output_format;
  std::optional<std::string> cmd;  ///< set: run as `/bin/sh -c <cmd>` (meta-only or variant)
  int timeout = 30;
  std::string dir;        ///< the tools directory it was found in
  std::string meta_path;  ///< <dir>/<name>.meta
  std::string exe_path;   ///< <dir>/<name> when there is no cmd, else empty
};

/// Parses and validates one `.meta` text for tool `name` in `dir`. `has_executable` says whether
/// `<dir>/<name>` is an executable regular file. Errors are the catalog's error texts
/// (`description is required`, `args must be a JSON Schema object`, `reserved argument name:
/// timeout`, `unknown condition: foo`, `no executable and no cmd`, ...); a tool whose variants
/// all fail gives exactly `not available on this host`.
Result<Tool> parse_meta(std::string_view name, std::string_view dir, std::string_view text,
                        bool has_executable, const HostFacts& host);

/// A `.meta` longer than this is an invalid tool, read no further (§7.2.2: the model may write
/// into a tool directory).
inline constexpr std::size_t max_meta_bytes = 1u << 20;
/// Nesting of arrays and objects a `.meta` may have.
inline constexpr int max_meta_depth = 64;

/// The error text parse_meta gives when no variant matches.
inline constexpr std::string_view not_available_error = "not available on this host";

/// nlohmann's parse error without its prefix, its "syntax error while parsing <what> - " and the
/// text it last read: the file may be a symlink the model planted to any file the server can
/// read, and the error reaches the model. `parse error at line 2, column 1: unexpected end of input; …`
std::string parse_error_text(std::string_view what);

/// The tool as listed by `tools` (§6.4): name, description, prompt, parameters, scope, tier,
/// outputFormat (when set), timeout.
nlohmann::ordered_json tool_json(const Tool& tool);

}  // namespace toolsrv
