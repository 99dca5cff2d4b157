#pragma once
/// Universal Ctags run on a file or a tree, its JSON output read as tags, bounded in time and count.

#include <string>
#include <vector>

namespace codeintel {

struct Tag {
  std::string name, path, kind, scope, signature;
  long line = 0, end = 0;  ///< end: last line of the definition, 0 when ctags does not know it
};

struct Scan {
  std::vector<Tag> tags;
  bool cut = false;       ///< stopped early: too many tags, or out of time
  std::string why;        ///< what stopped it
};

/// Tags of `path` (a file, or a directory scanned recursively). `keep` filters what is kept (to
/// bound memory on big trees). ctags missing or not Universal Ctags → tool::Error saying so.
template <class Keep>
Scan scan(const std::string& path, bool recursive, Keep keep);

Scan scan_with(const std::string& path, bool recursive, bool (*keep)(const Tag&, const void*), const void* ctx);

template <class Keep>
Scan scan(const std::string& path, bool recursive, Keep keep) {
  return scan_with(path, recursive, [](const Tag& t, const void* c) { return (*static_cast<const Keep*>(c))(t); }, &keep);
}

}  // namespace codeintel
