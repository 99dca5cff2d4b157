// web_fetch: one http or https URL, as Markdown (HTML converted), plain text or the raw body.
#include <curl/curl.h>

#include <string>

#include "content.hpp"
#include "html.hpp"
#include "http.hpp"
#include "tool.hpp"

namespace {

// Bytes of output a call shows: under the 8192 bytes the engine keeps of a result (§8.3.4, a
// longer one cut from its middle), so the rest is reached with `offset`, never lost in a cut.
constexpr std::size_t window = 7 * 1024;

/// "HTTP 404 Not Found from <url>: <the start of the page's text>".
std::string http_error(const web::Response& t, web::Kind kind, const std::string& url) {
  const std::string why = web::reason(t);
  std::string excerpt;
  if (kind == web::Kind::html) {
    try {
      excerpt = web::one_line(web::html_to_markdown(t.body, url, true).body, 300);
    } catch (const std::exception&) {
      // Too deep to convert: the status alone.
    }
  }
  else if (kind == web::Kind::text) excerpt = web::one_line(t.body, 300);
  return "HTTP " + std::to_string(t.status) + (why.empty() ? "" : " " + why) + " from " + url +
         (excerpt.empty() ? "" : ": " + excerpt);
}

std::string fetch(const tool::Args& args) {
  const std::string url = args.string("url");
  const std::string format = args.opt_string("format").value_or("markdown");
  if (format != "markdown" && format != "text" && format != "raw")
    throw tool::Error("invalid format: must be markdown, text or raw");
  const auto offset = static_cast<std::size_t>(args.opt_int("offset", 0, 1LL << 40).value_or(0));
  web::Response t = web::get(url, "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.8",
                             "Mozilla/5.0 (compatible; ollie-web_fetch/0.1)");
  const std::string& content_type = t.content_type;
  const std::string& final_url = t.final_url;
  const std::string type = web::media_type(content_type);
  const web::Kind kind = web::classify(type, t.body);
  const std::size_t downloaded = t.body.size();  // as sent, before any conversion to UTF-8
  if (kind != web::Kind::binary) {
    const std::string cs = web::charset(content_type, t.body, kind, t.cut);
    t.body = web::to_utf8(std::move(t.body), cs);
  }
  // A 3xx here is a redirect with nowhere to go (no Location): not the page asked for.
  if (t.status >= 300) throw tool::Error(http_error(t, kind, final_url));
  // A byte order mark said UTF-8 (charset()); before the page's first tag it would be text.
  if (format != "raw" && kind != web::Kind::binary && t.body.starts_with(web::utf8_bom)) t.body.erase(0, web::utf8_bom.size());

  const std::string got = std::to_string(downloaded) + " bytes" + (t.cut ? " (download stopped at the 5 MiB limit)" : "");
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
  if (offset > 0 || out.size() > window) {
    const std::size_t total = out.size();
    if (offset >= total)
      throw tool::Error("offset " + std::to_string(offset) + " is past the end of the output (" + std::to_string(total) + " bytes)");
    // From the character the offset falls in, up to the window's last whole character.
    std::size_t from = offset;
    while (from > 0 && (static_cast<unsigned char>(out[from]) & 0xC0) == 0x80) from--;
    const std::size_t to = from + web::utf8_prefix(std::string_view(out).substr(from), window).size();
    out = out.substr(from, to - from);
    if (to < total)
      out += "\n\n[… output cut: bytes " + std::to_string(from) + "-" + std::to_string(to) + " of " + std::to_string(total) +
             " shown; continue with offset=" + std::to_string(to) + "]";
    else
      out += "\n\n[bytes " + std::to_string(from) + "-" + std::to_string(to) + " of " + std::to_string(total) + ": the end]";
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
