// tools-bench: the file tools through a real toolsrv against the programs they stand in for,
// run directly, interleaved in one run (this machine's speed drifts from minute to minute):
//
//   file_grep (ripgrep variant) vs rg with the same pattern, over a generated tree of 20,000
//   C-like files (~100 MB, under /tmp, made once and reused);
//   file_read of a 50 MB file (first 2000 lines, the whole file scanned for its line count)
//   vs cat of that file.
//
// Each figure is the median of the repetitions; the ratio is tool / direct. file_grep's
// own engine (no rg) is timed once, for scale.
//
//   tools-bench [repetitions]

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/bench.hpp"
#include "tools/host.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using testing_support::median;

const std::string tree = "/tmp/ollie-bench-tree-v1";
const std::string big = tree + "-big.txt";

// Deterministic C-like text: functions with comments, a needle in one file of 1000.
struct Gen {
  std::uint64_t s = 0x9E3779B97F4A7C15ull;
  std::uint64_t next() { return s = s * 6364136223846793005ull + 1442695040888963407ull; }
  std::string word() {
    static const char* w[] = {"count", "buffer", "index", "node", "value", "result", "length", "item", "next", "state"};
    return w[(next() >> 33) % 10];
  }
};

void make_tree() {
  if (std::filesystem::exists(tree + "/.complete") && std::filesystem::exists(big)) return;
  std::printf("generating %s (20,000 files) and %s ...\n", tree.c_str(), big.c_str());
  std::fflush(stdout);
  std::filesystem::remove_all(tree);
  Gen g;
  for (int d = 0; d < 200; d++) {
    const std::string dir = tree + "/mod" + std::to_string(d);
    std::filesystem::create_directories(dir);
    for (int f = 0; f < 100; f++) {
      std::string text = "#include <stdio.h>\n\n";
      for (int fn = 0; text.size() < 5000; fn++) {
        const std::string name = g.word() + "_" + std::to_string(fn);
        text += "/* " + g.word() + " the " + g.word() + " of " + g.word() + " */\nstatic int " + name + "(int " + g.word() +
                ") {\n  int " + g.word() + " = " + std::to_string(g.next() % 1000) + ";\n  return " + g.word() + " + 1;\n}\n\n";
      }
      if ((d * 100 + f) % 1000 == 7) text += "int ollie_needle_" + std::to_string(d * 100 + f) + " = 42;\n";
      std::ofstream(dir + "/file" + std::to_string(f) + ".c", std::ios::binary) << text;
    }
  }
  {
    std::ofstream out(big, std::ios::binary);
    for (int i = 0; out.tellp() < 50 * 1000 * 1000; i++) out << "line " << i << ": " << g.word() << " " << g.word() << " " << std::string(60, 'x') << "\n";
  }
  std::ofstream(tree + "/.complete") << "v1\n";
}

// Runs argv, reads its stdout to the end; seconds.
double run(const std::vector<std::string>& args, std::size_t* bytes = nullptr) {
  int p[2];
  if (::pipe(p) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addclose(&fa, p[0]);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const auto start = Clock::now();
  pid_t pid;
  if (::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) throw std::runtime_error("spawn " + args[0]);
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  std::vector<char> buf(1 << 16);
  std::size_t n = 0;
  for (ssize_t r; (r = ::read(p[0], buf.data(), buf.size())) > 0;) n += static_cast<std::size_t>(r);
  ::close(p[0]);
  ::waitpid(pid, nullptr, 0);
  if (bytes) *bytes = n;
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double timed_call(tools_test::ToolHost& host, const std::string& tool, const std::string& args, std::size_t* bytes) {
  const auto start = Clock::now();
  auto r = host.call(tool, args, 600);
  const double t = std::chrono::duration<double>(Clock::now() - start).count();
  if (!r.ok()) throw std::runtime_error(tool + " failed: " + r.out + r.err);
  *bytes = r.out.size();
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  ::setenv("OLLIE_BUILD_DIR", OLLIE_BENCH_BUILD_DIR, 0);
  ::setenv("OLLIE_SOURCE_DIR", OLLIE_BENCH_SOURCE_DIR, 0);
  try {
    make_tree();
    // The shipped policy, with the generated files readable.
    std::string policy = tools_test::read_file(tools_test::source("data/sandbox.yaml"));
    const auto ro = policy.find("ro:  [");
    if (ro == std::string::npos) throw std::runtime_error("sandbox.yaml: no ro list");
    policy.insert(ro + 6, "\"" + tree + "\", \"" + big + "\", ");
    tools_test::ToolHost host(policy);
    host.load("file_grep file_read");
    if (host.catalog().find("Rust regex") == std::string::npos) throw std::runtime_error("file_grep: rg variant not selected");

    struct Case {
      const char* name;
      std::string tool, args;
      std::vector<std::string> direct;
      std::vector<double> t_tool, t_direct;
      std::size_t out_tool = 0, out_direct = 0;
    };
    std::vector<Case> cases = {
        {"grep rare (20 matches)", "file_grep", R"({"pattern":"ollie_needle_\\d+","path":")" + tree + R"("})",
         {"rg", "-n", "-e", "ollie_needle_\\d+", tree}},
        {"grep common, count", "file_grep", R"({"pattern":"return \\w+","path":")" + tree + R"(","output":"count"})",
         {"rg", "-c", "-e", "return \\w+", tree}},
        {"read 50 MB, 2000 lines", "file_read", R"({"path":")" + big + R"("})", {"cat", big}},
    };
    for (auto& c : cases) (void)timed_call(host, c.tool, c.args, &c.out_tool), run(c.direct);  // warm the cache
    for (int r = 0; r < reps; r++)
      for (auto& c : cases) {
        c.t_tool.push_back(timed_call(host, c.tool, c.args, &c.out_tool));
        c.t_direct.push_back(run(c.direct, &c.out_direct));
      }
    std::printf("tools-bench: %d repetitions, interleaved; tree %s (20,000 files), big file %s\n", reps, tree.c_str(), big.c_str());
    std::printf("%-26s %12s %12s %8s %12s %12s\n", "case", "tool ms", "direct ms", "ratio", "tool bytes", "direct bytes");
    for (const auto& c : cases) {
      const double a = median(c.t_tool) * 1000, b = median(c.t_direct) * 1000;
      std::printf("%-26s %12.1f %12.1f %7.2fx %12zu %12zu   (direct: %s)\n", c.name, a, b, a / b, c.out_tool, c.out_direct,
                  c.direct[0].c_str());
    }
    // The own engine, once, run directly (no toolsrv): what a host without rg gets.
    const std::string in = host.root + "/walk.json";
    tools_test::write_file(in, cases[0].args);
    const std::string cmd = "'" + testing_support::built("tools/file_grep") + "' < '" + in + "' > /dev/null";
    const auto start = Clock::now();
    (void)!std::system(cmd.c_str());
    std::printf("%-26s %12.1f   (file_grep's own engine, run directly, once)\n", "grep rare, no rg",
                std::chrono::duration<double>(Clock::now() - start).count() * 1000);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tools-bench: %s\n", e.what());
    return 1;
  }
}
