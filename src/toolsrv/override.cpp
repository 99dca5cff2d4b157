#include "toolsrv/override.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>

#include "toolsrv/fd.hpp"
#include "toolsrv/paths.hpp"
#include "toolsrv/smallfile.hpp"

namespace toolsrv {

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

Result<void> Approvals::replace(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::set<std::pair<std::string, std::string>> next;
  for (const auto& [hash, dir] : pairs) {
    const bool hex = hash.size() == 64 && hash.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!hex) return p9::error("invalid hash: " + hash);
    if (dir.empty() || dir.front() != '/') return p9::error("dir must be absolute: " + dir);
    next.emplace(hash, clean_path(dir));
  }
  pairs_ = std::move(next);
  return {};
}

bool Approvals::approved(std::string_view sha256, std::string_view dir) const {
  return pairs_.count({std::string(sha256), clean_path(dir)}) > 0;
}

std::optional<ProjectOverride> find_override(int dir_fd, const std::string& cwd, std::string* note) {
  ProjectOverride o;
  o.dir = clean_path(cwd);
  o.path = o.dir == "/" ? "/.ollie-sandbox.yaml" : o.dir + "/.ollie-sandbox.yaml";
  auto f = read_small_file(dir_fd, ".ollie-sandbox.yaml", O_NOFOLLOW, override_max_bytes);
  switch (f.fail) {
    case SmallFile::Fail::none: break;
    case SmallFile::Fail::open:
      if (f.error != ENOENT && note) *note = o.path + ": ignored: " + std::strerror(f.error);
      return std::nullopt;
    case SmallFile::Fail::not_regular:
      if (note) *note = o.path + ": ignored: not a regular file";
      return std::nullopt;
    case SmallFile::Fail::too_large:
      // Too large to be read, so never approved: ignored like any other unapproved override, so
      // that a file the model wrote cannot stop every call in its cwd.
      if (note)
        *note = o.path + ": ignored: too large: " +
                (f.size ? std::to_string(f.size) + " bytes" : "over " + std::to_string(override_max_bytes) + " bytes") +
                " (limit " + std::to_string(override_max_bytes) + ")";
      return std::nullopt;
    case SmallFile::Fail::read:
      if (note) *note = o.path + ": ignored: " + std::strerror(f.error);
      return std::nullopt;
  }
  o.bytes = std::move(f.text);
  o.sha256 = sha256_hex(o.bytes);
  return o;
}

}  // namespace toolsrv
