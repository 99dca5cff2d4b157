#pragma once
// What the benches share: timing, the median of interleaved runs, and the main of a bench made
// of named parts (`engine-bench rounds readers`, none named: all, in table order).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace testing_support {

using BenchClock = std::chrono::steady_clock;

inline double ms_since(BenchClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(BenchClock::now() - t0).count();
}

/// The median (the upper one of an even count); 0 for no value.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Runs the parts named on the command line (all of them when none is), each on its own: a part
/// that throws is reported and the next one runs. `./dev.sh bench` runs the benches without an
/// environment, so OLLIE_BUILD_DIR and OLLIE_SOURCE_DIR default to the bench's own build.
inline int run_bench_parts(const char* name, int argc, char** argv, const char* build_dir, const char* source_dir,
                           const std::vector<std::pair<std::string, std::function<void()>>>& parts) {
  ::setenv("OLLIE_BUILD_DIR", build_dir, 0);
  ::setenv("OLLIE_SOURCE_DIR", source_dir, 0);
  // Made absolute: the bench's world links the build's tools from a directory of its own, where a
  // relative OLLIE_BUILD_DIR named nothing and the agents ran without tools.
  for (const char* var : {"OLLIE_BUILD_DIR", "OLLIE_SOURCE_DIR"})
    if (char* real = ::realpath(std::getenv(var), nullptr)) {
      ::setenv(var, real, 1);
      std::free(real);
    }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<std::string> want(argv + 1, argv + argc);
  std::string names;
  for (const auto& [part, run] : parts) {
    if (argc <= 1) want.push_back(part);
    names += (names.empty() ? "" : ", ") + part;
  }
  std::printf("%s: bin/olliesrv of %s\n", name, std::getenv("OLLIE_BUILD_DIR"));
  for (const auto& w : want) {
    const auto it = std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return p.first == w; });
    try {
      if (it == parts.end()) std::printf("unknown benchmark: %s (%s)\n", w.c_str(), names.c_str());
      else it->second();
    } catch (const std::exception& e) {
      std::printf("%s: failed: %s\n", w.c_str(), e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace testing_support
