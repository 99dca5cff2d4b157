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

/// The plan9port namespace directory: $NAMESPACE, else /tmp/ns.<login>.<canonical DISPLAY>
/// (DISPLAY ":0" when unset; a trailing ".0" dropped, '/' turned into '_').
std::string namespace_dir();

/// The login name of the real uid, from the password database (what plan9port's 9p sends).
std::string login_name();

/// Parses a dial string. A bare name (no '!') is a service in the namespace directory.
Result<Address> parse_address(std::string_view s);

}  // namespace p9
