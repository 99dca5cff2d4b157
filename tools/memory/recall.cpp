// memory_recall: searches the notes of the cwd's project (FTS5, best bm25 first).
#include <sstream>
#include <string>
#include <vector>

#include "store.hpp"
#include "tool.hpp"

namespace {

constexpr std::size_t max_output = 7 * 1024;  // under the 8192 bytes the engine keeps of a result (§8.3.4)

std::vector<std::string> words_of(const std::string& q) {
  std::vector<std::string> out;
  std::istringstream in(q);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

/// Each word as an FTS5 string (so no character of it is syntax), any of them matching.
std::string quoted(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += " OR ";
    out += '"';
    for (char c : w) (c == '"' ? out += "\"\"" : out += c);
    out += '"';
  }
  return out;
}

/// Whether the model wrote FTS5 syntax (phrases, prefixes, groups, columns, operators).
bool has_syntax(const std::string& q, const std::vector<std::string>& words) {
  if (q.find_first_of("\"*():^") != std::string::npos) return true;
  for (const auto& w : words)
    if (w == "AND" || w == "OR" || w == "NOT" || w.rfind("NEAR", 0) == 0) return true;
  return false;
}

struct Hit {
  long long id, created;
  std::string tags, text;
};

struct Result {
  long long total = 0;
  std::vector<Hit> hits;
};

Result search(memory::Db& db, const std::string& match, long long limit) {
  Result r;
  memory::Stmt count(db.handle(), "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?");
  count.bind(1, match);
  if (count.step()) r.total = count.integer(0);
  memory::Stmt s(db.handle(),
                 "SELECT m.id, m.created, m.tags, m.text FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
                 "WHERE memories_fts MATCH ? ORDER BY bm25(memories_fts, 1.0, 2.0), m.id DESC LIMIT ?");
  s.bind(1, match).bind(2, limit);
  while (s.step()) r.hits.push_back({s.integer(0), s.integer(1), s.text(2), s.text(3)});
  return r;
}

}  // namespace

int main() {
  return tool::run([](const tool::Args& args) {
    const std::string query = args.string("query");
    const long long limit = args.opt_int("limit", 1, 50).value_or(10);
    const auto words = words_of(query);
    if (words.empty()) throw tool::Error("invalid query: empty; give words to search for");

    auto db = memory::Db::open(false);
    if (!db) return "no memories stored for this project (" + memory::project_root() + ")";

    Result r;
    bool done = false;
    if (has_syntax(query, words)) {
      try {
        r = search(*db, query, limit);
        done = true;
      } catch (const tool::Error&) {
        // Not valid FTS5 (an unbalanced quote, "foo-bar", "error:"): searched as plain words.
      }
    }
    if (!done) r = search(*db, quoted(words), limit);

    const std::string where = "(project " + db->project() + ")";
    // The query as echoed: its first 100 bytes, so that the first hit, up to 6 KiB, still fits.
    std::string echoed = query;
    if (echoed.size() > 100) {
      std::size_t cut = 100;
      while (cut > 0 && (static_cast<unsigned char>(echoed[cut]) & 0xC0) == 0x80) cut--;  // a whole character
      echoed = echoed.substr(0, cut) + "…";
    }
    if (r.hits.empty())
      return "no memories match \"" + echoed + "\" " + where + "; " + std::to_string(db->count()) + " stored";
    std::string out = std::to_string(r.total) + (r.total == 1 ? " memory matches" : " memories match") + " \"" + echoed +
                      "\" " + where;
    if (r.total > static_cast<long long>(r.hits.size())) out += ", best " + std::to_string(r.hits.size()) + " shown";
    out += ":\n";
    std::size_t shown = 0;
    for (const auto& h : r.hits) {
      std::string entry = "\n#" + std::to_string(h.id) + " · " + memory::format_time(h.created);
      if (!h.tags.empty()) entry += " · tags: " + h.tags;
      entry += "\n" + h.text + "\n";
      if (shown > 0 && out.size() + entry.size() > max_output) break;
      out += entry;
      shown++;
    }
    if (shown < r.hits.size())
      out += "\n[" + std::to_string(r.hits.size() - shown) + " more hits not shown: output limit " +
             std::to_string(max_output / 1024) + " KiB; use a narrower query or a lower limit]\n";
    return out;
  });
}
