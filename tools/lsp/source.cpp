#include "source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tool.hpp"

namespace lsp {

std::string read_text(const std::string& path, const std::string& shown) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw tool::Error("cannot read " + shown + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw tool::Error(shown + " is not a regular file: give a source file");
  }
  if (static_cast<std::size_t>(st.st_size) > max_source) {
    ::close(fd);
    throw tool::Error(shown + " is too large (" + std::to_string(st.st_size) + " bytes, the limit is " +
                      std::to_string(max_source) + ")");
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_source) break;
  }
  ::close(fd);
  if (text.size() > max_source) throw tool::Error(shown + " is too large (the limit is " + std::to_string(max_source) + " bytes)");
  if (text.find('\0') != std::string::npos) throw tool::Error(shown + " is a binary file, not source code");
  return text;
}

Source::Source(const std::string& path, const std::string& shown) : text_(read_text(path, shown)) {
  starts_.push_back(0);
  for (std::size_t i = 0; i < text_.size(); i++)
    if (text_[i] == '\n' && i + 1 < text_.size()) starts_.push_back(i + 1);
}

std::string_view Source::line(std::size_t n) const {
  if (n >= starts_.size()) return {};
  std::string_view rest = std::string_view(text_).substr(starts_[n]);
  auto nl = rest.find('\n');
  rest = rest.substr(0, nl);
  if (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);
  return rest;
}

std::size_t Source::offset(std::size_t line_no, std::size_t utf16) const {
  if (line_no >= starts_.size()) return text_.size();
  std::string_view rest = std::string_view(text_).substr(starts_[line_no]);
  rest = rest.substr(0, rest.find('\n'));
  return starts_[line_no] + bytes_of_utf16(rest, utf16);
}

namespace {

/// Length in bytes of the UTF-8 sequence starting with `c` (1 for invalid bytes).
std::size_t seq_len(unsigned char c) {
  if (c >= 0xF0 && c < 0xF8) return 4;
  if (c >= 0xE0) return c < 0xF0 ? 3 : 1;
  if (c >= 0xC0) return 2;
  return 1;
}

}  // namespace

std::size_t utf16_of_chars(std::string_view line, std::size_t chars) {
  std::size_t units = 0, i = 0;
  for (std::size_t c = 0; c < chars && i < line.size(); c++) {
    const std::size_t n = seq_len(static_cast<unsigned char>(line[i]));
    units += n == 4 ? 2 : 1;
    i += n;
  }
  return units;
}

std::size_t chars_of_utf16(std::string_view line, std::size_t units) {
  std::size_t u = 0, i = 0, chars = 0;
  while (u < units && i < line.size()) {
    const std::size_t n = seq_len(static_cast<unsigned char>(line[i]));
    u += n == 4 ? 2 : 1;
    i += n;
    chars++;
  }
  return chars;
}

std::size_t bytes_of_utf16(std::string_view line, std::size_t units) {
  std::size_t u = 0, i = 0;
  while (u < units && i < line.size()) {
    const std::size_t n = seq_len(static_cast<unsigned char>(line[i]));
    u += n == 4 ? 2 : 1;
    i += n;
  }
  return std::min(i, line.size());
}

std::size_t utf16_of_bytes(std::string_view line, std::size_t bytes) {
  std::size_t u = 0, i = 0;
  while (i < bytes && i < line.size()) {
    const std::size_t n = seq_len(static_cast<unsigned char>(line[i]));
    u += n == 4 ? 2 : 1;
    i += n;
  }
  return u;
}

std::string uri_of(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "file://";
  for (unsigned char c : path) {
    if (std::isalnum(c) || std::strchr("/-._~", c)) out += static_cast<char>(c);
    else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::optional<std::string> path_of(const std::string& uri) {
  constexpr std::string_view scheme = "file://";
  if (uri.compare(0, scheme.size(), scheme) != 0) return std::nullopt;
  std::string out;
  for (std::size_t i = scheme.size(); i < uri.size(); i++) {
    if (uri[i] == '%' && i + 2 < uri.size() && std::isxdigit(static_cast<unsigned char>(uri[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(uri[i + 2]))) {
      out += static_cast<char>(std::stoi(uri.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += uri[i];
    }
  }
  if (out.empty() || out.front() != '/') return std::nullopt;
  return out;
}

std::optional<std::size_t> find_word(std::string_view line, std::string_view symbol) {
  if (symbol.empty()) return std::nullopt;
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; };
  for (std::size_t at = line.find(symbol); at != std::string_view::npos; at = line.find(symbol, at + 1)) {
    const bool left = at == 0 || !word(line[at - 1]) || !word(symbol.front());
    const std::size_t end = at + symbol.size();
    const bool right = end >= line.size() || !word(line[end]) || !word(symbol.back());
    if (left && right) return at;
  }
  return std::nullopt;
}

}  // namespace lsp
