#pragma once
/// Which language server serves a file: a table from file extension to server command.

#include <string>
#include <vector>

namespace lsp {

struct Server {
  std::string name;                ///< the program, looked up on PATH
  std::vector<std::string> args;   ///< its arguments (clangd's are completed by the bridge)
  std::string install;             ///< what to install when it is missing
  bool builds = false;             ///< publishes diagnostics once a file is built (clangd): wait for them
};

/// LSP languageId of `path` by its extension ("plaintext" when unknown).
std::string language_of(const std::string& path);

/// Whether `path`'s extension is one `server` (as server_for made it) serves.
bool serves(const Server& server, const std::string& path);

/// The server for `path`'s extension, with `program` set to its absolute path. No server for the
/// extension, or the server is not installed → tool::Error naming what would be needed.
Server server_for(const std::string& path);

/// `program` found on PATH (an absolute path), or empty.
std::string find_program(const std::string& program);

/// The project root of `path`: the nearest ancestor holding `.git`, else `cwd`.
std::string project_root(const std::string& path, const std::string& cwd);

}  // namespace lsp
