#include "prompt.hpp"

#include <cctype>
#include <fstream>
#include <sstream>

namespace acp {
namespace {

using json = nlohmann::json;

// %XX escapes of a file:// URI's path.
std::string uri_path(const std::string& uri) {
  std::string p = uri.substr(7), out;
  if (auto slash = p.find('/'); slash != 0) p = slash == std::string::npos ? "" : p.substr(slash);  // file://host/path
  for (std::size_t i = 0; i < p.size(); i++) {
    if (p[i] == '%' && i + 2 < p.size() && std::isxdigit(static_cast<unsigned char>(p[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(p[i + 2]))) {
      out += static_cast<char>(std::stoi(p.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += p[i];
    }
  }
  return out;
}

std::string file_context(const std::string& path, const std::string& text) {
  std::string s = "<file path=\"" + path + "\">\n" + text;
  if (!text.empty() && text.back() != '\n') s += '\n';
  return s + "</file>\n\n";
}

std::string name_of(const std::string& uri) {
  return uri.rfind("file://", 0) == 0 ? uri_path(uri) : uri;
}

// A linked file's text: inlined when it is a readable regular file up to max_inlined_file bytes.
std::string linked(const std::string& uri) {
  if (uri.rfind("file://", 0) != 0) return "<link uri=\"" + uri + "\"/>\n\n";
  const std::string path = uri_path(uri);
  std::ifstream in(path, std::ios::binary);
  if (!in) return "<file path=\"" + path + "\" unreadable=\"true\"/>\n\n";
  std::string text(max_inlined_file + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > max_inlined_file || text.find('\0') != std::string::npos)
    return "<file path=\"" + path + "\" inlined=\"false\"/>\n\n";  // too big or binary: the agent may read it
  return file_context(path, text);
}

}  // namespace

p9::Result<std::string> prompt_text(const json& blocks) {
  if (!blocks.is_array()) return p9::error("prompt must be an array of content blocks");
  std::string context, text;
  for (const auto& b : blocks) {
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text" && b.contains("text") && b["text"].is_string()) {
      if (!text.empty()) text += "\n\n";
      text += b["text"].get<std::string>();
    } else if (type == "resource" && b.contains("resource") && b["resource"].is_object()) {
      const auto& r = b["resource"];
      if (!r.contains("text") || !r["text"].is_string())
        return p9::error("binary resources are not supported: " + r.value("uri", std::string("?")));
      context += file_context(name_of(r.value("uri", std::string())), r["text"].get<std::string>());
    } else if (type == "resource_link" && b.contains("uri") && b["uri"].is_string()) {
      context += linked(b["uri"].get<std::string>());
    } else {
      return p9::error("unsupported content block: " + (type.empty() ? std::string("?") : type));
    }
  }
  if (context.empty()) return text;
  return context + text;
}

std::string stored_prompt(const std::string& text) {
  const auto b = text.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  std::string s = text.substr(b, text.find_last_not_of(" \t\r\n") - b + 1);
  if (s.rfind("//", 0) == 0) s.erase(0, 1);
  // Blocks are JSON: bytes that are not UTF-8 are stored as U+FFFD (spec §2.8.8).
  return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

bool is_command(const std::string& text) {
  const auto start = text.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return false;
  if (text[start] == '!') return true;
  return text[start] == '/' && text.compare(start, 2, "//") != 0;
}

}  // namespace acp
