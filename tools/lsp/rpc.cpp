#include "rpc.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace lsp {

bool MessageReader::fill() {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n > 0) {
      pending_.append(buf, static_cast<std::size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

std::optional<json> MessageReader::next() {
  std::string& p = pending_;
  std::size_t length = 0;
  bool have_length = false;
  for (;;) {
    const auto end = p.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (p.size() > 8192 || !fill()) return std::nullopt;
      continue;
    }
    std::size_t i = 0;
    while (i < end) {
      auto nl = p.find("\r\n", i);
      if (nl == std::string::npos || nl > end) nl = end;
      const std::string line = p.substr(i, nl - i);
      constexpr std::string_view key = "Content-Length:";
      if (line.size() > key.size() && line.compare(0, key.size(), key) == 0) {
        const unsigned long long n = std::strtoull(line.c_str() + key.size(), nullptr, 10);
        if (n > max_message) return std::nullopt;
        length = static_cast<std::size_t>(n);
        have_length = true;
      }
      i = nl + 2;
    }
    if (!have_length) return std::nullopt;
    p.erase(0, end + 4);
    break;
  }
  while (p.size() < length)
    if (!fill()) return std::nullopt;
  json j = json::parse(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(length), nullptr, false);
  p.erase(0, length);
  if (j.is_discarded()) return json::object();
  return j;
}

bool write_message(int fd, const json& message) {
  const std::string body = message.dump(-1, ' ', false, json::error_handler_t::replace);
  return write_all(fd, "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
}

bool write_all(int fd, const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {  // a non-blocking descriptor: wait, bounded
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, write_timeout_ms) == 1) continue;
      return false;
    }
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

std::optional<std::string> read_line(int fd, std::size_t limit) {
  std::string line;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return line.empty() ? std::nullopt : std::optional(line);
    line.append(buf, static_cast<std::size_t>(n));
    if (const auto nl = line.find('\n'); nl != std::string::npos) {
      line.resize(nl);
      return line;
    }
    if (line.size() > limit) return std::nullopt;
  }
}

}  // namespace lsp
