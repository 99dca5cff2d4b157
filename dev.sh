#!/usr/bin/env bash
# Ollie's one entry point for a newcomer on Debian 12:
#   ./dev.sh run    set up, build (release) and start olliesrv in the foreground
#   ./dev.sh test   set up, build (dev: Debug, ASan+UBSan) and run every test
#   ./dev.sh setup  install the Debian packages the project needs (idempotent)
#   ./dev.sh bench  build (release) and run the benchmarks
#   ./dev.sh fuzz [SECONDS]  build and run the 9P decoder fuzzer (clang libFuzzer)
set -euo pipefail
cd "$(dirname "$0")"

packages=(
  build-essential cmake ninja-build ccache pkg-config clang-14 libclang-rt-14-dev
  libasio-dev nlohmann-json3-dev libcurl4-openssl-dev libspdlog-dev libyaml-cpp-dev
  libssl-dev uuid-dev libsqlite3-dev libelf-dev googletest libgtest-dev libgmock-dev
  libgumbo-dev ripgrep universal-ctags clangd jq
)

setup() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The 9P decoder under libFuzzer for a bounded time (clang build of the codec alone).
fuzz() {
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz --target fcall-fuzz
  mkdir -p build/fuzz/corpus
  if ! build/fuzz/tests/fuzz/fcall-fuzz -max_total_time="$1" -max_len=9000 -artifact_prefix=build/fuzz/ \
      build/fuzz/corpus tests/fuzz/corpus >build/fuzz/last.log 2>&1; then
    tail -40 build/fuzz/last.log
    echo "fuzz: the 9P decoder failed; the input is saved in build/fuzz/" >&2
    return 1
  fi
  grep -E '^Done' build/fuzz/last.log
}

case "${1:-}" in
  setup) setup ;;
  run)
    setup
    cmake --preset release >/dev/null
    cmake --build --preset release --target olliesrv ollie-9p
    shift; exec build/release/bin/olliesrv "$@" ;;
  test)
    setup
    fuzz "${FUZZ_SECONDS:-30}"
    cmake --workflow --preset dev ;;
  bench)
    setup
    cmake --preset release >/dev/null
    cmake --build --preset release
    for b in build/release/tests/bench/*-bench; do "$b"; done ;;
  fuzz)
    setup
    fuzz "${2:-60}" ;;
  *) sed -n '2,7p' "$0" >&2; exit 2 ;;
esac
