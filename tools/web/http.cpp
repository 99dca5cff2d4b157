#include "http.hpp"

#include <curl/curl.h>

#include <memory>
#include <string_view>

#include "content.hpp"
#include "tool.hpp"

namespace web {

namespace {

constexpr long total_seconds = 20, connect_seconds = 10, max_redirects = 5;
constexpr std::size_t max_download = 5 * 1024 * 1024;

std::size_t on_body(char* p, std::size_t size, std::size_t n, void* data) {
  auto* r = static_cast<Response*>(data);
  const std::size_t len = size * n, room = max_download - r->body.size();
  if (len > room) {
    r->body.append(p, room);
    r->cut = true;
    return 0;  // ends the transfer (CURLE_WRITE_ERROR)
  }
  r->body.append(p, len);
  return len;
}

std::size_t on_header(char* p, std::size_t size, std::size_t n, void* data) {
  const std::string_view line(p, size * n);
  if (line.rfind("HTTP/", 0) == 0) static_cast<Response*>(data)->status_line = one_line(line, 200);
  return size * n;
}

std::string failure(CURLcode rc, const char* errbuf) {
  const std::string why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
  switch (rc) {
    case CURLE_COULDNT_CONNECT: return "network not allowed by the sandbox or unreachable: " + why;
    case CURLE_COULDNT_RESOLVE_HOST: return "cannot resolve the host (no such host, or no network): " + why;
    case CURLE_OPERATION_TIMEDOUT:
      return "timed out (limits: " + std::to_string(total_seconds) + " s in all, " + std::to_string(connect_seconds) +
             " s to connect): " + why;
    case CURLE_TOO_MANY_REDIRECTS: return "too many redirects (more than " + std::to_string(max_redirects) + "): " + why;
    // libcurl gives the same code to an answer with no HTTP status line (HTTP/0.9, or a server
    // of another protocol on that port).
    case CURLE_UNSUPPORTED_PROTOCOL:
      if (why.find("HTTP/0.9") != std::string::npos) return "not an HTTP answer (no status line; another protocol on that port?): " + why;
      return "refused: a redirect to a URL that is not http or https: " + why;
    case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CACERT_BADFILE: case CURLE_SSL_CONNECT_ERROR:
      return "TLS failed: " + why;
    default: return "fetch failed: " + why;
  }
}

}  // namespace

void check_url(const std::string& url) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> u(curl_url(), curl_url_cleanup);
  if (!u) throw tool::Error("out of memory");
  if (const CURLUcode rc = curl_url_set(u.get(), CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME); rc != CURLUE_OK)
    throw tool::Error("invalid url: " + std::string(curl_url_strerror(rc)) + "; give an absolute http:// or https:// URL");
  char* scheme = nullptr;
  curl_url_get(u.get(), CURLUPART_SCHEME, &scheme, 0);
  const std::string s = scheme ? scheme : "";
  curl_free(scheme);
  if (s != "http" && s != "https")
    throw tool::Error("invalid url: only http and https URLs can be fetched, not " + s + ":");
  char* host = nullptr;
  const bool has_host = curl_url_get(u.get(), CURLUPART_HOST, &host, 0) == CURLUE_OK && host && host[0];
  curl_free(host);
  if (!has_host) throw tool::Error("invalid url: no host; give an absolute http:// or https:// URL");
}

Response get(const std::string& url, const std::string& accept, const std::string& agent) {
  check_url(url);
  const std::string accept_header = "Accept: " + accept;
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> c(curl_easy_init(), curl_easy_cleanup);
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(curl_slist_append(nullptr, accept_header.c_str()),
                                                                      curl_slist_free_all);
  if (!c || !headers) throw tool::Error("out of memory");
  Response r;
  char errbuf[CURL_ERROR_SIZE] = "";
  CURL* h = c.get();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, max_redirects);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, total_seconds);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, connect_seconds);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");  // every encoding curl decodes; the cap counts decoded bytes
  curl_easy_setopt(h, CURLOPT_USERAGENT, agent.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  CURLcode rc = curl_easy_perform(h);
  if (rc == CURLE_WRITE_ERROR && r.cut) rc = CURLE_OK;
  if (rc != CURLE_OK) throw tool::Error(failure(rc, errbuf));
  char* ctype = nullptr;
  char* effective = nullptr;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
  curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype);
  curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &effective);
  r.content_type = ctype ? ctype : "";
  r.final_url = effective ? effective : url;
  return r;
}

std::string reason(const Response& r) {
  const auto sp = r.status_line.find(' ');
  if (sp == std::string::npos) return "";
  const auto sp2 = r.status_line.find(' ', sp + 1);
  return sp2 == std::string::npos ? "" : r.status_line.substr(sp2 + 1);
}

}  // namespace web
