#include "gitignore.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <optional>

namespace filetool {

namespace {

constexpr std::size_t max_gitignore = 1 << 20;

std::optional<std::string> read_small(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[8192];
  ssize_t r;
  while ((r = ::read(fd, buf, sizeof buf)) > 0 && out.size() < max_gitignore) out.append(buf, static_cast<std::size_t>(r));
  ::close(fd);
  return out;
}

}  // namespace

Ignores::Ignores(const std::string& root) {
  std::vector<std::string> ancestors;
  for (auto slash = root.rfind('/'); slash != std::string::npos && slash > 0; slash = root.rfind('/', slash - 1))
    ancestors.push_back(root.substr(0, slash));
  if (root != "/") ancestors.push_back("/");
  for (auto it = ancestors.rbegin(); it != ancestors.rend(); ++it) enter(*it);
}

void Ignores::enter(const std::string& abs) {
  File f{abs.back() == '/' ? abs : abs + "/", {}};
  if (auto text = read_small(f.base + ".gitignore")) {
    std::string_view rest = *text;
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      std::string line(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      while (!line.empty() && line.back() == ' ' && !(line.size() >= 2 && line[line.size() - 2] == '\\')) line.pop_back();
      if (line.empty() || line[0] == '#') continue;
      bool negate = false;
      if (line[0] == '!') negate = true, line.erase(0, 1);
      else if (line[0] == '\\' && line.size() > 1 && (line[1] == '#' || line[1] == '!')) line.erase(0, 1);
      bool dir_only = false;
      while (!line.empty() && line.back() == '/') dir_only = true, line.pop_back();
      if (line.empty()) continue;
      // A trailing `/**` is what lies inside the directory, not the directory itself (a glob's
      // `**` may match nothing): `logs/**` must leave `logs` to walk into, or `!logs/keep/` after
      // it could re-include nothing.
      if (line.size() > 3 && line.ends_with("/**")) line.insert(line.size() - 2, "*/");
      const bool anchored = line.find('/') != std::string::npos;
      if (!anchored) line = "**/" + line;
      f.rules.push_back({Glob(line, false), negate, dir_only});
    }
  }
  files_.push_back(std::move(f));
}

bool Ignores::ignored(std::string_view abs, bool is_dir) const {
  for (auto f = files_.rbegin(); f != files_.rend(); ++f) {
    if (f->rules.empty() || abs.size() <= f->base.size() || abs.compare(0, f->base.size(), f->base) != 0) continue;
    const std::string_view rel = abs.substr(f->base.size());
    for (auto r = f->rules.rbegin(); r != f->rules.rend(); ++r) {
      if (r->dir_only && !is_dir) continue;
      if (r->glob.match(rel)) return !r->negate;
    }
  }
  return false;
}

}  // namespace filetool
