#include "toolsrv/policy.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include "toolsrv/smallfile.hpp"

namespace toolsrv {
namespace {

struct ParseError {
  std::string text;
};

[[noreturn]] void fail(const YAML::Node& node, const std::string& what) {
  const auto mark = node.Mark();
  if (mark.line >= 0) throw ParseError{"line " + std::to_string(mark.line + 1) + ": " + what};
  throw ParseError{what};
}

void check_keys(const YAML::Node& map, const std::string& where, std::initializer_list<const char*> keys) {
  if (!map.IsMap()) fail(map, (where.empty() ? std::string("document") : where) + ": expected a mapping");
  std::set<std::string> seen;
  for (const auto& kv : map) {
    const auto key = kv.first.as<std::string>();
    const auto name = where.empty() ? key : where + "." + key;
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; })) fail(kv.first, "unknown key: " + name);
    // yaml-cpp keeps both and a lookup finds the first: a line appended to tighten the policy
    // (`network: {enabled: false}`) would be ignored without a word.
    if (!seen.insert(key).second) fail(kv.first, "duplicate key: " + name);
  }
}

std::optional<bool> get_bool(const YAML::Node& map, const char* key, const std::string& where) {
  const auto node = map[key];
  if (!node || node.IsNull()) return std::nullopt;
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) fail(node, where + "." + key + ": expected true or false");
  return value;
}

std::vector<std::string> get_strings(const YAML::Node& map, const char* key, const std::string& where) {
  std::vector<std::string> out;
  const auto node = map[key];
  if (!node || node.IsNull()) return out;
  if (!node.IsSequence()) fail(node, where + "." + key + ": expected a list of strings");
  for (const auto& item : node) {
    if (!item.IsScalar()) fail(item, where + "." + key + ": expected a list of strings");
    out.push_back(item.Scalar());
  }
  return out;
}

std::vector<std::uint16_t> get_ports(const YAML::Node& map, const char* key) {
  std::vector<std::uint16_t> out;
  const auto node = map[key];
  if (!node || node.IsNull()) return out;
  if (!node.IsSequence()) fail(node, std::string("network.") + key + ": expected a list of ports");
  for (const auto& item : node) {
    int port = -1;
    if (!item.IsScalar() || !YAML::convert<int>::decode(item, port) || port < 0 || port > 65535) {
      fail(item, std::string("network.") + key + ": invalid port: " + (item.IsScalar() ? item.Scalar() : "?"));
    }
    out.push_back(static_cast<std::uint16_t>(port));
  }
  return out;
}

PolicyFile parse_document(const YAML::Node& doc) {
  PolicyFile file;
  if (!doc || doc.IsNull()) return file;
  check_keys(doc, "", {"general", "filesystem", "network", "env", "unix", "advanced"});
  if (const auto general = doc["general"]; general && !general.IsNull()) {
    check_keys(general, "general", {"best_effort", "log_level"});
    file.best_effort = get_bool(general, "best_effort", "general");
    if (const auto level = general["log_level"]; level && !level.IsNull()) {
      static const char* levels[] = {"", "error", "warn", "info", "debug"};
      if (!level.IsScalar() || std::none_of(std::begin(levels), std::end(levels),
                                             [&](const char* l) { return level.Scalar() == l; })) {
        fail(level, "general.log_level: expected one of \"\", error, warn, info, debug");
      }
      file.log_level = level.Scalar();
    }
  }
  if (const auto fs = doc["filesystem"]; fs && !fs.IsNull()) {
    check_keys(fs, "filesystem", {"ro", "rox", "rw", "rwx"});
    file.ro = get_strings(fs, "ro", "filesystem");
    file.rox = get_strings(fs, "rox", "filesystem");
    file.rw = get_strings(fs, "rw", "filesystem");
    file.rwx = get_strings(fs, "rwx", "filesystem");
  }
  if (const auto net = doc["network"]; net && !net.IsNull()) {
    check_keys(net, "network", {"enabled", "unrestricted", "bind_tcp", "connect_tcp"});
    file.net_enabled = get_bool(net, "enabled", "network");
    file.net_unrestricted = get_bool(net, "unrestricted", "network");
    file.bind_tcp = get_ports(net, "bind_tcp");
    file.connect_tcp = get_ports(net, "connect_tcp");
  }
  if (const auto env = doc["env"]; env && !env.IsNull()) {
    if (!env.IsSequence()) fail(env, "env: expected a list of variable names");
    for (const auto& item : env) {
      if (!item.IsScalar()) fail(item, "env: expected a list of variable names");
      file.env.push_back(item.Scalar());
    }
  }
  if (const auto sockets = doc["unix"]; sockets && !sockets.IsNull()) {
    if (!sockets.IsSequence()) fail(sockets, "unix: expected a list of strings");
    for (const auto& item : sockets) {
      if (!item.IsScalar()) fail(item, "unix: expected a list of strings");
      file.unix_sockets.push_back(item.Scalar());
    }
  }
  if (const auto adv = doc["advanced"]; adv && !adv.IsNull()) {
    check_keys(adv, "advanced", {"ldd", "add_exec"});
    file.ldd = get_bool(adv, "ldd", "advanced");
    file.add_exec = get_bool(adv, "add_exec", "advanced");
  }
  return file;
}

template <class T>
void union_into(std::vector<T>& into, const std::vector<T>& more) {
  for (const auto& v : more) {
    if (std::find(into.begin(), into.end(), v) == into.end()) into.push_back(v);
  }
}

}  // namespace

Result<PolicyFile> parse_policy(std::string_view text) {
  try {
    // One document: a second one (`---`, after `...`) is not read by a lookup, so a policy
    // appended below the shipped one would be ignored without a word, as a key given twice was.
    const auto docs = YAML::LoadAll(std::string(text));
    if (docs.size() > 1) fail(docs[1], "a second YAML document: one policy per file");
    return parse_document(docs.empty() ? YAML::Node() : docs.front());
  } catch (const ParseError& e) {
    return p9::error(e.text);
  } catch (const YAML::Exception& e) {
    if (e.mark.line >= 0) return p9::error("line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
    return p9::error(e.msg);
  }
}

namespace {

// A regular file of at most 1 MiB, read as the other configuration files are (smallfile.hpp: the
// model may replace it when the cwd holds ~/.config: a FIFO held every call and every `tools`
// read, /dev/zero grew without end). Plain read(2): this runs at every call.
constexpr std::size_t policy_max = 1u << 20;

Result<std::string> read_policy_text(const std::string& path) {
  auto f = read_small_file(AT_FDCWD, path.c_str(), O_NOCTTY, policy_max);
  switch (f.fail) {
    case SmallFile::Fail::none: return std::move(f.text);
    case SmallFile::Fail::open: return p9::error(std::string("cannot open: ") + std::strerror(f.error));
    case SmallFile::Fail::not_regular: return p9::error("cannot open: not a regular file");
    case SmallFile::Fail::too_large: return p9::error("cannot open: larger than 1 MiB");
    case SmallFile::Fail::read: break;
  }
  return p9::error(path + ": read error");
}

}  // namespace

Result<PolicyFile> load_policy(const std::string& path) {
  auto text = read_policy_text(path);
  if (!text) return text.error();
  return parse_policy(*text);
}

Result<std::shared_ptr<const PolicyFile>> PolicyLoader::load(const std::string& path) {
  auto text = read_policy_text(path);
  if (!text) return text.error();
  std::lock_guard lk(mu_);
  if (!parsed_ || path != path_ || *text != text_) {
    auto parsed = parse_policy(*text);
    if (parsed) parsed_ = std::make_shared<const PolicyFile>(std::move(*parsed));
    else parsed_ = parsed.error();
    path_ = path;
    text_ = std::move(*text);
  }
  return *parsed_;
}

Policy effective_policy(const PolicyFile& global, const PolicyFile* project) {
  Policy p;
  auto apply = [&p](const PolicyFile& f) {
    if (f.best_effort) p.best_effort = *f.best_effort;
    if (f.log_level) p.log_level = *f.log_level;
    union_into(p.ro, f.ro);
    union_into(p.rox, f.rox);
    union_into(p.rw, f.rw);
    union_into(p.rwx, f.rwx);
    if (f.net_enabled) p.network.enabled = *f.net_enabled;
    if (f.net_unrestricted) p.network.unrestricted = *f.net_unrestricted;
    union_into(p.network.bind_tcp, f.bind_tcp);
    union_into(p.network.connect_tcp, f.connect_tcp);
    union_into(p.env, f.env);
    union_into(p.unix_sockets, f.unix_sockets);
    if (f.ldd) p.ldd = *f.ldd;
    if (f.add_exec) p.add_exec = *f.add_exec;
  };
  apply(global);
  if (project) apply(*project);
  return p;
}

}  // namespace toolsrv
