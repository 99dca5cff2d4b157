#pragma once
/// Tool discovery (spec §7.2.2) and the per-agent registries of loaded tools (§6.3, §6.4).

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib9p/result.hpp"
#include "toolsrv/meta.hpp"

namespace toolsrv {

/// A file's version as stat(2) tells it: an edited, replaced, removed or chmodded `.meta` or
/// executable has another stamp.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  mode_t mode = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  bool exists = false;
  static FileStamp of(const std::string& path);
  bool operator==(const FileStamp&) const = default;
};

/// One discovered tool: valid (tool set) or invalid/unavailable (error set).
struct CatalogEntry {
  std::string name;
  std::string meta_path;
  std::optional<Tool> tool;
  std::string error;  ///< empty when valid; `not available on this host` when no variant matched
  FileStamp meta_stamp, exe_stamp;  ///< as read
};

/// The tool directories: entries of `tools_path` (OLLIE_TOOLS_PATH, colon-separated) in order,
/// else `<config_root>/tools`. Relative entries are dropped with a line in `warnings`.
std::vector<std::string> tool_dirs(const std::string& tools_path, const std::string& config_root,
                                   std::vector<std::string>* warnings);

/// Scans `dirs` (not recursive): every `<name>.meta`, the first directory having a name wins.
/// Invalid `.meta` files are entries with an error; nothing here throws or stops.
std::vector<CatalogEntry> scan_tools(const std::vector<std::string>& dirs, const HostFacts& host);

/// §7.2.2's hot reload: `catalog` with the entries named in `names` re-read whose `.meta` or
/// executable changed since it was made (a removed one dropped), and those it lacks looked for
/// again in `dirs` (a `.meta` saved by rename, a checkout: gone at one query, back at the next);
/// nullptr when none changed.
std::shared_ptr<const std::vector<CatalogEntry>> refreshed(const std::vector<CatalogEntry>& catalog,
                                                           const std::set<std::string>& names,
                                                           const std::vector<std::string>& dirs, const HostFacts& host);

/// The catalog listing of `tools *`, sorted by name: valid tools as tool_json, the others as
/// `{"name":..,"error":..}`.
nlohmann::ordered_json catalog_json(const std::vector<CatalogEntry>& entries);

/// Per-agent sets of loaded tool names. Tool definitions are not kept: the listing of an agent
/// comes from a fresh scan, so `.meta` edits take effect without a restart.
class Registry {
 public:
  /// Loads all or none (§6.3). Errors: `unknown tool: <t>`, `tool not available on this host: <t>`,
  /// `invalid tool: <t>: <error>`.
  p9::Result<void> load(const std::string& agent, const std::vector<std::string>& names,
                        const std::vector<CatalogEntry>& catalog);
  /// Removes names (not loaded → ignored).
  void unload(const std::string& agent, const std::vector<std::string>& names);
  /// Drops the agent's registry.
  void forget(const std::string& agent);
  /// The agent's loaded tool names (none: empty).
  const std::set<std::string>& names(const std::string& agent) const;
  /// True when `name` is loaded for `agent`.
  bool loaded(const std::string& agent, const std::string& name) const;
  /// The agent's tools in a fresh catalog, sorted by name, as the `tools <agent>` JSON array;
  /// a loaded tool that became invalid is left out (and named in `dropped`).
  nlohmann::ordered_json agent_json(const std::string& agent, const std::vector<CatalogEntry>& catalog,
                            std::vector<std::string>* dropped) const;

 private:
  std::map<std::string, std::set<std::string>> loaded_;
};

/// Finds `name` in a scan.
const CatalogEntry* find_entry(const std::vector<CatalogEntry>& catalog, const std::string& name);

}  // namespace toolsrv
