#pragma once
/// clangd's compile database, kept out of the project: clangd writes its background index beside
/// the compile database it uses, so the bridge gives it a copy in its state directory
/// (`--compile-commands-dir`). The copy is the project's compile_commands.json (at the root, in
/// build/, or in a directory one level below either), or one made from the root's
/// compile_flags.txt, or from default flags, listing every C/C++ source under the root.

#include <string>

namespace lsp {

/// Writes `dir`/compile_commands.json for the project at `root`; returns the project file it
/// came from (empty: made from default flags), whose change means the database is stale.
std::string prepare_compile_db(const std::string& root, const std::string& dir);

}  // namespace lsp
