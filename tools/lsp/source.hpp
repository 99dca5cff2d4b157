#pragma once
/// Source files as the tools see them: their text and lines, positions in the three units in
/// play (the model's 1-based line and character, LSP's 0-based line and UTF-16 unit, bytes), and
/// file URIs.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lsp {

/// The largest source file the tools read or send to a server.
inline constexpr std::size_t max_source = 16u << 20;

/// A text file read whole: missing, not a regular file, over max_source or binary (a NUL byte)
/// → tool::Error naming the path as the model wrote it (`shown`).
class Source {
 public:
  Source(const std::string& path, const std::string& shown);
  const std::string& text() const { return text_; }
  std::size_t lines() const { return starts_.size(); }
  /// Line `n` (0-based) without its newline; empty past the end.
  std::string_view line(std::size_t n) const;
  /// Byte offset of LSP position (0-based line, UTF-16 column), clamped to the line.
  std::size_t offset(std::size_t line, std::size_t utf16) const;

 private:
  std::string text_;
  std::vector<std::size_t> starts_;
};

/// Reads a file for Source (errors as there).
std::string read_text(const std::string& path, const std::string& shown);

/// UTF-16 units of the first `chars` code points of `line` (1 char = 1 or 2 units).
std::size_t utf16_of_chars(std::string_view line, std::size_t chars);
/// Code points in the first `units` UTF-16 units of `line`.
std::size_t chars_of_utf16(std::string_view line, std::size_t units);
/// Byte offset in `line` of `units` UTF-16 units (clamped to the line).
std::size_t bytes_of_utf16(std::string_view line, std::size_t units);
/// UTF-16 units of the first `bytes` bytes of `line`.
std::size_t utf16_of_bytes(std::string_view line, std::size_t bytes);

/// file:// URI of an absolute path (percent-encoded), and back (nullopt: not a file URI).
std::string uri_of(const std::string& path);
std::optional<std::string> path_of(const std::string& uri);

/// `symbol` as a whole word in `line`: its byte offset, or nullopt.
std::optional<std::size_t> find_word(std::string_view line, std::string_view symbol);

}  // namespace lsp
