#pragma once
/// file_grep's two engines (ripgrep, driven as a child process, and a tree walk with POSIX
/// regexec) and what they share: the query, and the collector that caps, sorts and prints the
/// results, so both engines print the same thing.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace filetool {

enum class Mode { content, files, count };

struct Query {
  std::string pattern;
  std::string root;       // absolute: a directory, or the one file to search
  bool root_is_file = false;
  std::string glob;       // file-name glob, "" = every file
  bool shallow = false;   // only the files directly in root (a glob `src/*.ts`)
  int context = 0;
  bool ignore_case = false;
  Mode mode = Mode::content;
};

struct Line {
  std::size_t number;
  bool match;
  std::string text;  // already cut to its display length
};

/// The lines of one file: `matches` counts every matching line, `lines` holds those kept.
struct FileHits {
  std::size_t matches = 0;
  std::vector<Line> lines;
};

constexpr std::size_t max_matches = 200;     // matching lines printed (content)
constexpr std::size_t max_files = 1000;      // files printed (files, count)
// Bytes printed: under the 8192 the engine keeps of a result (§8.3.4 cuts a longer one in its
// middle, so matches would go unseen while the count of those not shown left them out).
constexpr std::size_t max_bytes = 7 * 1024;
constexpr std::size_t max_line_bytes = 400;  // bytes of one printed line

/// `text` cut to max_line_bytes at a character boundary, with a mark.
std::string cut_line(std::string_view text);

/// Results by path (as shown), bounded: files that sort after what can be printed are dropped
/// as they come, counted.
class Collector {
 public:
  explicit Collector(Mode mode) : mode_(mode) {}
  /// Adds one file's hits (files with no match are not added). `lines` may be any prefix.
  void add(std::string path, FileHits hits);
  std::string format(const Query& q) const;
  bool empty() const { return files_.empty(); }

 private:
  Mode mode_;
  std::map<std::string, FileHits> files_;
  std::size_t kept_matches_ = 0;
  std::size_t dropped_files_ = 0, dropped_matches_ = 0;
};

/// Run the query into `out`; a bad regex is a tool::Error.
void grep_walk(const Query& q, Collector& out);
void grep_rg(const Query& q, Collector& out);

}  // namespace filetool
