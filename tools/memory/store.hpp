#pragma once
/// The memory store: one SQLite database per project in `<data root>/optmem/`, named by the
/// SHA-256 of the project's path. The project is the nearest directory above the cwd (itself
/// included) that has a `.git` entry, else the cwd. Memories are rows of `memories`; the
/// external-content FTS5 table `memories_fts` indexes their text and tags for the search.

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memory {

inline constexpr std::size_t max_text = 6 * 1024;  // a recalled note fits the 7 KiB of recall's output whole
inline constexpr long long max_memories = 10000;

/// The project of the working directory: the git root found by stat() alone, else the cwd.
std::string project_root();
/// `${XDG_DATA_HOME:-$HOME/.local/share}/ollie/optmem`.
std::string store_dir();
/// `<store_dir>/<sha256 of project>.db`.
std::string store_file(const std::string& project);

/// A prepared statement; the step/column helpers throw tool::Error with SQLite's message.
class Stmt {
 public:
  Stmt(sqlite3* db, std::string_view sql);
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& bind(int i, std::string_view text);
  Stmt& bind(int i, long long n);
  /// true: a row is ready; false: done.
  bool step();
  long long integer(int col) const { return sqlite3_column_int64(s_, col); }
  std::string text(int col) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
};

/// The open database of one project.
class Db {
 public:
  /// Opens (create: creating the directory, the file and the schema as needed) the store of the
  /// cwd's project. Without `create`, a store that does not exist yet is std::nullopt.
  static std::optional<Db> open(bool create);
  ~Db();
  Db(Db&& o) noexcept : db_(o.db_), project_(std::move(o.project_)) { o.db_ = nullptr; }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& project() const { return project_; }
  void exec(const char* sql);
  long long count();

 private:
  Db(sqlite3* db, std::string project) : db_(db), project_(std::move(project)) {}
  sqlite3* db_;
  std::string project_;
};

/// "2026-12-01 11:03 UTC".
std::string format_time(long long unix_seconds);

}  // namespace memory
