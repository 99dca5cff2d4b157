// sandbox.yaml parsing, merging, template expansion, path handling and override approval.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "toolsrv/cwd.hpp"
#include "toolsrv/override.hpp"
#include "toolsrv/paths.hpp"
#include "toolsrv/policy.hpp"
#include "toolsrv/sandbox.hpp"
#include "world.hpp"

namespace toolsrv::test {
namespace {

TEST(Policy, ShippedDefaultParses) {
  auto f = parse_policy(default_policy());
  ASSERT_TRUE(f) << f.ename();
  const auto p = effective_policy(*f, nullptr);
  EXPECT_FALSE(p.best_effort);
  EXPECT_EQ(p.rwx, (std::vector<std::string>{"{CWD}", "{TMPDIR}"}));
  EXPECT_EQ(p.ro.front(), "/etc");
  EXPECT_EQ(std::count(p.ro.begin(), p.ro.end(), "/proc"), 1);
  EXPECT_EQ(std::count(p.rw.begin(), p.rw.end(), "/tmp"), 0);
  EXPECT_TRUE(p.network.unrestricted);
  EXPECT_EQ(std::count(p.env.begin(), p.env.end(), "TMPDIR"), 0);
}

TEST(Policy, ErrorsNameKeyAndLine) {
  EXPECT_EQ(parse_policy("filesystem:\n  rox2: []\n").ename(), "line 2: unknown key: filesystem.rox2");
  EXPECT_EQ(parse_policy("filesystem:\n  ro: /etc\n").ename(), "line 2: filesystem.ro: expected a list of strings");
  EXPECT_EQ(parse_policy("network:\n  connect_tcp: [70000]\n").ename(), "line 2: network.connect_tcp: invalid port: 70000");
  EXPECT_EQ(parse_policy("general: {best_effort: maybe}\n").ename(), "line 1: general.best_effort: expected true or false");
  EXPECT_EQ(parse_policy("filesystem: [unclosed\n").ename().rfind("line ", 0), 0u);
  EXPECT_TRUE(parse_policy(""));
  // A key given twice is refused, at any depth: the second would be ignored, not applied.
  EXPECT_EQ(parse_policy("network:\n  enabled: true\nnetwork: {enabled: false}\n").ename(), "line 3: duplicate key: network");
  EXPECT_EQ(parse_policy("filesystem:\n  ro: []\n  ro: [/etc]\n").ename(), "line 3: duplicate key: filesystem.ro");
  // So is a second document: a lookup reads only the first.
  EXPECT_EQ(parse_policy("network:\n  enabled: true\n---\nnetwork: {enabled: false}\n").ename(),
            "line 4: a second YAML document: one policy per file");
  EXPECT_EQ(parse_policy("network: {enabled: true}\n...\nnetwork: {enabled: false}\n").ename().rfind("line ", 0), 0u);
  EXPECT_TRUE(parse_policy("---\nnetwork: {enabled: true}\n...\n"));
}

TEST(Policy, MissingFileIsAnError) {
  EXPECT_EQ(load_policy("/no/such/sandbox.yaml").ename(), "cannot open: No such file or directory");
  // The model may replace it (a cwd holding ~/.config): a FIFO is not waited on, a huge file not read.
  const auto dir = temp_dir("policy");
  ASSERT_EQ(::mkfifo((dir + "/fifo.yaml").c_str(), 0600), 0);
  EXPECT_EQ(load_policy(dir + "/fifo.yaml").ename(), "cannot open: not a regular file");
  EXPECT_EQ(load_policy("/dev/zero").ename(), "cannot open: not a regular file");
  write_file(dir + "/big.yaml", "# " + std::string(1u << 20, 'x') + "\n");
  EXPECT_EQ(load_policy(dir + "/big.yaml").ename(), "cannot open: larger than 1 MiB");
}

TEST(Policy, OverrideUnionsListsAndReplacesScalars) {
  auto g = parse_policy("general: {best_effort: false}\nfilesystem: {ro: [/a, /b]}\nnetwork: {unrestricted: true}\nenv: [HOME]\n");
  auto o = parse_policy("filesystem: {ro: [/b, /c]}\nnetwork: {unrestricted: false, connect_tcp: [443]}\n");
  ASSERT_TRUE(g && o);
  const auto p = effective_policy(*g, &*o);
  EXPECT_EQ(p.ro, (std::vector<std::string>{"/a", "/b", "/c"}));
  EXPECT_FALSE(p.best_effort) << "not present in the override: kept";
  EXPECT_FALSE(p.network.unrestricted);
  EXPECT_EQ(p.network.connect_tcp, std::vector<std::uint16_t>{443});
  EXPECT_EQ(p.env, std::vector<std::string>{"HOME"});
}

TEST(Sandbox, TemplatesExpand) {
  world();
  auto v = TemplateVars::for_call("/w", "/t", "/cfg", "/data", "/bin");
  EXPECT_EQ(v.expand("{CWD}/x"), "/w/x");
  EXPECT_EQ(v.expand("{OLLIE_CFG_PATH}/tools:{OLLIE_BIN_PATH}"), "/cfg/tools:/bin");
  EXPECT_EQ(v.expand("{HOME}"), world().home);
  EXPECT_EQ(v.expand("{XDG_CONFIG_HOME}/git"), world().root + "/config/git");
  EXPECT_EQ(v.expand("{NO_SUCH_VARIABLE_X}/y"), "{NO_SUCH_VARIABLE_X}/y");
}

TEST(Sandbox, MissingPathsSkippedDataPathsCreated) {
  world();
  Policy p;
  p.ro = {"/etc", "/no/such/dir", "relative/dir", "{NO_SUCH_VARIABLE_X}/a"};
  p.rw = {"{OLLIE_DATA_PATH}/optmem", "/dev/null"};
  const auto data = temp_dir("data");
  auto v = TemplateVars::for_call("/", "/tmp", "/cfg", data, "/usr/bin");
  const auto plan = plan_sandbox(p, v, writable_paths(p, v), {"/usr/bin"}, data, "");
  std::vector<std::string> paths;
  for (const auto& r : plan.rules) paths.push_back(r.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"/etc", data + "/optmem", "/dev/null", "/usr/bin"}));
  EXPECT_EQ(plan.skipped.size(), 3u);
  EXPECT_EQ(plan.skipped[0], "/no/such/dir: does not exist");
  EXPECT_TRUE(std::filesystem::is_directory(data + "/optmem"));
  EXPECT_EQ(std::filesystem::status(data + "/optmem").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
}

TEST(Sandbox, WritablePathsAreResolved) {
  const auto dir = temp_dir("w");
  std::filesystem::create_directory_symlink(dir, dir + "-link");
  Policy p;
  p.rwx = {dir + "-link"};
  auto v = TemplateVars::for_call("/", "/tmp", "/cfg", "/data", "/usr/bin");
  const auto w = writable_paths(p, v);
  EXPECT_TRUE(inside_writable(dir + "/tools/x", w));
  EXPECT_TRUE(inside_writable(dir + "-link/tools", w));
  EXPECT_FALSE(inside_writable(dir + "x", w));
  std::filesystem::remove(dir + "-link");
}

// Each way a path resolves: no link on it (the kernel's walk refusing links), a link in the
// middle and a link then `..` (the kernel's name of where the walk ended), a magic link of /proc,
// a tail that does not exist, and a dangling link followed only for a write's target.
TEST(Paths, ResolvedAsTheKernelWalksThem) {
  const auto dir = temp_dir("res");
  std::filesystem::create_directories(dir + "/a/b");
  std::filesystem::create_directory_symlink(dir + "/a/b", dir + "/link");
  std::filesystem::create_symlink(dir + "/a/new", dir + "/dangling");
  EXPECT_EQ(resolve_existing(dir + "/a/b"), dir + "/a/b");
  EXPECT_EQ(resolve_existing(dir + "/a/b/../b/"), dir + "/a/b");
  EXPECT_EQ(resolve_existing(dir + "/link"), dir + "/a/b");
  EXPECT_EQ(resolve_existing(dir + "/link/.."), dir + "/a");
  EXPECT_EQ(resolve_existing(dir + "/link/x/y"), dir + "/a/b/x/y");
  EXPECT_EQ(resolve_existing("/proc/self/cwd"), std::filesystem::current_path().string());
  EXPECT_EQ(resolve_existing(dir + "/dangling/f"), dir + "/dangling/f");
  EXPECT_EQ(resolve_write_target(dir + "/dangling/f"), dir + "/a/new/f");
  EXPECT_TRUE(no_link_on(dir + "/a/b"));
  EXPECT_FALSE(no_link_on(dir + "/link/"));
  EXPECT_FALSE(no_link_on(dir + "/a/c"));
  std::filesystem::remove_all(dir);
}

// Lexically, as path.Clean does; a path already clean comes back as it is.
TEST(Paths, CleanedLexically) {
  const std::vector<std::pair<std::string, std::string>> table = {
      {"/", "/"},          {"/a/b", "/a/b"},   {"a/b", "a/b"},         {".", "."},
      {"", "."},           {"//", "/"},        {"/a//b/", "/a/b"},     {"/a/./b", "/a/b"},
      {"/a/b/..", "/a"},   {"/..", "/"},       {"/a/../../b", "/b"},   {"a/../..", ".."},
      {"./a", "a"},        {"a/.", "a"},       {"/a/.b/..c", "/a/.b/..c"}, {"/a/b/", "/a/b"},
  };
  for (const auto& [in, want] : table) EXPECT_EQ(clean_path(in), want) << in;
}

TEST(Override, Sha256) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Override, ApprovalsNeedHashAndDirectory) {
  Approvals a;
  const std::string h(64, 'a');
  EXPECT_EQ(a.replace({{"xyz", "/d"}}).ename(), "invalid hash: xyz");
  EXPECT_EQ(a.replace({{h, "d"}}).ename(), "dir must be absolute: d");
  ASSERT_TRUE(a.replace({{h, "/p/q/"}}));
  EXPECT_TRUE(a.approved(h, "/p/q"));
  EXPECT_FALSE(a.approved(h, "/p"));
  EXPECT_FALSE(a.approved(std::string(64, 'b'), "/p/q"));
  ASSERT_TRUE(a.replace({}));
  EXPECT_FALSE(a.approved(h, "/p/q"));
}

// find_override in a directory, as a call does: through the held cwd's descriptor.
p9::Result<std::optional<ProjectOverride>> override_in(const std::string& dir, std::string* note) {
  auto held = HeldCwd::open(dir);
  if (!held) return held.error();
  return find_override(held->fd->get(), held->path, note);
}

TEST(Override, FoundWithoutFollowingSymlinks) {
  const auto dir = temp_dir("ov");
  std::string note;
  EXPECT_FALSE(*override_in(dir, &note));
  EXPECT_EQ(note, "");
  write_file(dir + "/.ollie-sandbox.yaml", "env: [X]\n");
  auto o = *override_in(dir, &note);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->bytes, "env: [X]\n");
  EXPECT_EQ(o->sha256, sha256_hex("env: [X]\n"));
  EXPECT_EQ(o->dir, dir);
  const auto other = temp_dir("ov");
  std::filesystem::create_symlink(dir + "/.ollie-sandbox.yaml", other + "/.ollie-sandbox.yaml");
  EXPECT_FALSE(*override_in(other, &note));
  EXPECT_NE(note.find("ignored"), std::string::npos);
}

// The model writes its cwd: a huge override is refused from its size alone, never read whole.
TEST(Override, LargerThan64KiBIgnoredBeforeReading) {
  const auto dir = temp_dir("ov");
  const auto path = dir + "/.ollie-sandbox.yaml";
  write_file(path, std::string(override_max_bytes, '#'));
  std::string note;
  auto fits = override_in(dir, &note);
  ASSERT_TRUE(fits) << fits.ename();
  ASSERT_TRUE(*fits);
  EXPECT_EQ((*fits)->bytes.size(), override_max_bytes);
  EXPECT_EQ(note, "");
  write_file(path, std::string(override_max_bytes + 1, '#'));
  auto big = override_in(dir, &note);
  ASSERT_TRUE(big) << big.ename();
  EXPECT_FALSE(*big);
  EXPECT_EQ(note, path + ": ignored: too large: 65537 bytes (limit 65536)");
  // 1.5 GB, sparse: ignored at once and without the memory to hold it.
  ASSERT_EQ(::truncate(path.c_str(), 1536LL << 20), 0);
  const auto start = std::chrono::steady_clock::now();
  big = override_in(dir, &note);
  ASSERT_TRUE(big) << big.ename();
  EXPECT_FALSE(*big);
  EXPECT_EQ(note, path + ": ignored: too large: 1610612736 bytes (limit 65536)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace toolsrv::test
