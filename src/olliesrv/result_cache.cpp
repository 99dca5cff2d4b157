#include "result_cache.hpp"

namespace ollie {

namespace {

/// `dir` is `path` or one of its ancestor directories (both absolute and clean).
bool covers(const std::string& dir, const std::string& path) {
  if (dir.empty()) return false;
  if (dir == path || dir == "/") return true;
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

}  // namespace

bool cacheable(const Call& c) { return !c.preset && !c.unknown && !c.background && c.scope == "read"; }

// block_args is the parsed object dumped again: nlohmann's objects keep their keys in a std::map,
// whose std::string order is the order of unsigned bytes, and dump() writes no whitespace.
std::string dedupe_key(const Call& c) { return c.name + "\n" + c.block_args; }

const ResultCache::Entry* ResultCache::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second.e;
}

void ResultCache::put(const std::string& key, Entry e) {
  if (auto it = entries_.find(key); it != entries_.end()) {
    by_age_.erase(it->second.age);
    entries_.erase(it);
  }
  while (entries_.size() >= MAX_ENTRIES) {
    entries_.erase(by_age_.begin()->second);
    by_age_.erase(by_age_.begin());
  }
  const auto age = next_age_++;
  entries_.emplace(key, Slot{std::move(e), age});
  by_age_.emplace(age, key);
}

void ResultCache::drop_path(const std::string& path) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (covers(it->second.e.within, path)) {
      by_age_.erase(it->second.age);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

void ResultCache::clear() {
  entries_.clear();
  by_age_.clear();
}

}  // namespace ollie
