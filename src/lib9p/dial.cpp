#include "dial.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "dirs.hpp"

namespace p9 {

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
    // A number is a port: getaddrinfo takes 99999 as 34463 (modulo 65536), another service's.
    if (std::all_of(a.port.begin(), a.port.end(), [](unsigned char c) { return std::isdigit(c); }) &&
        (a.port.size() > 5 || std::stoul(a.port) > 65535))
      return error("bad address: " + a.text + ": port out of range");
    if (a.host == "*") a.host = "0.0.0.0";
    return a;
  }
  return error("unknown network: " + std::string(net));
}

}  // namespace p9
