// memory_remember: stores one note for the cwd's project and answers its id.
#include <ctime>
#include <set>
#include <string>
#include <vector>

#include "store.hpp"
#include "tool.hpp"

namespace {

constexpr std::size_t max_tags = 16, max_tag = 64;

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

/// The tags joined with ", ", in the order given, duplicates dropped.
std::string tags_of(const tool::Args& args) {
  if (!args.has("tags")) return "";
  const auto& v = args.raw().at("tags");
  if (!v.is_array()) throw tool::Error("invalid tags: must be an array of strings");
  if (v.size() > max_tags) throw tool::Error("invalid tags: at most " + std::to_string(max_tags) + " tags");
  std::set<std::string> seen;
  std::string out;
  for (const auto& t : v) {
    if (!t.is_string()) throw tool::Error("invalid tags: must be an array of strings");
    const std::string tag = trim(t.get<std::string>());
    if (tag.empty()) throw tool::Error("invalid tags: a tag is empty");
    if (tag.size() > max_tag) throw tool::Error("invalid tags: a tag is longer than " + std::to_string(max_tag) + " bytes");
    if (tag.find(',') != std::string::npos) throw tool::Error("invalid tags: a tag contains a comma; give each tag as its own string");
    if (!seen.insert(tag).second) continue;
    if (!out.empty()) out += ", ";
    out += tag;
  }
  return out;
}

}  // namespace

int main() {
  return tool::run([](const tool::Args& args) {
    const std::string text = trim(args.string("text"));
    if (text.empty()) throw tool::Error("invalid text: empty; give the note to remember");
    if (text.size() > memory::max_text)
      throw tool::Error("invalid text: " + std::to_string(text.size()) + " bytes, the limit is " +
                        std::to_string(memory::max_text) + "; store a shorter summary");
    const std::string tags = tags_of(args);

    auto db = memory::Db::open(true);
    db->exec("BEGIN IMMEDIATE");
    if (const long long n = db->count(); n >= memory::max_memories) {
      db->exec("ROLLBACK");
      throw tool::Error("memory full: this project has " + std::to_string(n) + " memories (the limit is " +
                        std::to_string(memory::max_memories) + "); forget some with memory_forget first");
    }
    memory::Stmt ins(db->handle(), "INSERT INTO memories(created, tags, text) VALUES (?, ?, ?)");
    ins.bind(1, static_cast<long long>(std::time(nullptr))).bind(2, tags).bind(3, text).step();
    const long long id = sqlite3_last_insert_rowid(db->handle());
    db->exec("COMMIT");
    return "remembered #" + std::to_string(id) + " (project " + db->project() + ")";
  });
}
