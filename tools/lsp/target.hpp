#pragma once
/// What the four lsp_* tools share: the position they were given (`path`, `line`, and `symbol` or
/// `column`), the request to the file's language server, and results shown as
/// `path:line:col: source line`.

#include <map>
#include <memory>
#include <string>

#include "rpc.hpp"
#include "servers.hpp"
#include "source.hpp"
#include "tool.hpp"

namespace lsp {

struct Target {
  std::string path;   ///< absolute
  std::string shown;  ///< as the model should read it
  std::unique_ptr<Source> source;
  Server server;
  std::string root;
  std::size_t line = 0;   ///< 0-based
  std::size_t byte = 0;   ///< byte offset of the position in its line
  std::string word;       ///< the identifier at the position (empty if none)
  std::string note;       ///< said before the result (e.g. the symbol was on a nearby line)

  /// `path:line:col` of the position, 1-based as the model gave it.
  std::string where() const;
  /// The LSP params {textDocument, position}.
  json params() const;
};

/// Reads and checks the arguments; errors name the argument and what to give instead.
Target locate(const tool::Args& args);

/// Sends `method` at the target to its bridge; the result, with any note of the bridge appended
/// to `note`.
json ask(const Target& t, const std::string& method, json params, bool ready, std::string& note);

/// `path` relative to the working directory when it is inside it, else absolute.
std::string shown_path(const std::string& path);

/// Lines of files, read once each, for showing results.
class Lines {
 public:
  /// Line `n` (0-based) of `path`, or nullptr when the file cannot be read.
  const Source* file(const std::string& path);
  /// `shown:line:col: text` for an LSP position in `path`.
  std::string show(const std::string& path, std::size_t line, std::size_t utf16);

 private:
  std::map<std::string, std::unique_ptr<Source>> files_;
};

/// The locations of a definition or references result (Location, Location[] or LocationLink[]),
/// as (path, line, utf16 column), sorted and without duplicates.
struct Spot {
  std::string path;
  std::size_t line = 0, character = 0;
  auto operator<=>(const Spot&) const = default;
};
std::vector<Spot> spots(const json& result);

/// Joins lines, at most `cap` of them and about `bytes` bytes, saying how many more were cut.
std::string capped(const std::vector<std::string>& lines, std::size_t cap, std::size_t bytes, const std::string& what);

}  // namespace lsp
