// .meta parsing, variants, discovery and registries.

#include <unistd.h>

#include <gtest/gtest.h>

#include "toolsrv/catalog.hpp"
#include "world.hpp"

namespace toolsrv::test {
namespace {

HostFacts host() {
  HostFacts h;
  std::tie(h.os, h.arch) = host_os_arch();
  h.path = {"/usr/bin", "/bin"};
  h.env = {{"HOME", "/home/me"}, {"LANG", "C"}};
  return h;
}

std::string error_of(const std::string& text, bool has_exe = true) {
  auto r = parse_meta("t", "/d", text, has_exe, host());
  return r ? "" : r.ename();
}

TEST(Meta, DefaultsApplied) {
  auto t = parse_meta("t", "/d", R"({"description": "D."})", true, host());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->prompt, "D.");
  EXPECT_EQ(t->tier, "hot");
  EXPECT_EQ(t->scope, Scope::global);
  EXPECT_EQ(t->timeout, 30);
  EXPECT_EQ(t->args, nlohmann::json::parse(R"({"type":"object","properties":{}})"));
  EXPECT_EQ(t->exe_path, "/d/t");
  EXPECT_FALSE(t->cmd);
  EXPECT_EQ(tool_json(*t).dump(),
            R"({"name":"t","description":"D.","prompt":"D.","parameters":{"properties":{},"type":"object"},"scope":"global","tier":"hot","timeout":30})");
}

TEST(Meta, InvalidFilesNamed) {
  EXPECT_EQ(error_of("{\"description\": "), "invalid JSON: parse error at line 1, column 17: unexpected end of input; expected '[', '{', or a literal");
  // The text the parser last read is not shown: the .meta may be a symlink the model planted to a
  // file it cannot read (the error reaches it through tool_load).
  EXPECT_EQ(error_of("\"sk-live-SECRET\n"), "invalid JSON: parse error at line 2, column 0: invalid string: control character U+000A (LF) must be escaped to \\u000A or \\n");
  EXPECT_EQ(error_of("{\"description\": \"d\", \"token\": sk-live-SECRET}"), "invalid JSON: parse error at line 1, column 31: invalid literal");
  EXPECT_EQ(error_of("{\"a\": tru }"), "invalid JSON: parse error at line 1, column 10: invalid literal");
  EXPECT_EQ(error_of("[]"), "a .meta must be a JSON object");
  EXPECT_EQ(error_of("{}"), "description is required");
  EXPECT_EQ(error_of(R"({"description": " \n"})"), "description is empty");
  EXPECT_EQ(error_of(R"({"description": "d", "variants": [{"description": ""}]})"), "variant 1: description is empty");
  EXPECT_EQ(error_of(R"({"description": "d", "args": {"type": "object", "required": "path"}})"), "args.required must be an array of names");
  EXPECT_EQ(error_of(R"({"description": "d", "args": {"type": "object", "required": ["path", 1]}})"), "args.required must be an array of names");
  EXPECT_EQ(error_of(R"({"description": "d", "args": {"type": "object", "properties": {"path": "string"}}})"),
            "args.properties.path must be an object");
  EXPECT_EQ(error_of(R"({"description": "d", "tier": "lukewarm"})"), "tier must be hot, warm or cold");
  EXPECT_EQ(error_of(R"({"description": "d", "scope": "all"})"), "scope must be read, write or global");
  EXPECT_EQ(error_of(R"({"description": "d", "args": {"type": "string"}})"), "args must be a JSON Schema object");
  EXPECT_EQ(error_of(R"({"description": "d", "args": {"type": "object", "properties": {"bypass": {}}}})"), "reserved argument name: bypass");
  EXPECT_EQ(error_of(R"({"description": "d", "timeout": -1})"), "timeout must be an integer from 0 to 31536000 (a year)");
  EXPECT_EQ(error_of(R"({"description": "d", "timeout": 40000000})"), "timeout must be an integer from 0 to 31536000 (a year)");
  EXPECT_EQ(error_of(R"({"description": "d", "timeout": 2.5})"), "timeout must be an integer from 0 to 31536000 (a year)");
  EXPECT_EQ(error_of(R"({"description": "d", "timeout": "5"})"), "timeout must be an integer from 0 to 31536000 (a year)");
  EXPECT_EQ(error_of(R"({"description": "d", "variants": [{"when": {"moon": "full"}}]})"), "variant 1: unknown condition: moon");
  EXPECT_EQ(error_of(R"({"description": "d"})", false), "no executable and no cmd: /d/t is not an executable file");
  EXPECT_EQ(error_of(R"({"description": "d", "cmd": "true", "readOnly": true})", false), "");
}

// An integer as JSON Schema counts them, as the call's `timeout` flag takes it (§6.8).
TEST(Meta, ATimeoutWrittenAsAWholeFloatIsItsInteger) {
  auto t = parse_meta("t", "/d", R"({"description": "D.", "timeout": 10.0})", true, host());
  ASSERT_TRUE(t) << t.ename();
  EXPECT_EQ(t->timeout, 10);
  EXPECT_EQ(tool_json(*t)["timeout"], 10);
}

TEST(Meta, FirstMatchingVariantWins) {
  const auto text = R"({"description": "top", "cmd": "c0", "scope": "read",
    "variants": [{"when": {"binary": "no-such-bin"}, "cmd": "c1"},
                 {"when": {"os": ")" + host().os + R"(", "env": ["LANG=C", "HOME"], "nenv": "DISPLAY"}, "cmd": "c2", "description": "second"},
                 {"cmd": "c3"}]})";
  auto t = parse_meta("t", "/d", text, false, host());
  ASSERT_TRUE(t) << t.ename();
  EXPECT_EQ(*t->cmd, "c2");
  EXPECT_EQ(t->description, "second");
  EXPECT_EQ(t->scope, Scope::read);
  // A field a variant cannot override is ignored there as at the top level (§7.2.1).
  auto u = parse_meta("t", "/d", R"({"description": "d", "cmd": "c0", "variants": [{"note": "x", "variants": 1, "cmd": "c1"}]})",
                      false, host());
  ASSERT_TRUE(u) << u.ename();
  EXPECT_EQ(*u->cmd, "c1");
}

TEST(Meta, NoMatchingVariantIsNotAvailable) {
  EXPECT_EQ(error_of(R"({"description": "d", "cmd": "x", "variants": [{"when": {"arch": "s390x", "os": "plan9"}}]})"),
            "not available on this host");
  EXPECT_EQ(error_of(R"({"description": "d", "cmd": "x", "variants": [{"when": {"file": "/no/such/file"}}]})"),
            "not available on this host");
}

// §7.2.3: `file` expands `~` and `$VAR` from the tools' environment and nothing else: no word
// splitting, no quotes, no globs (a planted `/*/*/*/*` walked the whole disk at every scan).
TEST(Meta, FileConditionExpandsOnlyTildeAndVariables) {
  const auto dir = temp_dir("file");
  for (const char* f : {"a b", "g*", "p$", "q${"}) write_file(dir + "/" + f, "");
  auto h = host();
  h.env["HOME"] = dir;
  h.env["V"] = dir;
  auto holds = [&](const std::string& path) {
    const nlohmann::json meta = {{"description", "d"}, {"cmd", "x"}, {"variants", {{{"when", {{"file", path}}}}}}};
    auto r = parse_meta("t", "/d", meta.dump(), false, h);
    return r ? "" : r.ename();
  };
  const std::string no = "not available on this host";
  EXPECT_EQ(holds("~"), "");
  EXPECT_EQ(holds("~/a b"), "");
  EXPECT_EQ(holds("$V/a b"), "");
  EXPECT_EQ(holds("${V}/a b"), "");
  EXPECT_EQ(holds("$HOME"), "");
  EXPECT_EQ(holds(dir + "/g*"), "");   // a literal star
  EXPECT_EQ(holds(dir + "/a*"), no);   // not a glob: `a b` does not count
  EXPECT_EQ(holds(dir + "/p$"), "");   // a `$` before no name is itself
  EXPECT_EQ(holds(dir + "/q${"), "");
  EXPECT_EQ(holds("$NOPE/a b"), no);   // unset: the condition fails
  EXPECT_EQ(holds("'" + dir + "/a b'"), no);  // quotes are characters of the name
  EXPECT_EQ(holds("~nobody"), no);
  h.env.erase("HOME");
  EXPECT_EQ(holds("~/a b"), no);
}

// A `.meta` the model wrote into a tool directory (§7.2.2) is an invalid tool, never a crash:
// nested a million deep, or larger than a MiB (read no further than that).
TEST(Meta, DeepOrHugeMetaIsAnInvalidTool) {
  const std::string deep = R"({"description": "d", "x": )" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  EXPECT_EQ(error_of(deep), "nested deeper than 64 levels");
  std::string schema = R"({"type": "string"})";
  for (int i = 0; i < 20; i++) schema = R"({"type": "object", "properties": {"p": )" + schema + "}}";
  EXPECT_EQ(error_of(R"({"description": "d", "args": {"type": "object", "properties": {"p": )" + schema + "}}}"), "");
  const auto dir = temp_dir("huge");
  write_file(dir + "/big.meta", "");
  ASSERT_EQ(::truncate((dir + "/big.meta").c_str(), 64LL << 30), 0);  // 64 GiB, sparse
  write_file(dir + "/ok.meta", R"({"description": "fine", "cmd": "true"})");
  const auto entries = scan_tools({dir}, host());
  ASSERT_NE(find_entry(entries, "big"), nullptr);
  EXPECT_EQ(find_entry(entries, "big")->error, dir + "/big.meta: too large (limit 1048576 bytes)");
  ASSERT_NE(find_entry(entries, "ok"), nullptr);
  EXPECT_TRUE(find_entry(entries, "ok")->tool);
}

TEST(Catalog, FixtureDirectoryListsInvalidToolsWithErrors) {
  const auto entries = scan_tools({fixture_tools}, host());
  const auto j = catalog_json(entries);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& e : j) by_name[e["name"]] = e;
  EXPECT_EQ(by_name["broken"]["error"].get<std::string>().rfind("invalid JSON: ", 0), 0u);
  EXPECT_EQ(by_name["noexec"]["error"], "no executable and no cmd: " + fixture_tools + "/noexec is not an executable file");
  EXPECT_EQ(by_name["unavailable"]["error"], "not available on this host");
  EXPECT_EQ(by_name["reserved"]["error"], "reserved argument name: timeout");
  EXPECT_EQ(by_name["variant"]["description"], "Second variant.");
  EXPECT_EQ(by_name["echo"]["outputFormat"], "json");
  EXPECT_EQ(by_name["echo"]["timeout"], 5);
  EXPECT_FALSE(by_name["shell"].contains("error"));
  // Sorted by name.
  for (std::size_t i = 1; i < j.size(); ++i) EXPECT_LT(j[i - 1]["name"], j[i]["name"]);
}

TEST(Catalog, FirstDirectoryWinsAndRelativeDirsAreSkipped) {
  const auto dir = temp_dir("tools");
  write_file(dir + "/echo.meta", R"({"description": "Shadowing echo.", "cmd": "true"})");
  std::vector<std::string> warnings;
  const auto dirs = tool_dirs("rel/tools:" + dir + ":" + fixture_tools, "/cfg", &warnings);
  EXPECT_EQ(dirs, (std::vector<std::string>{dir, fixture_tools}));
  EXPECT_EQ(warnings, (std::vector<std::string>{"tool directory not absolute, skipped: rel/tools"}));
  EXPECT_EQ(tool_dirs("", "/cfg", nullptr), (std::vector<std::string>{"/cfg/tools"}));
  // A relative config root (toolsrv -config cfg/ollie) is skipped too: a call's cwd would place it.
  std::vector<std::string> said;
  EXPECT_TRUE(tool_dirs("", "cfg/ollie", &said).empty());
  EXPECT_EQ(said, (std::vector<std::string>{"tool directory not absolute, skipped: cfg/ollie/tools"}));
  const auto entries = scan_tools(dirs, host());
  EXPECT_EQ(find_entry(entries, "echo")->tool->description, "Shadowing echo.");
}

TEST(Registry, LoadIsAllOrNothing) {
  const auto catalog = scan_tools({fixture_tools}, host());
  Registry r;
  EXPECT_EQ(r.load("a", {"echo", "nope"}, catalog).ename(), "unknown tool: nope");
  EXPECT_EQ(r.load("a", {"echo", "unavailable"}, catalog).ename(), "tool not available on this host: unavailable");
  EXPECT_EQ(r.load("a", {"echo", "broken"}, catalog).ename().rfind("invalid tool: broken: invalid JSON", 0), 0u);
  EXPECT_FALSE(r.loaded("a", "echo"));
  EXPECT_EQ(r.agent_json("a", catalog, nullptr).dump(), "[]");
  ASSERT_TRUE(r.load("a", {"shell", "echo"}, catalog));
  const auto list = r.agent_json("a", catalog, nullptr);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["name"], "echo");
  r.unload("a", {"echo", "never-loaded"});
  EXPECT_FALSE(r.loaded("a", "echo"));
  r.forget("a");
  EXPECT_FALSE(r.loaded("a", "shell"));
}

TEST(Registry, EditsTakeEffectWithoutRestart) {
  const auto dir = temp_dir("tools");
  write_file(dir + "/t.meta", R"({"description": "v1", "cmd": "true"})");
  Registry r;
  ASSERT_TRUE(r.load("a", {"t"}, scan_tools({dir}, host())));
  EXPECT_EQ(r.agent_json("a", scan_tools({dir}, host()), nullptr)[0]["description"], "v1");
  write_file(dir + "/t.meta", R"({"description": "v2", "cmd": "true"})");
  EXPECT_EQ(r.agent_json("a", scan_tools({dir}, host()), nullptr)[0]["description"], "v2");
  write_file(dir + "/t.meta", R"({"description": )");
  std::vector<std::string> dropped;
  EXPECT_EQ(r.agent_json("a", scan_tools({dir}, host()), &dropped).size(), 0u);
  EXPECT_EQ(dropped, std::vector<std::string>{"t"});
}

}  // namespace
}  // namespace toolsrv::test
