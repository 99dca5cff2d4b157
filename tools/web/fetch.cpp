// web_fetch: one http or https URL, as Markdown (HTML converted), plain text or the raw body.
#include <curl/curl.h>

#include <memory>
#include <string>

#include "content.hpp"
#include "html.hpp"
#include "tool.hpp"

namespace {

constexpr long total_seconds = 20, connect_seconds = 10, max_redirects = 5;
constexpr std::size_t max_download = 5 * 1024 * 1024;
constexpr long long default_output = 100 * 1024, min_output = 1024, max_output = 1024 * 1024;

struct Transfer {
  std::string body;
  bool cut = false;         ///< the download cap was reached
  std::string status_line;  ///< of the last response, e.g. "HTTP/1.1 404 Not Found"
};

std::size_t on_body(char* p, std::size_t size, std::size_t n, void* data) {
  auto* t = static_cast<Transfer*>(data);
  const std::size_t len = size * n, room = max_download - t->body.size();
  if (len > room) {
    t->body.append(p, room);
    t->cut = true;
    return 0;  // ends the transfer (CURLE_WRITE_ERROR)
  }
  t->body.append(p, len);
  return len;
}

std::size_t on_header(char* p, std::size_t size, std::size_t n, void* data) {
  const std::string_view line(p, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    auto* t = static_cast<Transfer*>(data);
    t->status_line = web::one_line(line, 200);
  }
  return size * n;
}

/// Refuses anything but an absolute http or https URL with a host.
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

std::string failure(CURLcode rc, const char* errbuf) {
  const std::string why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
  switch (rc) {
    case CURLE_COULDNT_CONNECT: return "network not allowed by the sandbox or unreachable: " + why;
    case CURLE_COULDNT_RESOLVE_HOST: return "cannot resolve the host (no such host, or no network): " + why;
    case CURLE_OPERATION_TIMEDOUT:
      return "timed out (limits: " + std::to_string(total_seconds) + " s in all, " + std::to_string(connect_seconds) +
             " s to connect): " + why;
    case CURLE_TOO_MANY_REDIRECTS: return "too many redirects (more than " + std::to_string(max_redirects) + "): " + why;
    case CURLE_UNSUPPORTED_PROTOCOL: return "refused: a redirect to a URL that is not http or https: " + why;
    case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CACERT_BADFILE: case CURLE_SSL_CONNECT_ERROR:
      return "TLS failed: " + why;
    default: return "fetch failed: " + why;
  }
}

/// "HTTP 404 Not Found from <url>: <the start of the page's text>".
std::string http_error(long status, const Transfer& t, web::Kind kind, const std::string& url) {
  std::string reason;
  if (const auto sp = t.status_line.find(' '); sp != std::string::npos)
    if (const auto sp2 = t.status_line.find(' ', sp + 1); sp2 != std::string::npos) reason = " " + t.status_line.substr(sp2 + 1);
  std::string excerpt;
  if (kind == web::Kind::html) {
    try {
      excerpt = web::one_line(web::html_to_markdown(t.body, url, true).body, 300);
    } catch (const std::exception&) {
      // Too deep to convert: the status alone.
    }
  }
  else if (kind == web::Kind::text) excerpt = web::one_line(t.body, 300);
  return "HTTP " + std::to_string(status) + reason + " from " + url + (excerpt.empty() ? "" : ": " + excerpt);
}

std::string fetch(const tool::Args& args) {
  const std::string url = args.string("url");
  const std::string format = args.opt_string("format").value_or("markdown");
  if (format != "markdown" && format != "text" && format != "raw")
    throw tool::Error("invalid format: must be markdown, text or raw");
  const auto limit = static_cast<std::size_t>(args.opt_int("max_bytes", min_output, max_output).value_or(default_output));
  check_url(url);

  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> c(curl_easy_init(), curl_easy_cleanup);
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(
      curl_slist_append(nullptr, "Accept: text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.8"), curl_slist_free_all);
  if (!c || !headers) throw tool::Error("out of memory");
  Transfer t;
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
  curl_easy_setopt(h, CURLOPT_USERAGENT, "Mozilla/5.0 (compatible; ollie-web_fetch/0.1)");
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  CURLcode rc = curl_easy_perform(h);
  if (rc == CURLE_WRITE_ERROR && t.cut) rc = CURLE_OK;
  if (rc != CURLE_OK) throw tool::Error(failure(rc, errbuf));

  long status = 0;
  char* ctype = nullptr;
  char* effective = nullptr;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype);
  curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &effective);
  const std::string content_type = ctype ? ctype : "", final_url = effective ? effective : url;
  const std::string type = web::media_type(content_type);
  const web::Kind kind = web::classify(type, t.body);
  if (kind != web::Kind::binary) {
    const std::string cs = web::charset(content_type, t.body, kind);
    t.body = web::to_utf8(std::move(t.body), cs);
  }
  if (status >= 400) throw tool::Error(http_error(status, t, kind, final_url));

  const std::string got = std::to_string(t.body.size()) + " bytes" + (t.cut ? " (download stopped at the 5 MiB limit)" : "");
  if (kind == web::Kind::binary)
    return "binary content not shown: " + (type.empty() ? std::string("no type") : type) + ", " + got + "\nURL: " + final_url;

  const std::string info = "URL: " + final_url + " · " + (type.empty() ? std::string("no type") : type) + " · " + got;
  std::string out;
  if (format == "raw") {
    out = std::move(t.body);
  } else if (kind == web::Kind::html) {
    const web::Page page = web::html_to_markdown(t.body, final_url, format == "text");
    if (!page.title.empty()) out = (format == "text" ? "" : "# ") + page.title + "\n";
    out += info + "\n\n" + (page.body.empty() ? "(no text content)" : page.body);
  } else {
    out = info + "\n\n" + t.body;
  }
  if (out.size() > limit) {
    const std::size_t total = out.size();
    out.resize(web::utf8_prefix(out, limit).size());
    out += "\n\n[… output cut: " + std::to_string(out.size()) + " of " + std::to_string(total) +
           " bytes shown; max_bytes (up to " + std::to_string(max_output) + ") shows more]";
  }
  if (t.cut && format == "raw") out += "\n[download stopped at the 5 MiB limit: the rest was not fetched]";
  return out;
}

}  // namespace

int main() {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const int status = tool::run(fetch);
  curl_global_cleanup();
  return status;
}
