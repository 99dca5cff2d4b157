#include "toolsrv/auth.hpp"

#include <openssl/crypto.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "lib9p/errors.hpp"

namespace toolsrv {

p9::Result<std::string> read_secret(int fd, std::chrono::milliseconds limit) {
  const auto fail = p9::error("no secret on fd " + std::to_string(fd));
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool eof = false;
  while (!eof && text.size() <= 65) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || (p.revents & POLLNVAL)) break;
    char buf[128];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof = n == 0;
      break;
    }
    text.append(buf, n);
  }
  ::close(fd);
  if (!eof || text.size() != 65 || text.back() != '\n') return fail;
  text.pop_back();
  for (char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return fail;
  return text;
}

p9::Status check_secret(const std::string& secret, bool has_afid, const std::string& presented) {
  if (!has_afid) return p9::error(p9::err::auth_required);
  std::string_view given = presented;
  if (!given.empty() && given.back() == '\n') given.remove_suffix(1);
  if (given.empty()) return p9::error("empty secret");
  // The length is not secret (always 64); the bytes are compared without an early exit.
  if (given.size() != secret.size() || CRYPTO_memcmp(given.data(), secret.data(), secret.size()) != 0)
    return p9::error(p9::err::auth_failed);
  return {};
}

}  // namespace toolsrv
