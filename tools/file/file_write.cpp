// file_write: creates or replaces a file atomically. See file_write.meta.

#include "fsutil.hpp"
#include "target.hpp"
#include "tool.hpp"

using namespace filetool;

namespace {

std::string call(const tool::Args& args) {
  const std::string abs = file_to_write(args.string("path"));
  const std::string content = args.string("content");
  const Target t = resolve_target(abs);
  if (!t.st) make_parents(t.abs);
  replace_file(t.abs, content, t.st ? (t.st->st_mode & 07777) : new_file_mode());
  std::string out = t.st ? "overwrote " : "created ";
  out += shown(abs);
  if (t.abs != abs) out += " (through the symbolic link to " + shown(t.abs) + ")";
  const std::size_t lines = count_lines(content);
  out += ": " + std::to_string(content.size()) + (content.size() == 1 ? " byte, " : " bytes, ") + std::to_string(lines) +
         (lines == 1 ? " line" : " lines");
  return out;
}

}  // namespace

int main() { return tool::run(call); }
