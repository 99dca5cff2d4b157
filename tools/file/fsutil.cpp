#include "fsutil.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tool.hpp"

namespace filetool {

std::string listed(const std::string& path) {
  const auto control = [](unsigned char c) { return c < 0x20 || c == 0x7f; };
  if (std::none_of(path.begin(), path.end(), control)) return path;
  std::string out = "\"";
  for (const unsigned char c : path) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (control(c)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + '"';
}

std::string file_to_write(const std::string& given) {
  if (given.size() > 1 && given.back() == '/')
    throw tool::Error("invalid path: " + given + " names a directory (it ends with /); give the file's path");
  const auto last = given.substr(given.rfind('/') + 1);  // `.` and `..` name directories too
  if (last == "." || last == "..")
    throw tool::Error("invalid path: " + given + " names a directory (it ends with " + last + "); give the file's path");
  return tool::absolute(given);
}

std::string shown(const std::string& abs) {
  static const std::string cwd = tool::absolute(".");
  if (abs == cwd) return ".";
  if (cwd == "/") return abs.size() > 1 ? abs.substr(1) : abs;
  if (abs.size() > cwd.size() && abs.compare(0, cwd.size(), cwd) == 0 && abs[cwd.size()] == '/')
    return abs.substr(cwd.size() + 1);
  return abs;
}

void fail(int err, const std::string& abs, std::string_view what) {
  const std::string p = shown(abs);
  switch (err) {
    case ENOENT: throw tool::Error("file not found: " + p);
    case EACCES:
    case EPERM: throw tool::Error("permission denied: " + p + " (outside the sandbox's paths)");
    case ENOTDIR: throw tool::Error("not a directory: a parent of " + p + " is a file");
    case EISDIR: throw tool::Error("is a directory: " + p);
    case ELOOP: throw tool::Error("too many levels of symbolic links: " + p);
    case ENOSPC: throw tool::Error("no space left on device writing " + p);
    case EROFS: throw tool::Error("read-only file system: " + p);
    default: throw tool::Error(std::string(what) + " " + p + ": " + std::strerror(err));
  }
}

void readable_dir(const std::string& abs) {
  const int fd = ::open(abs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(errno, abs);
  ::close(fd);
}

bool valid_utf8(std::string_view s, bool truncated_ok) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = p[i];
    std::size_t len;
    unsigned min;
    if (c < 0x80) { i++; continue; }
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return false;
    if (i + len > n) {
      for (std::size_t k = i + 1; k < n; k++)
        if ((p[k] & 0xC0) != 0x80) return false;
      return truncated_ok;
    }
    unsigned cp = c & (0xFF >> (len + 1));
    for (std::size_t k = 1; k < len; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

bool binary_block(std::string_view block, bool more_follows) {
  return block.find('\0') != std::string_view::npos || !valid_utf8(block, more_follows);
}

std::string human_size(long long bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 3) v /= 1024, u++;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::size_t count_lines(std::string_view text) {
  std::size_t n = 0;
  for (const char* p = text.data(), *end = p + text.size();
       (p = static_cast<const char*>(std::memchr(p, '\n', end - p))); p++)
    n++;
  if (!text.empty() && text.back() != '\n') n++;
  return n;
}

namespace {

/// Writes all of `content` to `fd`: 0, or the errno of the write that failed.
int write_whole(int fd, std::string_view content) {
  for (std::size_t off = 0; off < content.size();) {
    const ssize_t w = ::write(fd, content.data() + off, content.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    off += static_cast<std::size_t>(w);
  }
  return 0;
}

}  // namespace

void replace_file(const std::string& abs, std::string_view content, mode_t mode) {
  // A file made read-only stays so, as under a shell's `>`: a rename would replace it, since
  // only the directory's permission is asked.
  if (::faccessat(AT_FDCWD, abs.c_str(), W_OK, AT_EACCESS) != 0 && (errno == EACCES || errno == EPERM))
    throw tool::Error("permission denied: " + shown(abs) + " (the file is read-only)");
  const auto slash = abs.rfind('/');
  const std::string dir = slash == 0 ? "/" : abs.substr(0, slash);
  // The name is kept in the temporary's while it fits NAME_MAX with the dot and the suffix, so
  // an interrupted write shows whose it was; a longer one is cut.
  constexpr std::string_view suffix = ".ollie-XXXXXX";
  const std::string name = abs.substr(slash + 1, NAME_MAX - 1 - suffix.size());
  std::string tmp = dir + (dir == "/" ? "" : "/") + "." + name + std::string(suffix);
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0 && (errno == EACCES || errno == EPERM)) {
    // The sandbox grants the file and not its directory (sandbox.yaml may name a file): it is
    // written in place, as a shell's `>` would, since no file can be made beside it.
    const int err = errno;
    const int in_place = ::open(abs.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (in_place < 0) fail(err, abs, "cannot create a temporary file beside");
    const int written = write_whole(in_place, content);
    const int synced = written ? 0 : ::fsync(in_place) == 0 ? 0 : errno;
    ::close(in_place);
    if (written) fail(written, abs, "cannot write");
    if (synced) fail(synced, abs, "cannot sync");
    return;
  }
  if (fd < 0) fail(errno, abs, "cannot create a temporary file beside");
  auto abandon = [&](int err, std::string_view what) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(err, abs, what);
  };
  if (const int err = write_whole(fd, content)) abandon(err, "cannot write");
  if (::fchmod(fd, mode) != 0) abandon(errno, "cannot set the mode of");
  if (::fsync(fd) != 0) abandon(errno, "cannot sync");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail(errno, abs, "cannot write");
  }
  if (::rename(tmp.c_str(), abs.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(err, abs, "cannot replace");
  }
  if (const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);  // the rename itself made durable; a failure here loses nothing already written
    ::close(d);
  }
}

std::string slurp(const std::string& abs, std::size_t cap) {
  const int fd = ::open(abs.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(errno, abs);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(err, abs);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw tool::Error("is a directory: " + shown(abs) + "; use file_glob to list its files");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw tool::Error("not a regular file: " + shown(abs));
  }
  if (static_cast<std::size_t>(st.st_size) > cap) {
    ::close(fd);
    throw tool::Error("file too large: " + shown(abs) + " (" + human_size(st.st_size) + ", the limit is " +
                      human_size(static_cast<long long>(cap)) + ")");
  }
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      fail(err, abs, "cannot read");
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  ::close(fd);
  return out;
}

}  // namespace filetool
