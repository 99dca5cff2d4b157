#include "store.hpp"

#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "tool.hpp"

namespace memory {

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr) != 1)
    throw tool::Error("cannot hash the project path (libcrypto failed)");
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; i++) (out += hex[md[i] >> 4]) += hex[md[i] & 15];
  return out;
}

/// mkdir -p, each missing level 0700.
void make_dirs(const std::string& dir) {
  for (std::size_t i = 1; i <= dir.size(); i++) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
      throw tool::Error("cannot create the memory store directory " + part + ": " + std::strerror(errno));
  }
}

// Version 1 of the schema. Text and tags are indexed with the porter stemmer, so "databases"
// finds "database".
const char* const schema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created INTEGER NOT NULL,
  tags TEXT NOT NULL,
  text TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
  text, tags, content='memories', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2');
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
  INSERT INTO memories_fts(rowid, text, tags) VALUES (new.id, new.text, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
  INSERT INTO memories_fts(memories_fts, rowid, text, tags) VALUES ('delete', old.id, old.text, old.tags);
END;
PRAGMA user_version = 1;
)sql";

}  // namespace

std::string project_root() {
  const std::string cwd = tool::absolute(".");
  for (std::string dir = cwd;;) {
    if (exists(dir + (dir == "/" ? ".git" : "/.git"))) return dir;
    if (dir == "/") return cwd;
    const auto slash = dir.rfind('/');
    dir = slash == 0 ? "/" : dir.substr(0, slash);
  }
}

std::string store_dir() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  std::string base;
  if (xdg && xdg[0] == '/') {
    base = xdg;
  } else {
    const char* home = std::getenv("HOME");
    if (!home || home[0] != '/') throw tool::Error("cannot find the data root: neither XDG_DATA_HOME nor HOME is set");
    base = std::string(home) + "/.local/share";
  }
  return base + "/ollie/optmem";
}

std::string store_file(const std::string& project) { return store_dir() + "/" + sha256_hex(project) + ".db"; }

Stmt::Stmt(sqlite3* db, std::string_view sql) : db_(db) {
  if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &s_, nullptr) != SQLITE_OK)
    throw tool::Error(std::string("memory store: ") + sqlite3_errmsg(db));
}

Stmt& Stmt::bind(int i, std::string_view text) {
  sqlite3_bind_text(s_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}

Stmt& Stmt::bind(int i, long long n) {
  sqlite3_bind_int64(s_, i, n);
  return *this;
}

bool Stmt::step() {
  const int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw tool::Error(std::string("memory store: ") + sqlite3_errmsg(db_));
}

std::string Stmt::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
  return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col))) : std::string();
}

std::optional<Db> Db::open(bool create) {
  std::string project = project_root();
  const std::string file = store_file(project);
  if (!create && !exists(file)) return std::nullopt;
  if (create) make_dirs(store_dir());
  sqlite3* h = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | (create ? SQLITE_OPEN_CREATE : 0);
  if (sqlite3_open_v2(file.c_str(), &h, flags, nullptr) != SQLITE_OK) {
    const std::string why = h ? sqlite3_errmsg(h) : "out of memory";
    sqlite3_close(h);
    throw tool::Error("cannot open the memory store " + file + ": " + why);
  }
  Db db(h, std::move(project));
  // Concurrent calls (several agents of a session) wait for each other's writes.
  constexpr int busy_ms = 5000;
  sqlite3_busy_timeout(h, busy_ms);
  // The first calls of a new store race to switch it to WAL, and SQLite answers a loser
  // SQLITE_BUSY at once instead of waiting (it skips the busy handler where a wait could
  // deadlock: two readers both asking for the write lock), so the switch is tried again
  // within the same bound. Seen as `database is locked` in about 1 of 150 concurrent first calls.
  int rc = SQLITE_OK;
  for (int ms = 0; (rc = sqlite3_exec(h, "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr)) == SQLITE_BUSY && ms < busy_ms; ms += 5)
    ::usleep(5000);
  if (rc != SQLITE_OK) throw tool::Error(std::string("memory store: ") + sqlite3_errmsg(h));
  // The version is read in a statement of its own, done before the write: a read transaction
  // still open would make BEGIN IMMEDIATE fail at once (SQLITE_BUSY, no busy wait) while
  // another call creates the schema.
  long long version = 0;
  if (Stmt v(h, "PRAGMA user_version"); v.step()) version = v.integer(0);
  if (version < 1) {
    db.exec("BEGIN IMMEDIATE");
    db.exec(schema);
    Stmt(h, "INSERT OR IGNORE INTO meta(key, value) VALUES ('project', ?)").bind(1, db.project_).step();
    db.exec("COMMIT");
  }
  return db;
}

Db::~Db() { sqlite3_close(db_); }

void Db::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string why = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw tool::Error("memory store: " + why);
  }
}

long long Db::count() {
  Stmt s(db_, "SELECT count(*) FROM memories");
  s.step();
  return s.integer(0);
}

std::string format_time(long long unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm {};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

}  // namespace memory
