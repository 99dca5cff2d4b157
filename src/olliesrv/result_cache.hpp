#pragma once
/// The deduplication key of a batch (spec §8.3.2) and the per-turn tool-result cache with its
/// staleness rules (§8.3.3): only successful foreground read-scope results; an entry whose call
/// names a `path` holds that path's stamp from toolsrv's `info` `stat` and is served only while a
/// new stamp is the same; a write on a path drops the entries of that path and of its ancestor
/// directories, a global call drops them all.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "dispatch.hpp"
#include "toolhost.hpp"

namespace ollie {

/// Whether a call may be merged with its duplicates and its result cached: it runs (no preset
/// result), in the foreground, with read scope.
bool cacheable(const Call& c);

/// The tool name and the canonical arguments (keys sorted by their UTF-8 bytes, no
/// insignificant whitespace, dispatch flags included). Only for cacheable calls.
std::string dedupe_key(const Call& c);

class ResultCache {
 public:
  static constexpr std::size_t MAX_ENTRIES = 256;  ///< the oldest entry goes when a new one would exceed this

  struct Entry {
    ToolOutcome result;
    std::string path;  ///< the call's `path`, absolute and clean ("" = none: no staleness check)
    FileStamp stamp;   ///< the path as it was just before the call ran
    std::string within;  ///< the call's `within`: a write on it or below it drops the entry
  };

  /// The entry of `key`, or nullptr.
  const Entry* find(const std::string& key) const;
  /// Stores (or replaces) the entry of `key`.
  void put(const std::string& key, Entry e);
  /// A write-scope call on `path` ran: drops the entries about `path` or one of its ancestor
  /// directories (a read without a path is about its cwd).
  void drop_path(const std::string& path);
  /// A global-scope call ran.
  void clear();
  std::size_t size() const { return entries_.size(); }

 private:
  struct Slot {
    Entry e;
    std::uint64_t age;
  };
  std::map<std::string, Slot> entries_;
  std::map<std::uint64_t, std::string> by_age_;  ///< age → key, oldest first
  std::uint64_t next_age_ = 0;
};

}  // namespace ollie
