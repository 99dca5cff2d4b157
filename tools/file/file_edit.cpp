// file_edit: replaces an exact string in a file, atomically, and shows the diff. See file_edit.meta.

#include <algorithm>

#include "diff.hpp"
#include "fsutil.hpp"
#include "target.hpp"
#include "tool.hpp"

using namespace filetool;

namespace {

constexpr std::size_t max_file = 64 << 20;
constexpr std::size_t max_diff = 7 * 1024;  // under the 8192 bytes the engine keeps of a result (§8.3.4)
constexpr std::size_t lines_listed = 10;

std::string replace_all_of(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  for (std::size_t i = 0;;) {
    const auto at = s.find(from, i);
    out += s.substr(i, at == std::string_view::npos ? std::string_view::npos : at - i);
    if (at == std::string_view::npos) return out;
    out += to;
    i = at + from.size();
  }
}

std::string to_crlf(std::string_view s) { return replace_all_of(replace_all_of(s, "\r\n", "\n"), "\n", "\r\n"); }

std::size_t count_of(std::string_view s, std::string_view what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string_view::npos; at = s.find(what, at + what.size())) n++;
  return n;
}

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Why old_string is not there, with the closest thing that is.
std::string not_found(const std::string& name, std::string_view text, std::string_view old) {
  const auto lines = split_lines(text);
  std::vector<std::string_view> want;
  for (auto l : split_lines(old)) want.push_back(trim(l));
  while (!want.empty() && want.back().empty()) want.pop_back();
  std::size_t lead = 0;
  while (lead < want.size() && want[lead].empty()) lead++;
  std::string out = "old_string not found in " + name;
  if (lead < want.size()) {
    // Lines compared at most: a start at every line, each compared on for as long as it agrees, is
    // quadratic (4,000 lines of `x` against a file of 400,000 ran past the call's timeout).
    std::size_t budget = 10'000'000;
    for (std::size_t i = 0; i + (want.size() - lead) <= lines.size() && budget > 0; i++) {
      std::size_t k = lead;
      while (k < want.size() && budget > 0 && trim(lines[i + k - lead]) == want[k]) k++, budget--;
      budget -= budget > 0;
      if (k == want.size())
        return out + "; text that differs only in whitespace or indentation starts at line " + std::to_string(i + 1) +
               ": copy it exactly as file_read shows it (after the line number and tab)";
    }
    for (std::size_t i = 0; i < lines.size(); i++)
      if (lines[i].find(want[lead]) != std::string_view::npos)
        return out + "; its first line occurs at line " + std::to_string(i + 1) +
               " but the lines after it differ: read the file again with file_read";
  }
  return out + "; read the file again with file_read (it may have changed) and copy the text exactly";
}

std::string call(const tool::Args& args) {
  const std::string abs = file_to_write(args.string("path"));
  std::string old_s = args.string("old_string"), new_s = args.string("new_string");
  const bool all = args.flag("replace_all", false);
  const Target t = resolve_target(abs);
  // Both empty on a missing file: an empty file made, as the prompt promises.
  if (old_s == new_s && (t.st || !old_s.empty()))
    throw tool::Error("old_string and new_string are the same: there is nothing to change");
  const std::string name = shown(abs);

  if (!t.st) {
    if (!old_s.empty())
      throw tool::Error("file not found: " + name + "; to create a file, use file_write (or file_edit with an empty old_string)");
    make_parents(t.abs);
    replace_file(t.abs, new_s, new_file_mode());
    const auto added = split_lines(new_s);
    return "created " + name + ": " + std::to_string(added.size()) + (added.size() == 1 ? " line\n" : " lines\n") +
           unified_diff("/dev/null", "b/" + name, {}, {Change{0, {}, added}}, max_diff, {false, unterminated(new_s)});
  }

  const std::string text = slurp(t.abs, max_file);
  if (binary_block(std::string_view(text).substr(0, 64 * 1024), text.size() > 64 * 1024))
    throw tool::Error("binary file (" + human_size(static_cast<long long>(text.size())) + "): " + name +
                      "; file_edit edits text files only");
  if (old_s.empty() && !text.empty())
    throw tool::Error("old_string is empty but " + name +
                      " is not: give the text to replace, or use file_write to replace the whole file");

  // A file whose lines end in CRLF keeps them: the strings are given the file's line endings.
  const std::size_t crlf = count_of(text, "\r\n");
  if (crlf > 0 && crlf * 2 >= count_of(text, "\n")) {
    old_s = to_crlf(old_s);
    new_s = to_crlf(new_s);
  }

  if (old_s.empty()) {  // an empty file filled
    replace_file(t.abs, new_s, t.st->st_mode & 07777);
    const auto added = split_lines(new_s);
    return "edited " + name + ": filled the empty file, +" + std::to_string(added.size()) + " lines\n" +
           unified_diff("a/" + name, "b/" + name, {}, {Change{0, {}, added}}, max_diff, {false, unterminated(new_s)});
  }
  std::vector<std::size_t> at;
  for (auto p = text.find(old_s); p != std::string::npos; p = text.find(old_s, p + old_s.size())) at.push_back(p);
  if (at.empty()) throw tool::Error(not_found(name, text, old_s));

  std::vector<std::size_t> starts{0};  // line starts
  for (std::size_t i = 0; i < text.size(); i++)
    if (text[i] == '\n' && i + 1 < text.size()) starts.push_back(i + 1);
  auto line_of = [&](std::size_t off) {
    return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), off) - starts.begin()) - 1;
  };
  if (at.size() > 1 && !all) {
    std::string where;
    for (std::size_t i = 0; i < at.size() && i < lines_listed; i++) where += (i ? ", " : "") + std::to_string(line_of(at[i]) + 1);
    if (at.size() > lines_listed) where += ", …";
    throw tool::Error("old_string matches " + std::to_string(at.size()) + " times in " + name + " (at lines " + where +
                      "): include more surrounding lines to make it unique, or set replace_all to true");
  }

  // The new text, and per group of touched lines the old and new lines for the diff.
  std::string result;
  std::vector<std::string> new_regions;
  struct Region {
    std::size_t first_line, begin, end;
  };
  std::vector<Region> regions;
  auto line_end = [&](std::size_t off) {  // the offset after the line holding `off`
    const std::size_t l = line_of(off);
    return l + 1 < starts.size() ? starts[l + 1] : text.size();
  };
  std::size_t copied = 0;
  for (std::size_t i = 0; i < at.size();) {
    Region r{line_of(at[i]), starts[line_of(at[i])], 0};
    r.end = line_end(at[i] + old_s.size() - 1);
    std::string region;
    std::size_t pos = r.begin;
    for (;;) {
      while (i < at.size() && at[i] < r.end) {
        region.append(text, pos, at[i] - pos);
        region += new_s;
        pos = at[i] + old_s.size();
        r.end = std::max(r.end, line_end(pos - 1));
        i++;
      }
      // A replacement that leaves the last line without its newline joins the next line.
      const bool open = pos < r.end ? text[r.end - 1] != '\n' : !region.empty() && region.back() != '\n';
      if (!open || r.end >= text.size()) break;
      r.end = line_end(r.end);
    }
    region.append(text, pos, r.end - pos);
    result.append(text, copied, r.begin - copied);
    result += region;
    copied = r.end;
    regions.push_back(r);
    new_regions.push_back(std::move(region));
  }
  result.append(text, copied, std::string::npos);

  // The reply is made before the write: a call cut short by its timeout has changed nothing,
  // so a model told it failed does not repeat an edit that was made.
  const auto old_all = split_lines(text);
  std::vector<Change> changes;
  std::size_t removed = 0, added = 0;
  for (std::size_t k = 0; k < regions.size(); k++) {
    Change c{regions[k].first_line, split_lines(std::string_view(text).substr(regions[k].begin, regions[k].end - regions[k].begin)),
             split_lines(new_regions[k])};
    removed += c.old_lines.size();
    added += c.new_lines.size();
    changes.push_back(std::move(c));
  }
  std::string out = "edited " + name + ": " + std::to_string(at.size()) + (at.size() == 1 ? " replacement" : " replacements") +
                    ", -" + std::to_string(removed) + " +" + std::to_string(added) + " lines\n" +
                    unified_diff("a/" + name, "b/" + name, old_all, changes, max_diff, {unterminated(text), unterminated(result)});
  replace_file(t.abs, result, t.st->st_mode & 07777);
  return out;
}

}  // namespace

int main() { return tool::run(call); }
