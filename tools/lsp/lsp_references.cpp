// lsp_references: every use of the symbol at a position, from the file's language server.
#include "target.hpp"

using lsp::json;

int main() {
  return tool::run([](const tool::Args& args) {
    lsp::Target t = lsp::locate(args);
    std::string note = t.note;
    json params = t.params();
    params["context"] = {{"includeDeclaration", args.flag("include_declaration", true)}};
    const auto found = lsp::spots(lsp::ask(t, "textDocument/references", params, true, note));
    std::string out = note.empty() ? "" : note + "\n";
    if (found.empty()) return out + "no references found for `" + t.word + "` at " + t.where();
    lsp::Lines lines;
    std::vector<std::string> shown;
    for (const auto& s : found) shown.push_back(lines.show(s.path, s.line, s.character));
    return out + std::to_string(found.size()) + " references to `" + t.word + "`:\n" + lsp::capped(shown, 150, 8000, "references");
  });
}
