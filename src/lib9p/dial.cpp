#include "dial.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>

namespace p9 {

std::string login_name() {
  if (passwd* pw = getpwuid(getuid())) return pw->pw_name;
  return std::to_string(getuid());
}

std::string namespace_dir() {
  if (const char* ns = std::getenv("NAMESPACE"); ns && *ns) return ns;
  std::string disp = ":0";
  if (const char* d = std::getenv("DISPLAY"); d && *d) disp = d;
  if (disp.size() > 2 && disp.ends_with(".0")) disp.resize(disp.size() - 2);
  for (char& c : disp)
    if (c == '/') c = '_';
  return "/tmp/ns." + login_name() + "." + disp;
}

Result<Address> parse_address(std::string_view s) {
  Address a;
  a.text = std::string(s);
  if (s.empty()) return error("empty address");
  auto bang = s.find('!');
  if (bang == std::string_view::npos) {
    a.path = namespace_dir() + "/" + std::string(s);
    return a;
  }
  std::string_view net = s.substr(0, bang), rest = s.substr(bang + 1);
  if (net == "unix") {
    if (rest.empty()) return error("bad address: " + a.text);
    a.path = std::string(rest);
    return a;
  }
  if (net == "tcp") {
    auto b2 = rest.find('!');
    if (b2 == std::string_view::npos || b2 == 0 || b2 + 1 == rest.size()) return error("bad address: " + a.text);
    a.kind = Address::Tcp;
    a.host = std::string(rest.substr(0, b2));
    a.port = std::string(rest.substr(b2 + 1));
    if (a.host == "*") a.host = "0.0.0.0";
    return a;
  }
  return error("unknown network: " + std::string(net));
}

}  // namespace p9
