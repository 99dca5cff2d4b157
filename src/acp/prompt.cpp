#include "prompt.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <fcntl.h>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>

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

// A descriptor closed when it goes out of scope.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

enum class Linked { inlined, named, unreadable };

// Reads a linked file into text when it is a regular file of at most max_inlined_file bytes.
// The bridge reads and writes on one thread: the path is opened without blocking (a FIFO waits
// for a writer, a pipe such as the bridge's own stdin for data, a terminal for a line) and
// nothing but a regular file is read; O_NOCTTY so that a terminal never becomes ours.
Linked read_linked(const std::string& path, std::string& text) {
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  struct stat st;
  if (f.fd < 0 || ::fstat(f.fd, &st) != 0) return Linked::unreadable;
  if (!S_ISREG(st.st_mode) || static_cast<std::size_t>(st.st_size) > max_inlined_file) return Linked::named;
  // One byte over the bound tells a file that grew since fstat, or a /proc file (sized 0) too big.
  text.resize(max_inlined_file + 1);
  std::size_t n = 0;
  while (n < text.size()) {
    const ssize_t r = ::read(f.fd, text.data() + n, text.size() - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Linked::unreadable;
    if (r == 0) break;
    n += static_cast<std::size_t>(r);
  }
  text.resize(n);
  if (n > max_inlined_file || text.find('\0') != std::string::npos) return Linked::named;  // too big or binary
  return Linked::inlined;
}

// A linked file in the prompt: inlined, or named for the agent to read itself.
std::string linked(const std::string& uri) {
  if (uri.rfind("file://", 0) != 0) return "<link uri=\"" + uri + "\"/>\n\n";
  const std::string path = uri_path(uri);
  std::string text;
  switch (read_linked(path, text)) {
    case Linked::inlined: return file_context(path, text);
    case Linked::named: return "<file path=\"" + path + "\" inlined=\"false\"/>\n\n";
    case Linked::unreadable: break;
  }
  return "<file path=\"" + path + "\" unreadable=\"true\"/>\n\n";
}

// The string field key of a block at `where` in the prompt: an error when it has another type,
// or is missing and required; "" when it is missing and optional.
p9::Result<std::string> field(const json& b, const char* key, const std::string& where, bool required = false) {
  if (!b.contains(key) && !required) return std::string();
  if (!b.contains(key) || !b[key].is_string()) return p9::error(where + "." + key + " must be a string");
  return b[key].get<std::string>();
}

// A block's part of the prompt, added to context (ahead of the text) or to the text.
using Part = p9::Status (*)(const json& b, const std::string& where, std::string& context, std::string& text);

p9::Status text_part(const json& b, const std::string& where, std::string&, std::string& text) {
  auto t = field(b, "text", where, true);
  if (!t) return t.error();
  if (!text.empty()) text += "\n\n";
  text += *t;
  return {};
}

p9::Status resource_part(const json& b, const std::string& where, std::string& context, std::string&) {
  if (!b.contains("resource") || !b["resource"].is_object()) return p9::error(where + ".resource must be an object");
  const json& r = b["resource"];
  auto uri = field(r, "uri", where + ".resource");
  if (!uri) return uri.error();
  if (!r.contains("text") || !r["text"].is_string())
    return p9::error("binary resources are not supported: " + (uri->empty() ? std::string("?") : *uri));
  context += file_context(name_of(*uri), r["text"].get<std::string>());
  return {};
}

p9::Status link_part(const json& b, const std::string& where, std::string& context, std::string&) {
  auto uri = field(b, "uri", where, true);
  if (!uri) return uri.error();
  context += linked(*uri);
  return {};
}

// The content blocks the bridge takes (promptCapabilities: text and embedded context).
constexpr std::array<std::pair<std::string_view, Part>, 3> parts{{
    {"text", text_part},
    {"resource", resource_part},
    {"resource_link", link_part},
}};

}  // namespace

p9::Result<std::string> prompt_text(const json& blocks) {
  if (!blocks.is_array()) return p9::error("prompt must be an array of content blocks");
  std::string context, text;
  for (std::size_t i = 0; i < blocks.size(); i++) {
    const json& b = blocks[i];
    const std::string where = "prompt[" + std::to_string(i) + "]";
    if (!b.is_object()) return p9::error(where + " must be a content block (an object)");
    auto type = field(b, "type", where);
    if (!type) return type.error();
    auto part = std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return p.first == *type; });
    if (part == parts.end()) return p9::error("unsupported content block: " + (type->empty() ? std::string("?") : *type));
    if (auto st = part->second(b, where, context, text); !st) return st.error();
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

bool is_shell_command(const std::string& text) {
  const auto start = text.find_first_not_of(" \t\r\n");
  return start != std::string::npos && text[start] == '!';
}

}  // namespace acp
