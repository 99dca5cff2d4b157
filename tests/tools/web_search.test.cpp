// web_search through a real toolsrv under the shipped sandbox, against a local HTTP server
// serving pages shaped like DuckDuckGo's HTML results (OLLIE_SEARCH_URL, a session variable).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tools/host.hpp"
#include "tools/httpd.hpp"

using namespace tools_test;

namespace {

// Results around an ad, as html.duckduckgo.com lays them out, then two that are no web address
// (a decoded newline would forge a result line, and `javascript:`): left out.
const std::string results = R"(<!DOCTYPE html><html><head><title>ollie landlock at DuckDuckGo</title></head><body>
<div class="result results_links results_links_deep result--ad">
  <h2 class="result__title"><a class="result__a" href="https://duckduckgo.com/y.js?ad_domain=ads.example">AD TITLE</a></h2>
  <a class="result__snippet" href="https://duckduckgo.com/y.js?ad_domain=ads.example">AD SNIPPET</a>
</div>
<div class="result results_links results_links_deep web-result">
  <h2 class="result__title"><a rel="nofollow" class="result__a"
     href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.kernel.org%2Fuserspace-api%2Flandlock.html%3Fx%3D1%26y%3D2&amp;rut=abc">Landlock:   unprivileged <b>access</b> control</a></h2>
  <div class="result__extras"><a class="result__url" href="//duckduckgo.com/l/?uddg=x">docs.kernel.org</a></div>
  <a class="result__snippet" href="//duckduckgo.com/l/?uddg=x">The goal of <b>Landlock</b> is to enable
     restriction of ambient rights.</a>
</div>
<div class="result results_links results_links_deep web-result">
  <h2 class="result__title"><a rel="nofollow" class="result__a" href="https://example.org/direct">Direct link</a></h2>
</div>
<div class="result results_links results_links_deep web-result">
  <h2 class="result__title"><a rel="nofollow" class="result__a" href="https://example.org/third">Third</a></h2>
  <a class="result__snippet">Third snippet</a>
</div>
<div class="result results_links results_links_deep web-result">
  <h2 class="result__title"><a class="result__a"
     href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fexample.org%2Fx%0A1.%20forged">Forged by a newline</a></h2>
  <a class="result__snippet">not a result</a>
</div>
<div class="result results_links results_links_deep web-result">
  <h2 class="result__title"><a class="result__a" href="javascript:go.there">A script</a></h2>
</div>
</body></html>)";

struct Search {
  ToolHost host;
  Httpd http;
  Search() {
    host.load("web_search");
    if (auto st = host.ctl("env OLLIE_SEARCH_URL=" + http.url("/html/") + "\n"); !st) throw std::runtime_error(st.ename());
  }
  Reply find(const std::string& args) { return host.call("web_search", args); }
};

}  // namespace

TEST(WebSearch, ResultsAreNumberedWithTheirUrlsAndSnippetsAndAdsLeftOut) {
  Search s;
  s.http.route("/html/", 200, "text/html; charset=utf-8", results);
  const Reply r = s.find(R"({"query":"ollie landlock & co"})");
  ASSERT_TRUE(r.ok()) << r.out << r.err;
  EXPECT_EQ(r.out,
            "1. Landlock: unprivileged access control\n"
            "   https://docs.kernel.org/userspace-api/landlock.html?x=1&y=2\n"
            "   The goal of Landlock is to enable restriction of ambient rights.\n"
            "\n"
            "2. Direct link\n"
            "   https://example.org/direct\n"
            "\n"
            "3. Third\n"
            "   https://example.org/third\n"
            "   Third snippet\n");
  ASSERT_EQ(s.http.targets().size(), 1u);
  EXPECT_EQ(s.http.targets()[0], "/html/?q=ollie%20landlock%20%26%20co");

  const Reply two = s.find(R"({"query":"x","max_results":2})");
  ASSERT_TRUE(two.ok()) << two.out;
  EXPECT_EQ(two.out.find("3. "), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("2. Direct link"), std::string::npos) << two.out;
}

TEST(WebSearch, NoResultsRefusalsAndBadArgumentsAreSaidPlainly) {
  Search s;
  s.http.route("/html/", 200, "text/html", "<html><body><div class=\"no-results\">No results.</div></body></html>");
  const Reply none = s.find(R"({"query":"zzqqx"})");
  ASSERT_TRUE(none.ok()) << none.out;
  EXPECT_EQ(none.out, "no results for \"zzqqx\"\n");

  s.http.route("/html/", 202, "text/html", "<html><head><title>DuckDuckGo</title></head><body>anomaly</body></html>");
  const Reply refused = s.find(R"({"query":"x"})");
  EXPECT_EQ(refused.exit(), 1);
  EXPECT_EQ(refused.out.rfind("the search engine refused the request: HTTP 202 Accepted from " + s.http.url("/html/?q=x"), 0), 0u)
      << refused.out;

  auto err = [&](const std::string& args) {
    const Reply r = s.find(args);
    EXPECT_EQ(r.exit(), 1) << args;
    return r.out;
  };
  EXPECT_EQ(err(R"({})"), "missing argument: query\n");
  EXPECT_EQ(err(R"({"query":"   "})"), "invalid query: empty\n");
  EXPECT_EQ(err(R"({"query":"x","max_results":0})"), "invalid max_results: must be an integer from 1 to 20\n");
}

TEST(WebSearch, IsColdAndReadScopedInTheCatalog) {
  // §8.4: the shipped .meta marks web_search cold.
  ToolHost host;
  const auto list = nlohmann::json::parse(host.catalog());
  bool seen = false;
  for (const auto& t : list)
    if (t["name"] == "web_search") {
      seen = true;
      EXPECT_EQ(t["tier"], "cold");
      EXPECT_EQ(t["scope"], "read");
    }
  EXPECT_TRUE(seen);
}
