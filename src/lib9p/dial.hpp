#pragma once
/// Plan 9 dial strings: `unix!/path`, `tcp!host!port`, or a bare service name in the namespace
/// directory (plan9port's $NAMESPACE, else /tmp/ns.$USER.$DISPLAY).

#include <string>
#include <string_view>

#include "result.hpp"

namespace p9 {

struct Address {
  enum Kind { Unix, Tcp } kind = Unix;
  std::string path;  // Unix
  std::string host;  // Tcp
  std::string port;  // Tcp
  std::string text;  // as given, for messages
};

/// Parses a dial string. A bare name (no '!') is a service in the namespace directory.
Result<Address> parse_address(std::string_view s);

}  // namespace p9
