#include "toolsrv/catalog.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <regex>
#include <string_view>

#include "toolsrv/fd.hpp"
#include "toolsrv/smallfile.hpp"

namespace toolsrv {
namespace {

bool valid_name(const std::string& name) {
  static const std::regex re("^[A-Za-z0-9_-]{1,64}$");
  return std::regex_match(name, re);
}

std::vector<std::string> meta_names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string file = e->d_name;
    if (file.size() > 5 && file.compare(file.size() - 5, 5, ".meta") == 0) names.push_back(file.substr(0, file.size() - 5));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<std::string> tool_dirs(const std::string& tools_path, const std::string& config_root,
                                   std::vector<std::string>* warnings) {
  std::vector<std::string> dirs;
  // A relative directory would be taken against each call's cwd, which the model writes (§7.2.2).
  if (tools_path.empty()) {
    const auto dir = config_root + "/tools";
    if (dir.front() == '/') dirs.push_back(dir);
    else if (warnings) warnings->push_back("tool directory not absolute, skipped: " + dir);
    return dirs;
  }
  std::string_view rest = tools_path;
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const std::string entry(rest.substr(0, colon));
    rest.remove_prefix(colon == std::string_view::npos ? rest.size() : colon + 1);
    if (entry.empty()) continue;
    if (entry.front() != '/') {
      if (warnings) warnings->push_back("tool directory not absolute, skipped: " + entry);
      continue;
    }
    dirs.push_back(entry);
  }
  return dirs;
}

FileStamp FileStamp::of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  auto ns = [](const timespec& t) { return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; };
  return {st.st_dev, st.st_ino, st.st_mode, st.st_size, ns(st.st_mtim), ns(st.st_ctim), true};
}

namespace {

/// A `.meta`'s text: a regular file of at most max_meta_bytes (smallfile.hpp).
p9::Result<std::string> read_meta(const std::string& path) {
  auto f = read_small_file(AT_FDCWD, path.c_str(), 0, max_meta_bytes);
  switch (f.fail) {
    case SmallFile::Fail::none: return std::move(f.text);
    case SmallFile::Fail::not_regular: return p9::error("cannot read " + path + ": not a regular file");
    case SmallFile::Fail::too_large: return p9::error(path + ": too large (limit " + std::to_string(max_meta_bytes) + " bytes)");
    case SmallFile::Fail::open:
    case SmallFile::Fail::read: break;
  }
  return p9::error("cannot read " + path + ": " + std::strerror(f.error));
}

/// The tool `name` of `dir` as its files are now; nullopt when `<name>.meta` is not a regular file.
std::optional<CatalogEntry> read_entry(const std::string& dir, const std::string& name, const HostFacts& host) {
  CatalogEntry e;
  e.name = name;
  e.meta_path = dir + "/" + name + ".meta";
  e.meta_stamp = FileStamp::of(e.meta_path);
  if (!e.meta_stamp.exists || !S_ISREG(e.meta_stamp.mode)) return std::nullopt;  // a directory called x.meta is not a tool
  if (!valid_name(name)) {
    e.error = "invalid tool name: must match ^[A-Za-z0-9_-]{1,64}$";
    return e;
  }
  auto text = read_meta(e.meta_path);
  if (!text) {
    e.error = text.ename();
    return e;
  }
  e.exe_stamp = FileStamp::of(dir + "/" + name);
  const bool has_exe = e.exe_stamp.exists && S_ISREG(e.exe_stamp.mode) && (e.exe_stamp.mode & 0111) != 0;
  auto tool = parse_meta(name, dir, *text, has_exe, host);
  if (tool) e.tool = std::move(*tool);
  else e.error = tool.ename();
  return e;
}

std::string dir_of(const std::string& meta_path) { return meta_path.substr(0, meta_path.rfind('/')); }

}  // namespace

std::vector<CatalogEntry> scan_tools(const std::vector<std::string>& dirs, const HostFacts& host) {
  std::vector<CatalogEntry> out;
  std::set<std::string> seen;
  for (const auto& dir : dirs) {
    for (const auto& name : meta_names(dir)) {
      if (seen.count(name)) continue;
      auto e = read_entry(dir, name, host);
      if (!e) continue;
      seen.insert(name);
      out.push_back(std::move(*e));
    }
  }
  std::sort(out.begin(), out.end(), [](const CatalogEntry& a, const CatalogEntry& b) { return a.name < b.name; });
  return out;
}

std::shared_ptr<const std::vector<CatalogEntry>> refreshed(const std::vector<CatalogEntry>& catalog,
                                                           const std::set<std::string>& names,
                                                           const std::vector<std::string>& dirs, const HostFacts& host) {
  std::shared_ptr<std::vector<CatalogEntry>> out;
  for (const auto& name : names) {
    const auto* e = find_entry(catalog, name);
    if (!e) {
      for (const auto& dir : dirs) {
        auto back = read_entry(dir, name, host);
        if (!back) continue;
        if (!out) out = std::make_shared<std::vector<CatalogEntry>>(catalog);
        const auto at = std::lower_bound(out->begin(), out->end(), name,
                                         [](const CatalogEntry& x, const std::string& n) { return x.name < n; });
        out->insert(at, std::move(*back));
        break;
      }
      continue;
    }
    const auto dir = dir_of(e->meta_path);
    if (FileStamp::of(e->meta_path) == e->meta_stamp && FileStamp::of(dir + "/" + name) == e->exe_stamp) continue;
    if (!out) out = std::make_shared<std::vector<CatalogEntry>>(catalog);
    auto fresh = read_entry(dir, name, host);
    const auto it = std::find_if(out->begin(), out->end(), [&](const CatalogEntry& x) { return x.name == name; });
    if (fresh) *it = std::move(*fresh);
    else out->erase(it);
  }
  return out;
}

nlohmann::ordered_json catalog_json(const std::vector<CatalogEntry>& entries) {
  auto list = nlohmann::ordered_json::array();
  for (const auto& e : entries) {
    if (e.tool) list.push_back(tool_json(*e.tool));
    else list.push_back({{"name", e.name}, {"error", e.error}});
  }
  return list;
}

const CatalogEntry* find_entry(const std::vector<CatalogEntry>& catalog, const std::string& name) {
  const auto it = std::find_if(catalog.begin(), catalog.end(), [&](const CatalogEntry& e) { return e.name == name; });
  return it == catalog.end() ? nullptr : &*it;
}

p9::Result<void> Registry::load(const std::string& agent, const std::vector<std::string>& names,
                                const std::vector<CatalogEntry>& catalog) {
  for (const auto& name : names) {
    const auto* e = find_entry(catalog, name);
    if (!e) return p9::error("unknown tool: " + name);
    if (e->error == not_available_error) return p9::error("tool not available on this host: " + name);
    if (!e->tool) return p9::error("invalid tool: " + name + ": " + e->error);
  }
  auto& set = loaded_[agent];
  set.insert(names.begin(), names.end());
  return {};
}

void Registry::unload(const std::string& agent, const std::vector<std::string>& names) {
  const auto it = loaded_.find(agent);
  if (it == loaded_.end()) return;
  for (const auto& n : names) it->second.erase(n);
}

void Registry::forget(const std::string& agent) { loaded_.erase(agent); }

const std::set<std::string>& Registry::names(const std::string& agent) const {
  static const std::set<std::string> none;
  const auto it = loaded_.find(agent);
  return it == loaded_.end() ? none : it->second;
}

bool Registry::loaded(const std::string& agent, const std::string& name) const {
  const auto it = loaded_.find(agent);
  return it != loaded_.end() && it->second.count(name) > 0;
}

nlohmann::ordered_json Registry::agent_json(const std::string& agent, const std::vector<CatalogEntry>& catalog,
                                            std::vector<std::string>* dropped) const {
  auto list = nlohmann::ordered_json::array();
  const auto it = loaded_.find(agent);
  if (it == loaded_.end()) return list;
  for (const auto& name : it->second) {  // std::set: sorted by name
    const auto* e = find_entry(catalog, name);
    if (e && e->tool) list.push_back(tool_json(*e->tool));
    else if (dropped) dropped->push_back(name);
  }
  return list;
}

}  // namespace toolsrv
