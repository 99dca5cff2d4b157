#include "cdb.hpp"

#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "rpc.hpp"

namespace lsp {

namespace fs = std::filesystem;

namespace {

/// Sources listed when the database is made here; a bigger tree is cut (clangd guesses the
/// commands of the rest from their neighbours).
constexpr std::size_t max_sources = 20000;
/// The largest compile_commands.json copied.
constexpr std::uintmax_t max_db = 64u << 20;

bool is_source(const fs::path& p, bool& cxx) {
  static const std::array<std::string_view, 7> cxx_ext{".cc", ".cpp", ".cxx", ".c++", ".mm", ".C", ".cp"};
  const std::string ext = p.extension().string();
  for (auto e : cxx_ext)
    if (ext == e) return cxx = true;
  cxx = false;
  return ext == ".c" || ext == ".m";
}

std::string find_db(const fs::path& root) {
  std::error_code ec;
  for (const auto& d : {root, root / "build"})
    if (fs::is_regular_file(d / "compile_commands.json", ec)) return (d / "compile_commands.json").string();
  for (const auto& base : {root, root / "build"})  // e.g. out/ or build/debug/
    for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec) && fs::is_regular_file(it->path() / "compile_commands.json", ec))
        return (it->path() / "compile_commands.json").string();
  return {};
}

void write(const std::string& dir, const json& db) {
  fs::create_directories(dir);
  const std::string tmp = dir + "/compile_commands.json.tmp";
  std::ofstream(tmp, std::ios::trunc) << db.dump(1);
  fs::rename(tmp, dir + "/compile_commands.json");
}

}  // namespace

CompileDb prepare_compile_db(const std::string& root, const std::string& dir) {
  std::error_code ec;
  if (const std::string found = find_db(root); !found.empty() && fs::file_size(found, ec) <= max_db) {
    std::ifstream in(found);
    json db = json::parse(in, nullptr, false);
    if (db.is_array()) {
      // Relative directories are relative to the file's own directory: made absolute for the copy.
      const fs::path base = fs::path(found).parent_path();
      for (auto& entry : db)
        if (entry.is_object() && entry.contains("directory") && entry["directory"].is_string() &&
            fs::path(entry["directory"].get<std::string>()).is_relative())
          entry["directory"] = (base / entry["directory"].get<std::string>()).lexically_normal().string();
      write(dir, db);
      return {found, db.size()};
    }
  }
  std::vector<std::string> flags;
  std::string from;
  if (const fs::path cf = fs::path(root) / "compile_flags.txt"; fs::is_regular_file(cf, ec)) {
    std::ifstream in(cf);
    for (std::string line; std::getline(in, line) && flags.size() < 1000;) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) flags.push_back(line);
    }
    from = cf.string();
  }
  json db = json::array();
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end && db.size() < max_sources; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_directory(ec)) {
      if (name.front() == '.' || name == "node_modules") it.disable_recursion_pending();
      continue;
    }
    bool cxx = false;
    if (!it->is_regular_file(ec) || !is_source(it->path(), cxx)) continue;
    json args = json::array({cxx ? "clang++" : "clang"});
    for (const auto& f : flags) args.push_back(f);
    args.push_back("-c");
    args.push_back(it->path().string());
    db.push_back({{"directory", root}, {"file", it->path().string()}, {"arguments", args}});
  }
  write(dir, db);
  return {from, db.size()};
}

}  // namespace lsp
