#pragma once
/// clangd's compile database, kept out of the project: clangd writes its background index beside
/// the compile database it uses, so the bridge gives it a copy in its state directory
/// (`--compile-commands-dir`). The copy is the project's compile_commands.json (at the root, in
/// build/, or in a directory one level below either), or one made from the root's
/// compile_flags.txt, or from default flags, listing every C/C++ source under the root.

#include <cstddef>
#include <string>

namespace lsp {

struct CompileDb {
  std::string from;          ///< the project file it came from (empty: default flags); its change makes it stale
  std::size_t sources = 0;   ///< its entries: with any, clangd's background index runs once it has read it
};

/// Writes `dir`/compile_commands.json for the project at `root`.
CompileDb prepare_compile_db(const std::string& root, const std::string& dir);

}  // namespace lsp
