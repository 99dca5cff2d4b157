#include "tool.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <vector>

namespace tool {

namespace {

const json* find(const json& j, std::string_view key) {
  const auto it = j.find(std::string(key));
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

Args Args::from_stdin() {
  std::string text(std::istreambuf_iterator<char>(std::cin), {});
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw Error("invalid arguments: not JSON");
  if (!j.is_object()) throw Error("invalid arguments: not a JSON object");
  return Args(std::move(j));
}

std::string Args::string(std::string_view key) const {
  auto v = opt_string(key);
  if (!v) throw Error("missing argument: " + std::string(key));
  return *v;
}

std::optional<std::string> Args::opt_string(std::string_view key) const {
  const json* v = find(j_, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw Error("invalid " + std::string(key) + ": must be a string");
  return v->get<std::string>();
}

std::optional<long long> Args::opt_int(std::string_view key, long long min, long long max) const {
  const json* v = find(j_, key);
  if (!v) return std::nullopt;
  // 10.0 is an integer too: some models write every number as a float.
  const bool integral = v->is_number_integer() || (v->is_number_float() && std::trunc(v->get<double>()) == v->get<double>() &&
                                                   std::abs(v->get<double>()) < 9e15);
  const long long n = !integral ? 0 : v->is_number_integer() ? v->get<long long>() : static_cast<long long>(v->get<double>());
  if (!integral || n < min || n > max)
    throw Error("invalid " + std::string(key) + ": must be an integer from " + std::to_string(min) + " to " +
                std::to_string(max));
  return n;
}

bool Args::flag(std::string_view key, bool fallback) const {
  const json* v = find(j_, key);
  if (!v) return fallback;
  if (!v->is_boolean()) throw Error("invalid " + std::string(key) + ": must be true or false");
  return v->get<bool>();
}

int run(const std::function<std::string(const Args&)>& body) {
  std::string out;
  int status = 0;
  try {
    out = body(Args::from_stdin());
  } catch (const std::exception& e) {
    out = e.what();
    status = 1;
  }
  if (!out.empty() && out.back() != '\n') out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return status;
}

std::string absolute(std::string_view path) {
  if (path.empty()) throw Error("invalid path: empty");
  // The system would take the path up to the NUL: another file than the one named.
  if (path.find('\0') != std::string_view::npos) throw Error("invalid path: contains a NUL byte");
  std::string joined;
  if (path.front() != '/') {
    std::vector<char> buf(4096);
    if (!::getcwd(buf.data(), buf.size())) throw Error("cannot read the working directory");
    joined = buf.data();
    joined += '/';
  }
  joined += path;
  std::vector<std::string> parts;
  const auto join = [&] {
    std::string out;
    for (const auto& p : parts) (out += '/') += p;
    return out.empty() ? std::string("/") : out;
  };
  std::string_view rest = joined;
  while (!rest.empty()) {
    const auto slash = rest.find('/');
    const auto part = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      // `..` after a symlink is the parent of what it points to, as the kernel takes it
      // (`link/../x` is not `./x`): the path so far is resolved first.
      struct stat st {};
      if (!parts.empty() && ::lstat(join().c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        if (char* real = ::realpath(join().c_str(), nullptr)) {
          parts.clear();
          std::string_view r = real;
          while (!r.empty()) {
            const auto s2 = r.find('/');
            if (s2 != 0) parts.emplace_back(r.substr(0, s2));
            r = s2 == std::string_view::npos ? std::string_view{} : r.substr(s2 + 1);
          }
          std::free(real);
        }
      }
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.emplace_back(part);
  }
  return join();
}

}  // namespace tool
