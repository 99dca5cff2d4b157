#pragma once
/// A unified diff (3 lines of context) built from known changes, as file_edit makes them: no
/// diff algorithm is needed when the replaced spans are known.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace filetool {

/// Old lines [first, first + old_lines.size()) became new_lines.
struct Change {
  std::size_t first;
  std::vector<std::string_view> old_lines, new_lines;
};

/// Lines of `text` without their newlines (a final line needs none).
std::vector<std::string_view> split_lines(std::string_view text);

/// Whether the old and the new text end in a line without its newline: the diff then says
/// `\ No newline at end of file` after that line, as diff(1) and git do.
struct Unterminated {
  bool old_text, new_text;
};

/// Whether `text` ends in a line without its newline (it is not empty and its last byte is not one).
bool unterminated(std::string_view text);

/// `--- a/<name>` / `+++ b/<name>` and the hunks, at most `cap` bytes (then a line saying how
/// many diff lines were cut). `changes` are in order and do not overlap. Old "" = a new file.
std::string unified_diff(const std::string& old_name, const std::string& new_name, const std::vector<std::string_view>& old_all,
                         const std::vector<Change>& changes, std::size_t cap, Unterminated ends);

}  // namespace filetool
