#include "servers.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "tool.hpp"

namespace lsp {

namespace {

struct Entry {
  std::vector<std::string_view> extensions;
  std::string_view language;
  Server server;
};

Server clangd() { return {"clangd", {}, "clangd (Debian: apt install clangd)", true}; }

std::string extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

const std::vector<Entry>& table() {
  static const std::vector<Entry> t{
      {{".c", ".h"}, "c", clangd()},
      {{".cc", ".cpp", ".cxx", ".c++", ".hh", ".hpp", ".hxx", ".h++", ".ipp", ".tcc", ".inl"},
       "cpp",
       clangd()},
      {{".m", ".mm"}, "objective-c", clangd()},
      {{".py", ".pyi"}, "python", {"pylsp", {}, "pylsp (Debian: apt install python3-pylsp)"}},
      {{".go"}, "go", {"gopls", {}, "gopls (Debian: apt install gopls)"}},
      {{".rs"}, "rust", {"rust-analyzer", {}, "rust-analyzer (rustup component add rust-analyzer)"}},
      {{".ts", ".tsx", ".mts", ".cts"},
       "typescript",
       {"typescript-language-server", {"--stdio"},
        "typescript-language-server (npm install -g typescript-language-server typescript)"}},
      {{".js", ".jsx", ".mjs", ".cjs"},
       "javascript",
       {"typescript-language-server", {"--stdio"},
        "typescript-language-server (npm install -g typescript-language-server typescript)"}},
  };
  return t;
}

}  // namespace

std::string find_program(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    if (dir.empty() || dir.front() != '/') continue;
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(candidate)) return candidate;
  }
  return {};
}

std::string language_of(const std::string& path) {
  const std::string ext = extension(path);
  for (const auto& e : table())
    for (const auto& x : e.extensions)
      if (x == ext) return std::string(e.language);
  return "plaintext";
}

bool serves(const Server& server, const std::string& path) {
  const std::string ext = extension(path);
  const std::string program = std::filesystem::path(server.name).filename().string();
  for (const auto& e : table())
    for (const auto& x : e.extensions)
      if (x == ext) return e.server.name == program;
  return false;
}

Server server_for(const std::string& path) {
  const std::string ext = extension(path);
  for (const auto& e : table())
    for (const auto& x : e.extensions)
      if (x == ext) {
        Server s = e.server;
        const std::string found = find_program(s.name);
        if (found.empty())
          throw tool::Error("no language server for " + path + ": " + std::string(e.language) + " files need " +
                            s.install + ", and " + s.name + " is not on PATH");
        s.name = found;
        return s;
      }
  throw tool::Error("no language server for " + path + (ext.empty() ? " (a file without an extension)" : " (" + ext + " files)") +
                    ": known are C/C++/Objective-C (clangd), Python (pylsp), Go (gopls), Rust (rust-analyzer), "
                    "TypeScript/JavaScript (typescript-language-server); use codeintel or grep instead");
}

std::string project_root(const std::string& path, const std::string& cwd) {
  std::error_code ec;
  for (auto dir = std::filesystem::path(path).parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / ".git", ec)) return dir.string();
    if (dir == dir.root_path()) break;
  }
  return cwd;
}

}  // namespace lsp
