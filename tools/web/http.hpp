#pragma once
/// One GET of an http or https URL through libcurl, with the web tools' limits: 20 s in all,
/// 10 s to connect, 5 redirects (http and https only), 5 MiB of decoded body.

#include <string>

namespace web {

struct Response {
  long status = 0;
  std::string body;
  bool cut = false;          ///< the body stopped at the 5 MiB limit
  std::string status_line;   ///< of the last response, e.g. "HTTP/1.1 404 Not Found"
  std::string content_type;  ///< as sent, "" when none
  std::string final_url;     ///< after redirects
};

/// Refuses anything but an absolute http or https URL with a host (tool::Error `invalid url: …`).
void check_url(const std::string& url);

/// GETs `url` (checked first), sending `accept` and `agent`. A transfer that fails throws
/// tool::Error naming the cause (the sandbox's network rules, DNS, a timeout, TLS, redirects); an
/// HTTP error status is a Response like any other.
Response get(const std::string& url, const std::string& accept, const std::string& agent);

/// The reason phrase of a status line ("Not Found"), "" when it has none.
std::string reason(const Response& r);

}  // namespace web
