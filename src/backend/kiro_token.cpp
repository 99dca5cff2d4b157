// The Kiro CLI keeps its OAuth tokens in an SQLite key-value table (auth_kv); we only read.
#include <filesystem>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "backend/config.hpp"

namespace ollie::backend {

std::optional<std::string> read_kiro_token_db(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return std::nullopt;
  }
  std::optional<std::string> token;
  sqlite3_stmt* st = nullptr;
  const char* sql = "SELECT value FROM auth_kv WHERE key LIKE '%token' ORDER BY key DESC";
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK) {
    while (!token && sqlite3_step(st) == SQLITE_ROW) {
      const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      if (!text) continue;
      auto j = nlohmann::json::parse(text, nullptr, false);
      if (j.is_object() && j.contains("access_token") && j["access_token"].is_string())
        token = j["access_token"].get<std::string>();
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return token;
}

std::optional<std::string> find_kiro_token_db(const Environment& env) {
  // The Kiro CLI keeps its database under the data home, and some versions always under
  // ~/.local/share whatever XDG_DATA_HOME says.
  for (const auto& r : {p9::data_home(env), p9::home_dir(env) + "/.local/share"})
    for (const char* app : {"kiro-cli", "amazon-q"}) {
      const std::string p = r + "/" + app + "/data.sqlite3";
      std::error_code ec;
      if (std::filesystem::is_regular_file(p, ec) && read_kiro_token_db(p)) return p;
    }
  return std::nullopt;
}

}  // namespace ollie::backend
