// web_search: a query through a DuckDuckGo HTML results page (no account, no key), as a numbered
// list of title, URL and snippet.
#include <curl/curl.h>
#include <gumbo.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "content.hpp"
#include "html.hpp"
#include "http.hpp"
#include "tool.hpp"

namespace {

constexpr long long default_results = 8, max_results = 20;
constexpr const char* default_endpoint = "https://html.duckduckgo.com/html/";

struct Result {
  std::string title, url, snippet;
};

const char* attr(const GumboNode* n, const char* name) {
  const GumboAttribute* a = gumbo_get_attribute(&n->v.element.attributes, name);
  return a ? a->value : "";
}

/// Whether the element's class attribute holds the token `cls`.
bool has_class(const GumboNode* n, std::string_view cls) {
  const std::string_view all = attr(n, "class");
  for (std::size_t i = 0; i < all.size();) {
    const std::size_t end = std::min(all.find_first_of(" \t\n\r\f", i), all.size());
    if (all.substr(i, end - i) == cls) return true;
    i = end + 1;
  }
  return false;
}

/// The text under `n`, whitespace collapsed, on one line of at most `max` bytes.
std::string text_of(const GumboNode* n, std::size_t max) {
  std::string out;
  std::vector<const GumboNode*> stack{n};
  while (!stack.empty()) {
    const GumboNode* c = stack.back();
    stack.pop_back();
    if (c->type == GUMBO_NODE_TEXT || c->type == GUMBO_NODE_WHITESPACE) {
      out += c->v.text.text;
    } else if (c->type == GUMBO_NODE_ELEMENT) {
      const GumboVector& kids = c->v.element.children;
      for (unsigned i = kids.length; i-- > 0;) stack.push_back(static_cast<const GumboNode*>(kids.data[i]));
    }
  }
  return web::one_line(out, max);
}

/// DuckDuckGo links a result through its redirector (`//duckduckgo.com/l/?uddg=<the URL>&…`):
/// the URL itself. Only a web address is a result: an ad's link (`/y.js?…`), another scheme
/// (`javascript:`) or a control character (a decoded newline would forge a result line of its
/// own) makes it "".
std::string result_url(std::string href) {
  if (href.rfind("//", 0) == 0) href = "https:" + href;
  if (href.find("duckduckgo.com/y.js") != std::string::npos) return "";
  std::string out = href;
  if (const auto at = href.find("uddg="); at != std::string::npos && href.find("duckduckgo.com/l/") != std::string::npos) {
    const std::size_t start = at + 5, end = std::min(href.find('&', start), href.size());
    int len = 0;
    char* raw = curl_easy_unescape(nullptr, href.data() + start, static_cast<int>(end - start), &len);
    out = raw ? std::string(raw, static_cast<std::size_t>(len)) : "";
    curl_free(raw);
  }
  const bool web = out.rfind("http://", 0) == 0 || out.rfind("https://", 0) == 0;
  if (!web || std::any_of(out.begin(), out.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; })) return "";
  return out;
}

/// The results of the page, in order: each `result__a` link starts one, the `result__snippet`
/// after it is its snippet. Ads (inside a `result--ad`, or linked through `/y.js`) are left out.
std::vector<Result> results_of(const GumboNode* root, std::size_t limit) {
  std::vector<Result> out;
  bool in_ad = false, open = false;  // open: the last link was a result still without its snippet
  struct Step {
    const GumboNode* n;  ///< nullptr: leaving an element, whose ad flag was `was_ad`
    bool was_ad;
  };
  std::vector<Step> stack{{root, false}};
  while (!stack.empty() && out.size() < limit + 1) {
    const Step s = stack.back();
    stack.pop_back();
    if (!s.n) {
      in_ad = s.was_ad;
      continue;
    }
    if (s.n->type != GUMBO_NODE_ELEMENT) continue;
    if (has_class(s.n, "result__a")) {
      const std::string url = in_ad ? "" : result_url(attr(s.n, "href"));
      open = !url.empty();
      if (open) out.push_back({text_of(s.n, 300), url, ""});
      continue;
    }
    if (has_class(s.n, "result__snippet")) {
      if (open) out.back().snippet = text_of(s.n, 500);
      open = false;
      continue;
    }
    stack.push_back({nullptr, in_ad});
    if (has_class(s.n, "result--ad")) in_ad = true;
    const GumboVector& kids = s.n->v.element.children;
    for (unsigned i = kids.length; i-- > 0;) stack.push_back({static_cast<const GumboNode*>(kids.data[i]), false});
  }
  if (out.size() > limit) out.resize(limit);
  return out;
}

std::string search(const tool::Args& args) {
  const std::string query = args.string("query");
  if (query.find_first_not_of(" \t\r\n") == std::string::npos) throw tool::Error("invalid query: empty");
  const auto limit = static_cast<std::size_t>(args.opt_int("max_results", 1, max_results).value_or(default_results));
  const char* set = std::getenv("OLLIE_SEARCH_URL");
  const std::string endpoint = set && *set ? set : default_endpoint;
  char* q = curl_easy_escape(nullptr, query.data(), static_cast<int>(query.size()));
  if (!q) throw tool::Error("out of memory");
  const std::string url = endpoint + (endpoint.find('?') == std::string::npos ? "?" : "&") + "q=" + q;
  curl_free(q);
  web::Response r = web::get(url, "text/html", "Mozilla/5.0 (compatible; ollie-web_search/0.1)");
  const std::string type = web::media_type(r.content_type);
  const web::Kind kind = web::classify(type, r.body);
  if (kind != web::Kind::binary) r.body = web::to_utf8(std::move(r.body), web::charset(r.content_type, r.body, kind, r.cut));
  const std::string why = web::reason(r);
  if (r.status >= 300 || r.status == 202)  // 202: DuckDuckGo's challenge to a client it takes for a robot
    throw tool::Error("the search engine refused the request: HTTP " + std::to_string(r.status) + (why.empty() ? "" : " " + why) +
                      " from " + r.final_url + "; try again later, or fetch a page you know with web_fetch");
  if (kind != web::Kind::html) throw tool::Error("the search engine answered " + (type.empty() ? std::string("no type") : type) + ", not HTML");
  if (web::nesting(r.body) > web::max_nesting) throw tool::Error("the search engine's page nests too deep to read");
  GumboOptions options = kGumboDefaultOptions;
  options.max_errors = 0;  // gumbo copies the open elements into each error it keeps
  GumboOutput* doc = gumbo_parse_with_options(&options, r.body.data(), r.body.size());
  const auto found = results_of(doc->root, limit);
  gumbo_destroy_output(&options, doc);
  if (found.empty()) return "no results for \"" + web::one_line(query, 200) + "\"";
  std::string out;
  for (std::size_t i = 0; i < found.size(); i++) {
    const auto& f = found[i];
    out += (i ? "\n" : "") + std::to_string(i + 1) + ". " + (f.title.empty() ? f.url : f.title) + "\n   " + f.url + "\n";
    if (!f.snippet.empty()) out += "   " + f.snippet + "\n";
  }
  return out;
}

}  // namespace

int main() {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const int status = tool::run(search);
  curl_global_cleanup();
  return status;
}
