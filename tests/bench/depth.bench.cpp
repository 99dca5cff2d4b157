// depth-bench: the figures of the engine in depth (issue 11) against the real bin/olliesrv (its
// real toolsrv and shipped tools) in a private HOME, the fake provider in-process answering at
// once (tests/olliesrv/world.hpp). Each figure comes with its baseline, measured in the same run,
// interleaved. Figures only, no assertions.
//
//   compaction  a turn of 200 file_read rounds: bytes sent to the provider per request with
//               result tiers and compaction (a 16,384-token context) against the same turn
//               without them (file_read made hot, a context too large to trigger); turn times
//   subagents   20 sub-agents started in one step, each one shell call then its answer: time
//               to all replies at the default cap (4) and with subagents = 20, against one agent
//               making the same 20 calls in sequence
//
//   depth-bench [compaction|subagents]...   (none: both)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "olliesrv/world.hpp"
#include "support/bench.hpp"

namespace {

using Clock = testing_support::BenchClock;
using testing_support::median;
using testing_support::ms_since;
using json = nlohmann::json;
namespace fs = std::filesystem;


/// Replaces the world's tools/ link by a directory linking every built tool; `hot_file_read`
/// gives file_read a .meta of tier hot (the shipped one is cold).
void own_tools(convo::World& w, bool hot_file_read) {
  const std::string dir = w.own_dir("tools");
  const std::string built = testing_support::built("tools");
  // Its own copy: the sandbox grants the tool directories, not the build tree a link points into.
  fs::remove(dir + "/file_read");
  fs::copy_file(fs::canonical(built + "/file_read"), dir + "/file_read");
  if (!hot_file_read) return;
  auto meta = json::parse(convo::read_file(built + "/file_read.meta"));
  meta["tier"] = "hot";
  fs::remove(dir + "/file_read.meta");
  convo::write_file(dir + "/file_read.meta", meta.dump() + "\n");
}

// ---- compaction ----

struct CompactionRun {
  std::vector<std::size_t> bytes;  // per chat request of the turn (summaries apart)
  std::size_t summaries = 0, summary_bytes = 0;
  double ms = 0;
  bool done = false;
};

/// One turn of `rounds` file_read calls, each of its own 4 KiB file (the per-turn cache never
/// answers), then an answer.
CompactionRun compaction_turn(bool with, int rounds) {
  const int context = with ? 16384 : 10'000'000;
  convo::World w(json{{"models", json::array({{{"id", "fake-model"}, {"context_length", context}}})}});
  own_tools(w, !with);
  std::string line(63, 'x');
  line += '\n';
  for (int i = 0; i < rounds; i++) {
    std::string text;
    for (int l = 0; l < 64; l++) text += "file " + std::to_string(i) + " line " + std::to_string(l) + " " + line;
    convo::write_file(w.project + "/f" + std::to_string(i) + ".txt", text);
  }
  auto s = w.session("bench");
  auto a = w.agent(s, "main");
  // Requests of the turn carry the tool list; a compaction's summary request has none.
  const std::string turn = "\"tools\":[";
  for (int i = 0; i < rounds; i++)
    w.fake.push({{"when", turn},
                 {"tool_calls", json::array({{{"id", "r" + std::to_string(i)},
                                              {"name", "file_read"},
                                              {"arguments", {{"path", "f" + std::to_string(i) + ".txt"}}}}})}});
  w.fake.push({{"when", turn}, {"text", "done-compaction"}});
  for (int i = 0; i < 50; i++)
    w.fake.push({{"when", "hand-off summary"},
                 {"text", "**Goal** read the files. **State** files read in order. **Open work** the next file."}});
  auto chat = w.open(a + "/chat");
  CompactionRun r;
  const auto t0 = Clock::now();
  if (!w.write(a + "/prompt", "read every file, one per step\n")) return r;
  auto text = convo::World::read_until(chat, "done-compaction", "", std::chrono::seconds(180));
  r.ms = ms_since(t0);
  r.done = text.find("done-compaction") != std::string::npos;
  for (const auto& b : convo::chat_texts(w)) {
    if (b.find(turn) != std::string::npos) {
      r.bytes.push_back(b.size());
    } else {
      r.summaries++;
      r.summary_bytes += b.size();
    }
  }
  if (!r.done) std::printf("the turn did not finish; olliesrv log tail:\n%s\n", w.log_text().substr(w.log_text().size() > 2000 ? w.log_text().size() - 2000 : 0).c_str());
  return r;
}

void bench_compaction() {
  const int rounds = 200, reps = 2;
  std::printf("\n== compaction: a turn of %d file_read rounds (4 KiB files), instant model ==\n", rounds);
  std::vector<double> with_ms, without_ms;
  CompactionRun with, without;
  for (int rep = 0; rep < reps; rep++) {
    with = compaction_turn(true, rounds);
    without = compaction_turn(false, rounds);
    if (!with.done || !without.done) return;
    with_ms.push_back(with.ms);
    without_ms.push_back(without.ms);
  }
  auto total = [](const std::vector<std::size_t>& v) {
    std::size_t t = 0;
    for (auto b : v) t += b;
    return t;
  };
  auto row = [&](const char* what, const CompactionRun& r, double ms) {
    const std::size_t sent = total(r.bytes) + r.summary_bytes;
    std::printf("%-44s %4zu requests, %9.1f KiB sent (%7.1f KiB per round), last request %7.1f KiB, largest %7.1f KiB; "
                "%zu summaries (%.1f KiB); turn %.0f ms (%.2f ms per round)\n",
                what, r.bytes.size(), sent / 1024.0, sent / 1024.0 / rounds, r.bytes.back() / 1024.0,
                *std::max_element(r.bytes.begin(), r.bytes.end()) / 1024.0, r.summaries, r.summary_bytes / 1024.0, ms,
                ms / rounds);
    return sent;
  };
  const auto a = row("tiers + compaction (context 16,384 tokens):", with, median(with_ms));
  const auto b = row("without (file_read hot, no trigger):", without, median(without_ms));
  std::printf("bytes sent: %.3fx of the baseline (%.1f%% saved); turn time %.2fx (median of %d turns each, interleaved)\n",
              static_cast<double>(a) / static_cast<double>(b), 100.0 * (1.0 - static_cast<double>(a) / static_cast<double>(b)),
              median(with_ms) / median(without_ms), reps);
}

// ---- subagents ----

/// One turn of `main` in world `w`: the prompt's write to `done` in its chat, in ms (-1: it did not end).
double timed_turn(convo::World& w, const std::string& agent, const std::string& prompt, const std::string& done) {
  auto chat = w.open(agent + "/chat");
  const auto t0 = Clock::now();
  if (!w.write(agent + "/prompt", prompt + "\n")) return -1;
  auto text = convo::World::read_until(chat, done, "", std::chrono::seconds(120));
  const double ms = ms_since(t0);
  if (text.find(done) == std::string::npos) return -1;
  w.wait_state(agent, "idle");
  return ms;
}

/// 20 sub-agents from one step of `main`, each: a shell call, then its answer.
double fan_out(convo::World& w, const std::string& agent, const std::string& tag, int n) {
  json calls = json::array();
  for (int i = 0; i < n; i++) {
    const std::string id = tag + "-" + std::to_string(i) + "-end";
    calls.push_back({{"id", "c" + std::to_string(i)}, {"name", "subagent_spawn"}, {"arguments", {{"prompt", "task-" + id}}}});
    w.fake.push({{"when", "done-" + id}, {"text", "reply-" + id}});
    w.fake.push({{"when", "task-" + id}, {"tool_calls", json::array({{{"id", "s"}, {"name", "shell"}, {"arguments", {{"cmd", "echo done-" + id}}}}})}});
  }
  w.fake.push({{"when", "fan-out-" + tag}, {"tool_calls", calls}});
  const std::string last = "reply-" + tag + "-" + std::to_string(n - 1) + "-end";
  w.fake.push({{"when", last}, {"text", "all-" + tag}});
  return timed_turn(w, agent, "fan-out-" + tag, "all-" + tag);
}

/// The same calls made by one agent in sequence: n rounds of a shell call, then its answer.
double in_sequence(convo::World& w, const std::string& agent, const std::string& tag, int n) {
  for (int i = 0; i < n; i++)
    w.fake.push({{"when", "seq-" + tag},
                 {"tool_calls", json::array({{{"id", "q" + std::to_string(i)}, {"name", "shell"},
                                              {"arguments", {{"cmd", "echo done-" + tag + "-" + std::to_string(i)}}}}})}});
  w.fake.push({{"when", "seq-" + tag}, {"text", "all-seq-" + tag}});
  return timed_turn(w, agent, "seq-" + tag, "all-seq-" + tag);
}

void bench_subagents() {
  const int n = 20, reps = 3;
  std::printf("\n== subagents: %d sub-agents from one step (each one shell call, then its answer), instant model ==\n", n);
  convo::World w;
  auto s = w.session("bench");
  auto a = w.agent(s, "main");
  if (!w.rdwr(a + "/ctl", "tool_load subagent_spawn")) {
    std::printf("tool_load subagent_spawn failed\n");
    return;
  }
  auto set_cap = [&](int cap) {
    convo::write_file(w.config + "/backends.conf", "subagents = " + std::to_string(cap) + "\n");
    return static_cast<bool>(w.rdwr("ctl", "invalidate"));
  };
  std::vector<double> seq, par20, par4;
  for (int rep = -1; rep < reps; rep++) {  // rep -1: warm-up (starts the toolsrv)
    const std::string t = std::to_string(rep + 1);
    const double q = in_sequence(w, a, t, n);
    if (!set_cap(n)) return;
    const double p = fan_out(w, a, "w" + t, n);
    if (!set_cap(4)) return;
    const double p4 = fan_out(w, a, "d" + t, n);
    if (q < 0 || p < 0 || p4 < 0) {
      std::printf("a turn did not end (sequence %.0f, cap %d %.0f, cap 4 %.0f ms); olliesrv log tail:\n%s\n", q, n, p, p4,
                  w.log_text().substr(w.log_text().size() > 2000 ? w.log_text().size() - 2000 : 0).c_str());
      return;
    }
    if (rep < 0) continue;
    seq.push_back(q);
    par20.push_back(p);
    par4.push_back(p4);
    // The parent's history grows by the 20 answers each run: clear it so every run is the same.
    (void)w.rdwr(a + "/ctl", "clear");
  }
  const double q = median(seq), p = median(par20), p4 = median(par4);
  std::printf("one agent, %d calls in sequence:          %8.0f ms\n", n, q);
  std::printf("%d sub-agents, subagents = %d (all at once): %8.0f ms  -> %.2fx the sequence\n", n, n, p, p / q);
  std::printf("%d sub-agents, subagents = 4 (the default):  %8.0f ms  -> %.2fx the sequence\n", n, p4, p4 / q);
  std::printf("(medians of %d interleaved runs; each sub-agent also makes 2 requests and is created and destroyed)\n", reps);
}

}  // namespace

int main(int argc, char** argv) {
  return testing_support::run_bench_parts("depth-bench", argc, argv, OLLIE_BENCH_BUILD_DIR, OLLIE_BENCH_SOURCE_DIR,
                                          {{"compaction", bench_compaction}, {"subagents", bench_subagents}});
}
