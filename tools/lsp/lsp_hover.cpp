// lsp_hover: the type, signature and documentation of the symbol at a position, as Markdown.
#include "target.hpp"

using lsp::json;

namespace {

std::string marked(const json& m) {
  if (m.is_string()) return m.get<std::string>();
  if (!m.is_object()) return {};
  const std::string value = m.value("value", "");
  if (m.contains("kind")) return value;  // MarkupContent: markdown or plain text
  return "```" + m.value("language", "") + "\n" + value + "\n```";  // MarkedString
}

}  // namespace

int main() {
  return tool::run([](const tool::Args& args) {
    lsp::Target t = lsp::locate(args);
    std::string note = t.note;
    const json r = lsp::ask(t, "textDocument/hover", t.params(), false, note);
    std::string text;
    const json contents = r.is_object() ? r.value("contents", json()) : json();
    if (contents.is_array())
      for (const auto& m : contents) text += (text.empty() ? "" : "\n\n") + marked(m);
    else
      text = marked(contents);
    std::string out = note.empty() ? "" : note + "\n\n";
    if (text.empty()) return out + "no hover information for `" + t.word + "` at " + t.where();
    constexpr std::size_t cap = 7000;
    if (text.size() > cap) {
      std::size_t cut = cap;
      while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) cut--;
      text = text.substr(0, cut) + "\n\n… " + std::to_string(text.size() - cut) + " more bytes not shown";
    }
    return out + text;
  });
}
