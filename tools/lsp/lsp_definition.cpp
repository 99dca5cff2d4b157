// lsp_definition: where the symbol at a position is defined, from the file's language server.
#include "target.hpp"

using lsp::json;

int main() {
  return tool::run([](const tool::Args& args) {
    lsp::Target t = lsp::locate(args);
    std::string note = t.note;
    const auto found = lsp::spots(lsp::ask(t, "textDocument/definition", t.params(), true, note));
    std::string out = note.empty() ? "" : note + "\n";
    if (found.empty()) return out + "no definition found for `" + t.word + "` at " + t.where();
    lsp::Lines lines;
    std::vector<std::string> shown;
    for (const auto& s : found) shown.push_back(lines.show(s.path, s.line, s.character));
    return out + lsp::capped(shown, 50, 8000, "definitions");
  });
}
