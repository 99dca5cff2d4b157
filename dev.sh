#!/usr/bin/env bash
# Ollie's one entry point for a newcomer on Debian 12:
#   ./dev.sh run    set up, build (release), install for this user and start olliesrv
#   ./dev.sh demo   a first conversation with no account: the fake provider stands in for a model
#   ./dev.sh test   set up, build (dev: Debug, ASan+UBSan) and run every test
#   ./dev.sh setup  install the Debian packages the project needs (idempotent)
#   ./dev.sh bench  build (release) and run the benchmarks
#   ./dev.sh fuzz [SECONDS]  build and run the 9P decoder fuzzer (clang libFuzzer)
#   ./dev.sh install [--no-build [BUILD_DIR]]  build (release) and install for this user
set -euo pipefail
cd "$(dirname "$0")"

packages=(
  build-essential cmake ninja-build ccache pkg-config clang-14 libclang-rt-14-dev
  libasio-dev nlohmann-json3-dev libcurl4-openssl-dev libspdlog-dev libyaml-cpp-dev
  libssl-dev uuid-dev libsqlite3-dev libelf-dev googletest libgtest-dev libgmock-dev
  libgumbo-dev ripgrep universal-ctags clangd jq tmux emacs-nox openssh-server
)
# Programs that may come from elsewhere (nodesource's nodejs carries its own npm, which Debian's
# npm package conflicts with): <command>:<Debian package>, installed only when the command is missing.
commands=(node:nodejs npm:npm)

setup() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  for c in "${commands[@]}"; do command -v "${c%%:*}" >/dev/null || missing+=("${c#*:}"); done
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

# Install a build for this user: data/ (but data/tools) and the build's tools/ into the config
# root, the build's programs and data/scripts/* into the bin root. <config root>/.installed lists
# "<sha256>  <path>" of every file as last shipped. A file still equal to that is updated; one the
# user edited is kept and the shipped version written beside it as <file>.new; one the user
# deleted stays deleted (remove its line from .installed to get it back); an unedited file that
# is no longer shipped is removed.
install_ollie() {
  # A relative XDG_CONFIG_HOME is ignored, as olliesrv ignores it (doc/data.md).
  local xdg=${XDG_CONFIG_HOME:-}; [[ $xdg == /* ]] || xdg=$HOME/.config
  # Spelled one way (no `//`, no trailing `/`): the manifest's paths are compared as text.
  xdg=$(realpath -ms -- "$xdg")
  local build=$1 cfg=$xdg/ollie bin units=$xdg/systemd/user
  bin=$(realpath -ms -- "${OLLIE_BIN:-$HOME/.local/bin}")
  local manifest=$cfg/.installed f p i line src dst mode
  # A build without its tools or static programs would read as all of them no longer shipped.
  for p in bin/{olliesrv,ollie-9p,ollie-acp,toolsrv} bin/static/{ollie-9p,toolsrv} tools/file_read; do
    [ -x "$build/$p" ] || { echo "install: $build/$p is missing: build it first" >&2; return 1; }
  done
  local -a srcs=() dsts=() present=()
  while IFS= read -r -d '' f; do srcs+=("$f") dsts+=("$cfg/${f#data/}")
  done < <(find data -type f ! -path 'data/tools/*' ! -path 'data/scripts/*' ! -path 'data/services/*' -print0)
  for f in data/services/*; do
    [ -f "$f" ] && srcs+=("$f") dsts+=("$units/${f##*/}")
  done
  for f in "$build"/tools/*; do
    [ -f "$f" ] && [[ $f != *.cmake ]] || continue
    srcs+=("$f") dsts+=("$cfg/tools/${f##*/}")
  done
  for f in "$build"/bin/{olliesrv,ollie-9p,ollie-acp,toolsrv} data/scripts/*; do
    [ -f "$f" ] || continue
    srcs+=("$f") dsts+=("$bin/${f##*/}")
  done
  for f in "$build"/bin/static/{ollie-9p,toolsrv}; do  # what remote sessions ship (doc/remote.md)
    [ -f "$f" ] || continue
    srcs+=("$f") dsts+=("$bin/static/${f##*/}")
  done
  for f in "${dsts[@]}"; do [ -f "$f" ] && present+=("$f"); done

  # sha256 of every source and existing destination, in one run each
  local -A sum=() old=() now=() dirs=()
  while IFS= read -r -d '' line; do sum[${line:66}]=${line:0:64}
  done < <(sha256sum -z -- "${srcs[@]}" "${present[@]}")
  # "<sha256>  <path>" per line; a line that is not one (a blank left by a hand edit) is skipped.
  if [ -f "$manifest" ]; then
    while IFS= read -r line; do
      p=${line%%  *} f=${line#*  }
      while [[ $f == *//* ]]; do f=${f//\/\//\/}; done  # written by an install given a root with a trailing /
      [[ $p =~ ^[0-9a-f]{64}$ && $f == /* ]] && old[$f]=$p
    done <"$manifest"
  fi

  local added=0 updated=0 same=0
  for i in "${!srcs[@]}"; do
    src=${srcs[i]} dst=${dsts[i]} mode=644
    if [ -x "$src" ]; then mode=755; fi
    f=${dst%/*}
    if [ -z "${dirs[$f]:-}" ]; then
      if [[ $dst == "$cfg"/* ]]; then (umask 077; mkdir -p "$f"); chmod 700 "$f"; else mkdir -p "$f"; fi
      dirs[$f]=1
    fi
    now[$dst]=${sum[$src]}
    if [ ! -e "$dst" ] && [ -n "${old[$dst]:-}" ]; then
      now[$dst]=${old[$dst]}
      echo "install: kept deleted: $dst"
    elif [ ! -e "$dst" ]; then
      install -m "$mode" "$src" "$dst"
      added=$((added + 1))
    elif [ "${sum[$dst]:-}" = "${sum[$src]}" ]; then
      # (a link the user put there is theirs, and so is the mode of what it names)
      if [ -L "$dst" ] || [ "$(stat -c %a "$dst")" = "$mode" ]; then same=$((same + 1)); else chmod "$mode" "$dst"; updated=$((updated + 1)); fi
    elif [ "${sum[$dst]:-}" = "${old[$dst]:-}" ]; then
      install -m "$mode" "$src" "$dst"
      updated=$((updated + 1))
    else
      install -m "$mode" "$src" "$dst.new"
      echo "install: kept your $dst; the new version is $dst.new"
    fi
  done
  for f in "${!old[@]}"; do
    [ -n "${now[$f]:-}" ] || [ ! -e "$f" ] && continue
    # Installed into other roots (another OLLIE_BIN or XDG_CONFIG_HOME): not this install's to remove.
    [[ $f == "$cfg"/* || $f == "$bin"/* || $f == "$units"/* ]] || continue
    if [ "$(sha256sum <"$f")" = "${old[$f]}  -" ]; then
      rm -f "$f"
      echo "install: removed (no longer shipped): $f"
    else
      echo "install: kept your $f (no longer shipped)"
    fi
  done
  for f in "${!now[@]}"; do printf '%s  %s\n' "${now[$f]}" "$f"; done | sort -k2 >"$manifest.tmp"
  chmod 600 "$manifest.tmp"
  mv "$manifest.tmp" "$manifest"
  echo "install: config root $cfg: $added added, $updated updated, $same unchanged"
  echo "install: programs in $bin"
  case ":$PATH:" in *":$bin:"*) ;; *) echo "install: $bin is not on PATH: add it" ;; esac
  echo "install: systemd user unit in $units: systemctl --user daemon-reload && systemctl --user enable --now olliesrv"
  [ "$bin" = "$HOME/.local/bin" ] || echo "install: the unit runs %h/.local/bin/olliesrv: edit its ExecStart for $bin"
}

# Builds the release preset's programs and tools (targets given are built too) and installs them.
build_install() {
  setup
  cmake --preset release >/dev/null
  # the compiled tools: every executable ninja links into tools/
  mapfile -t tools < <(ninja -C build/release -t targets all | sed -n 's|^tools/\([^/:]*\): CXX_EXECUTABLE_LINKER.*|\1|p')
  cmake --build --preset release --target olliesrv ollie-9p ollie-acp toolsrv "${tools[@]}" "$@"
  install_ollie build/release
}

# One command, no account: the fake provider stands in for a model that calls the sandboxed
# `shell` tool once and answers; a private olliesrv (its own config, data and socket in a
# temporary directory) runs the turn; the agent's chat is printed. Nothing of yours is touched.
demo() {
  setup
  cmake --preset release >/dev/null
  mapfile -t tools < <(ninja -C build/release -t targets all | sed -n 's|^tools/\([^/:]*\): CXX_EXECUTABLE_LINKER.*|\1|p')
  cmake --build --preset release --target olliesrv ollie-9p toolsrv fakeprovider "${tools[@]}" >/dev/null
  local d; d=$(mktemp -d /tmp/ollie-demo-XXXXXX)
  local b=$PWD/build/release pids=()
  trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$d"' RETURN
  mkdir -p "$d/config/ollie" "$d/data" "$d/project" && mkdir -m 700 "$d/ns" "$d/run"
  cp data/sandbox.yaml "$d/config/ollie/"
  ln -s "$b/tools" "$d/config/ollie/tools"
  ln -s "$PWD/data/agents" "$d/config/ollie/agents"
  ln -s "$PWD/data/prompts" "$d/config/ollie/prompts"
  printf 'a README\n' >"$d/project/README"
  echo '{"loop":true,"responses":[{"tool_calls":[{"id":"c1","name":"shell","arguments":{"cmd":"ls -l"}}]},
    {"text":"The directory holds one file, README (the listing above came from a sandboxed shell)."}]}' >"$d/say.json"
  "$b/tests/fakeprovider/fakeprovider" --script "$d/say.json" >"$d/fake.out" & pids+=($!)
  until grep -qs listening "$d/fake.out"; do sleep 0.05; done
  export XDG_CONFIG_HOME=$d/config XDG_DATA_HOME=$d/data XDG_RUNTIME_DIR=$d/run NAMESPACE=$d/ns PATH=$b/bin:$PATH
  OLLIE_BACKEND=openai OLLIE_OPENAI_URL=$(sed -n 's/.*listening on //p' "$d/fake.out")/v1 OLLIE_OPENAI_KEY=demo \
    OLLIE_MODEL=fake-model olliesrv & pids+=($!)
  until ollie-9p read session/idx >/dev/null 2>&1; do sleep 0.05; done
  printf "name=demo cwd='%s'\n" "$d/project" | ollie-9p rdwr session/new >/dev/null
  echo name=main | ollie-9p rdwr session/demo/agent/new >/dev/null
  local a=session/demo/agent/main
  ollie-9p read "$a/chat" & pids+=($!)
  ollie-9p read -l "$a/statewait" >"$d/states" & pids+=($!)
  echo 'What is in this directory?' | ollie-9p write "$a/prompt"
  until grep -qx idle "$d/states"; do sleep 0.05; done
  sleep 0.1  # the chat reader's last bytes
  echo "--- $a/stats"
  ollie-9p read "$a/stats" | grep -E '^(input|output|requests)='
}

case "${1:-}" in
  setup) setup ;;
  run)
    build_install
    shift; exec "${OLLIE_BIN:-$HOME/.local/bin}/olliesrv" "$@" ;;
  demo) demo ;;
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
  install)
    if [ "${2:-}" = --no-build ]; then install_ollie "${3:-build/release}"; exit; fi
    build_install ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
