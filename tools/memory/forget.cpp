// memory_forget: deletes one note of the cwd's project by its id.
#include <string>

#include "store.hpp"
#include "tool.hpp"

int main() {
  return tool::run([](const tool::Args& args) {
    const auto id = args.opt_int("id", 1, 9007199254740991);
    if (!id) throw tool::Error("missing argument: id");
    const std::string no = "no memory #" + std::to_string(*id) + " in this project; memory_recall shows the ids";
    auto db = memory::Db::open(false);
    if (!db) throw tool::Error(no);
    memory::Stmt del(db->handle(), "DELETE FROM memories WHERE id = ?");
    del.bind(1, *id).step();
    if (sqlite3_changes(db->handle()) == 0) throw tool::Error(no);
    return "forgot #" + std::to_string(*id) + " (project " + db->project() + ")";
  });
}
