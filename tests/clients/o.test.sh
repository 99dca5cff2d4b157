#!/usr/bin/env bash
# The o REPL as a person uses it: a real tmux with a real (pseudo-)terminal attached, the real
# olliesrv and ollie-9p, the fake provider standing in for the model. Keys are typed with
# send-keys and the panes read with capture-pane.
#   o.test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
root=$(mktemp -d /tmp/ollie-o-XXXXXX)
pids=()
cleanup() {
  tmux kill-server 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP-}" ] || rm -rf "$root"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- olliesrv log" >&2; tail -20 "$root/olliesrv.log" >&2 || true; exit 1; }

# within(seconds, command...): retries the check until it holds; tmux has no event to wait on.
# The command is run anew each time: put any $(...) inside a function.
within() {
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done
}

export HOME=$root/home XDG_CONFIG_HOME=$root/home/.config XDG_DATA_HOME=$root/home/.local/share
export XDG_RUNTIME_DIR=$root/run NAMESPACE=$root/ns TMUX_TMPDIR=$root/tmux TERM=xterm-256color
export PATH=$build/bin:$src/data/scripts:$PATH
unset TMUX
cfg=$XDG_CONFIG_HOME/ollie
mkdir -p "$cfg" "$XDG_DATA_HOME" "$root/project/my proj" "$TMUX_TMPDIR"
mkdir -m 700 "$XDG_RUNTIME_DIR" "$NAMESPACE"
cp "$src/data/sandbox.yaml" "$cfg/"
ln -s "$build/tools" "$cfg/tools"
ln -s "$src/data/agents" "$cfg/agents"
ln -s "$src/data/prompts" "$cfg/prompts"

# o -h explains itself
o -h | grep -q 'o \[session \[agent\]\]' || fail "o -h does not show the usage"
if o -x 2>/dev/null; then fail "o -x exits 0"; fi

# Every prompt gets the hello, but a turn whose request holds "thirty rounds" (the busy agent's,
# below) gets 30 rounds of a quick shell call, then its answer, one that holds "xyzzy" (or
# "plugh") a shell call that asks to bypass the sandbox, and the first that holds "take your
# time" a slow answer (about 6 s: a frame every 1.5 s).
{
  printf '{"loop":true,"responses":['
  for i in $(seq 30); do
    printf '{"when":"thirty rounds","tool_calls":[{"id":"r%d","name":"shell","arguments":{"cmd":"echo %d"}}]},' "$i" "$i"
  done
  printf '{"when":"thirty rounds","text":"All thirty rounds are done."},'
  printf '{"when":"xyzzy","tool_calls":[{"id":"b1","name":"shell","arguments":{"cmd":"echo escaped","bypass":true}}]},'
  printf '{"when":"xyzzy","text":"Ran it outside."},'
  printf '{"when":"plugh","tool_calls":[{"id":"b2","name":"shell","arguments":{"cmd":"echo escaped","bypass":true}}]},'
  printf '{"when":"plugh","text":"Ran it outside."},'
  printf '{"when":"take your time","text":"Slowly, slowly, done.","delay_ms":1500},{"text":"Hello from the fake model."}]}\n'
} >"$root/say.json"
"$build/tests/fakeprovider/fakeprovider" --port 0 --script "$root/say.json" >"$root/fake.out" &
pids+=($!)
within 10 grep -qs listening "$root/fake.out" || fail "the fake provider did not start"
url=$(sed -n 's/.*listening on //p' "$root/fake.out")
OLLIE_BACKEND=openai OLLIE_OPENAI_URL=$url/v1 OLLIE_OPENAI_KEY=x OLLIE_MODEL=fake-model \
  olliesrv 2>"$root/olliesrv.log" &
pids+=($!)
within 10 ollie-9p read session/idx >/dev/null 2>&1 || fail "olliesrv did not start"

# names go to the server quoted: one it refuses gives its error, and no half-made pair is left
(cd "$root/project" && o 'bad name' 2>"$root/o.err") && fail "o 'bad name' exits 0"
grep -qF 'invalid name: bad name' "$root/o.err" || fail "o 'bad name': $(cat "$root/o.err")"
(cd "$root/project" && o half 'bad agent' 2>"$root/o.err") && fail "o half 'bad agent' exits 0"
grep -qF 'invalid name: bad agent' "$root/o.err" || fail "o half 'bad agent': $(cat "$root/o.err")"
ollie-9p read session/idx | grep -q '^half	' && fail "o left the session it made for a refused agent"

# o in a terminal of its own, from the project directory: it creates the session there
mkfifo "$root/keys"
exec 3<>"$root/keys"
(cd "$root/project/my proj" && exec script -qfec "stty rows 40 cols 140; o work" /dev/null <"$root/keys" >"$root/term.out" 2>&1) &
pids+=($!)
t==o-work/main
within 10 tmux has-session -t "$t" 2>/dev/null || fail "o did not open its tmux session: $(cat "$root/term.out")"
clients() { [ "$(tmux list-clients -t "$t:" | wc -l)" -ge "$1" ]; }
within 10 clients 1 || fail "o did not attach: $(cat "$root/term.out")"
status_shows() { tmux show -v -t "$t:" status-right | grep -q "$1"; }
# from the start (agent/idx), not only at statewait's first heartbeat (5 s); the state and the
# model take six ollie-9p runs, which a loaded machine (ctest -j2 of the ASan build) makes slow:
# 4 s failed there once, so the wait is that of every other check
within 10 status_shows 'idle · fake-model' || fail "status line at the start: $(tmux show -v -t "$t:" status-right)"
ollie-9p read session/idx | grep -q "^work	.*	$root/project/my proj	" || fail "session cwd: $(ollie-9p read session/idx)"
ollie-9p read session/work/agent/idx | grep -q '^main	' || fail "agent main not created"
grep -qF 'works in' "$root/term.out" && fail "o made the session here, yet says it works elsewhere"
t=$(tmux display -p -t "$t:" '#{session_id}')  # the tmux session whatever its name (renames below)

chat() { tmux capture-pane -p -J -S - -t "$t:0.0"; }
has() { chat | grep -qF -- "$1"; }

# a prompt typed in reaches the model; its answer streams into the chat pane
tmux send-keys -t "$t:0.1" 'what is here?' Enter
within 20 has 'Hello from the fake model.' || fail "no answer in the chat pane: $(chat)"
has 'what is here?' || fail "the prompt is not in the chat pane"

# Ctrl-C in the prompt line clears what is typed, as in a shell; in either pane it ends nothing
panes() { tmux list-panes -t "$t:" -F '#{pane_id}' | tr '\n' ' '; }
before=$(panes)
prompt_pane() { tmux capture-pane -p -J -t "$t:0.1"; }
reading() { [ "$(prompt_pane | sed '/^$/d' | tail -n 1)" = 'main> ' ]; }  # the next line is read
within 10 reading || fail "no new prompt line: $(prompt_pane)"
tmux send-keys -t "$t:0.1" 'half typed' && tmux send-keys -t "$t:0.1" C-c && tmux send-keys -t "$t:0.0" C-c
tmux send-keys -t "$t:0.1" 'after ctrl-c' Enter || fail "the prompt pane is gone after Ctrl-C"
within 20 has 'user: after ctrl-c' || fail "no prompt after Ctrl-C: $(chat)"
has 'half typed' && fail "the line cleared by Ctrl-C was sent: $(chat)"
[ "$(panes)" = "$before" ] || fail "Ctrl-C ended a pane: $before, now $(panes)"

# a pasted block is one prompt with all its lines, bracketed (as terminals and tmux's
# paste-buffer -p send it: it waits in the line for Enter) or not (its lines come as if entered)
user_blocks() { ollie-9p read session/work/agent/main/log.raw | grep '^{"role":"user",'; }
pasted() {  # $1: the lines, as in the JSON string; one user block holds them, no other any of them
  user_blocks | grep -qF "\"content\":\"$1\"" &&
    [ "$(user_blocks | grep -cE "$(sed 's/\\n/|/g' <<<"$1")")" -eq 1 ]
}
within 10 reading || fail "no new prompt line: $(prompt_pane)"
tmux set-buffer -b pasted $'first line\nsecond line\nthird line'
tmux paste-buffer -p -b pasted -t "$t:0.1" && tmux send-keys -t "$t:0.1" Enter
within 20 pasted 'first line\nsecond line\nthird line' || fail "a bracketed paste of 3 lines: $(user_blocks)"
within 10 reading || fail "no new prompt line after a paste: $(prompt_pane)"
tmux set-buffer -b pasted $'line one\nline two\nline three'
tmux paste-buffer -b pasted -t "$t:0.1" && tmux send-keys -t "$t:0.1" Enter
within 20 pasted 'line one\nline two\nline three' || fail "a paste of 3 lines, not bracketed: $(user_blocks)"
within 10 reading || fail "no new prompt line after a paste: $(prompt_pane)"
# a /verb is one line: a line typed right after it is a prompt of its own, not more of the verb
tmux send-keys -t "$t:0.1" '/model' Enter 'after the verb' Enter
within 20 pasted 'after the verb' || fail "a line typed after a /verb: $(user_blocks)"
ollie-9p read session/work/agent/main/log.raw | grep -qF 'one command per request' && fail "a /verb took the next line"
within 10 reading || fail "no new prompt line after a /verb: $(prompt_pane)"

# the status line follows the agent: the model and the context
within 10 status_shows 'idle · fake-model · ctx [0-9]*% · \$0' ||
  fail "status line: $(tmux show -v -t "$t:" status-right)"

# /model runs the ctl verb at once; its reply is an info block in the chat
tmux send-keys -t "$t:0.1" '/model' Enter
within 10 has 'fake-model' ||
  fail "/model did not answer in the chat: $(chat)"

# terminal controls in tool output are shown, not obeyed: a clear screen cannot hide the chat
tmux send-keys -t "$t:0.1" "!printf 'before\\033[2J\\033[Hspoofed\\n'" Enter
within 10 has 'before^[[2J^[[Hspoofed' || fail "the escape sequence was not shown as text: $(chat)"
has 'what is here?' || fail "the chat was cleared by a tool's output: $(chat)"

# olliesrv killed and started again: the chat pane waits for it, then shows the chat again and
# follows the next answer; the status line comes back
kill -9 "${pids[1]}"
within 10 has 'olliesrv is gone' || fail "the chat pane did not say olliesrv is gone: $(chat)"
OLLIE_BACKEND=openai OLLIE_OPENAI_URL=$url/v1 OLLIE_OPENAI_KEY=x OLLIE_MODEL=fake-model \
  olliesrv 2>>"$root/olliesrv.log" &
pids+=($!)
back() {  # the server answers and the pane shows the chat again (a clear screen and a replay)
  ollie-9p read session/work/agent/main/id >/dev/null 2>&1 &&
    tmux capture-pane -p -J -t "$t:0.0" | grep -qF 'what is here?' &&
    ! tmux capture-pane -p -J -t "$t:0.0" | grep -qF 'olliesrv is gone'
}
within 20 back || fail "the chat did not come back after the restart: $(chat)"
tmux send-keys -t "$t:0.1" 'and now?' Enter
within 20 has 'and now?' || fail "a prompt after the restart is not in the chat pane: $(chat)"
within 10 status_shows 'idle · fake-model' || fail "status line after the restart: $(tmux show -v -t "$t:" status-right)"

# a prompt sent while a turn runs waits in the agent's queue, and the prompt line says so
tmux send-keys -t "$t:0.1" 'take your time' Enter
within 10 has 'user: take your time' || fail "the slow prompt is not in the chat pane: $(chat)"
tmux send-keys -t "$t:0.1" 'and then this' Enter
queued_said() { prompt_pane | grep -qF '(queued: the agent is thinking; it runs when the turn ends)'; }
within 10 queued_said || fail "no word of the queued prompt: $(prompt_pane)"
within 20 has 'user: and then this' || fail "the queued prompt did not run: $(chat)"
has 'Slowly, slowly, done.' || fail "the queued prompt ran before the turn ended: $(chat)"
prompt_pane | grep -A1 -F 'main> take your time' | grep -qF '(queued' && fail "a prompt for an idle agent was said queued: $(prompt_pane)"

# pairs whose names join the same way are two tmux sessions, each talking to its own agent
(cd "$root/project" && script -qfec "o a-b c" /dev/null <"$root/keys" >/dev/null 2>&1 &)
(cd "$root/project" && script -qfec "o a b-c" /dev/null <"$root/keys" >/dev/null 2>&1 &)
both() { tmux has-session -t '=o-a-b/c' 2>/dev/null && tmux has-session -t '=o-a/b-c' 2>/dev/null; }
within 10 both || fail "two pairs, two tmux sessions: $(tmux list-sessions)"
tmux kill-session -t '=o-a-b/c'; tmux kill-session -t '=o-a/b-c'

# a second o on the same pair attaches to the same tmux session instead of making another
(cd "$root" && script -qfec "stty rows 40 cols 140; o work main" /dev/null <"$root/keys" >"$root/term2.out" 2>&1) &
pids+=($!)
within 10 clients 2 || fail "a second o did not attach: $(tmux list-clients)"
[ "$(tmux list-sessions | wc -l)" -eq 1 ] || fail "a second tmux session: $(tmux list-sessions)"
# from another directory than the session's: o says where the session works
grep -qF "o: session work works in $root/project/my proj, not here" "$root/term2.out" ||
  fail "no notice of the session's directory: $(cat "$root/term2.out")"

# From here on the tmux server's own environment names another olliesrv: the panes of a pair
# dial as the o that made it did, or the chat below would say olliesrv is gone.
tmux set-environment -g NAMESPACE "$root/elsewhere"

# the agent killed under it: the chat pane says so
echo name=gone | ollie-9p rdwr session/work/agent/new >/dev/null
(cd "$root/project" && script -qfec "o work gone" /dev/null <"$root/keys" >/dev/null 2>&1 &)
g='=o-work/gone'
within 10 tmux has-session -t "$g" 2>/dev/null || fail "o work gone did not open"
echo kill | ollie-9p rdwr session/work/agent/gone/ctl >/dev/null
gone_said() { tmux capture-pane -p -J -S - -t "$g:0.0" | grep -qF '!q leaves]'; }
within 10 gone_said || fail "the chat pane of a killed agent: $(tmux capture-pane -p -J -S - -t "$g:0.0")"
tmux send-keys -t "$g:0.1" 'anyone there?' Enter
gone_told() { tmux capture-pane -p -J -t "$g:0.1" | grep -qF 'o: the agent is gone (o again makes it anew)'; }
within 10 gone_told || fail "a prompt to a killed agent: $(tmux capture-pane -p -J -t "$g:0.1")"
# o again makes the agent anew and shows its chat, not the old one's end; whoever looked at the
# old one looks at the new one
(cd "$root/project/my proj" && script -qfec "o work gone" /dev/null <"$root/keys" >"$root/term3.out" 2>&1 &)
renewed() {  # the tmux session of that name shows the agent of that name
  local shows; shows=$(tmux show -v -t "$g:" @ollie-agent 2>/dev/null) &&
    [ "$shows" = "$(ollie-9p read session/work/agent/gone/id 2>/dev/null)" ]
}
within 10 renewed || fail "o work gone again kept the dead agent's tmux session: $(tmux capture-pane -p -J -t "$g:0.0")"
gone_said && fail "the chat pane shows the old agent's end"
tmux send-keys -t "$g:0.1" 'are you new?' Enter
new_answer() { tmux capture-pane -p -J -S - -t "$g:0.0" | grep -qF 'Hello from the fake model.'; }
within 20 new_answer || fail "the new agent's chat is not shown: $(tmux capture-pane -p -J -S - -t "$g:0.0")"
gclients() { [ "$(tmux list-clients -t "$g:" | wc -l)" -eq 2 ]; }
within 10 gclients || fail "clients of the old tmux session: $(tmux list-clients)"
grep -qF 'works in' "$root/term3.out" && fail "a notice of the directory from the session's own"
tmux kill-session -t "$g"

# the status line shows the newest state at once, not every state in turn: after a turn of 30
# quick tool rounds it says idle soon after the agent is (it said so 50 s late, replaying them)
echo name=busy | ollie-9p rdwr session/work/agent/new >/dev/null
(cd "$root/project/my proj" && script -qfec "o work busy" /dev/null <"$root/keys" >/dev/null 2>&1 &)
b='=o-work/busy'
within 10 tmux has-session -t "$b" 2>/dev/null || fail "o work busy did not open"
busy_shows() { tmux show -v -t "$b:" status-right | grep -q "$1"; }
within 10 busy_shows '^idle · fake-model' || fail "the busy pair's status line: $(tmux show -v -t "$b:" status-right)"
tmux send-keys -t "$b:0.1" 'take thirty rounds' Enter
busy_idle() {  # the turn is over: its answer is there and the agent is idle
  ollie-9p read session/work/agent/busy/log.raw | grep -qF 'All thirty rounds are done.' &&
    [ "$(ollie-9p read session/work/agent/idx | awk -F'\t' '$1 == "busy" { print $3 }')" = idle ]
}
within 90 busy_idle || fail "the turn of 30 rounds did not end: $(ollie-9p read session/work/agent/idx)"
rounds=$(ollie-9p read session/work/agent/busy/log.raw | grep -c '^{"role":"call",')
[ "$rounds" -eq 30 ] || fail "the busy turn made $rounds calls, not 30"
within 5 busy_shows '^idle · ' || fail "the status line is not idle 5 s after the turn: $(tmux show -v -t "$b:" status-right)"
tmux kill-session -t "$b"

# a call that asks to run outside the sandbox waits for the person: the chat and the status line
# show the request, a mistyped number is refused, and !allow alone decides the one waiting
echo name=guard | ollie-9p rdwr session/work/agent/new >/dev/null
(cd "$root/project/my proj" && script -qfec "o work guard" /dev/null <"$root/keys" >/dev/null 2>&1 &)
x='=o-work/guard'
within 10 tmux has-session -t "$x" 2>/dev/null || fail "o work guard did not open"
xchat() { tmux capture-pane -p -J -S - -t "$x:0.0"; }
xhas() { xchat | grep -qF -- "$1"; }
xprompt() { tmux capture-pane -p -J -t "$x:0.1" | grep -qF -- "$1"; }
xstatus() { tmux show -v -t "$x:" status-right | grep -q -- "$1"; }
within 10 xstatus '^idle · ' || fail "the guard pair's status line: $(tmux show -v -t "$x:" status-right)"
tmux send-keys -t "$x:0.1" 'run it outside the sandbox, xyzzy' Enter
within 20 xhas 'bypass: request 1: shell echo escaped' || fail "no bypass request in the chat: $(xchat)"
within 10 xstatus '^calling: shell · bypass 1? · ' || fail "the status line of a waiting request: $(tmux show -v -t "$x:" status-right)"
tmux send-keys -t "$x:0.1" '!deny 7' Enter
within 10 xprompt 'no such request: 7' || fail "!deny 7: $(tmux capture-pane -p -J -t "$x:0.1")"
tmux send-keys -t "$x:0.1" '!allow' Enter
within 20 xhas 'Ran it outside.' || fail "the allowed call did not run: $(xchat)"
xhas 'bypass: approved 1' || fail "no approval in the chat: $(xchat)"
xchat | grep -qx 'escaped' || fail "no output of the call run outside: $(xchat)"
within 10 xstatus '^idle · fake-model' || fail "the status line after the decision: $(tmux show -v -t "$x:" status-right)"
tmux send-keys -t "$x:0.1" '!allow' Enter
within 10 xprompt 'o: no bypass request is waiting' || fail "!allow with none waiting: $(tmux capture-pane -p -J -t "$x:0.1")"
# another agent's request (its chat is not this pane's) is decided only once the pane has shown it
echo name=other | ollie-9p rdwr session/work/agent/new >/dev/null
echo 'you too, plugh' | ollie-9p write session/work/agent/other/prompt
other_waits() { ollie-9p read bypass/pending/work | grep -q $'\tother\tshell\techo escaped$'; }
within 20 other_waits || fail "the other agent's request: $(ollie-9p read bypass/pending/work)"
n=$(ollie-9p read bypass/pending/work | cut -f1)
tmux send-keys -t "$x:0.1" '!allow' Enter  # alone: not another agent's, even the only one waiting
within 10 xprompt "  $n  other: shell echo escaped" || fail "!allow with another's waiting: $(tmux capture-pane -p -J -t "$x:0.1")"
other_waits || fail "!allow alone decided another agent's request"
tmux send-keys -t "$x:0.1" "!allow $n" Enter
other_ran() { ollie-9p read session/work/agent/other/log | grep -qF 'Ran it outside.'; }
within 20 other_ran || fail "the request shown, then allowed, did not run: $(ollie-9p read session/work/agent/other/log)"
# !q with a shell the user opened beside the pair (prefix %: no start command) closes the pair's
# two panes only: the shell and its session stay
xp=$(tmux list-panes -s -t "$x" -F '#{pane_id} #{pane_start_command}' | awk '/ --prompt-line /{ print $1 }')
tmux split-window -d -h -t "$x:0.0"
tmux send-keys -t "$xp" '!q' Enter
pair_closed() { [ "$(tmux list-panes -s -t "$x" 2>/dev/null | wc -l)" -eq 1 ]; }
within 10 pair_closed || fail "!q beside a user's shell: $(tmux list-panes -a -F '#{session_name} #{pane_start_command}')"
tmux kill-session -t "$x"

# renamed under it, the pair keeps working (o addresses it by id); the names shown follow, the
# tmux session's too, and no error reaches the prompt line
echo job | ollie-9p write session/work/name
echo lead | ollie-9p write session/job/agent/main/name
tmux send-keys -t "$t:0.1" 'after the rename' Enter
within 20 has 'user: after the rename' || fail "a prompt after the rename: $(chat)"
renamed() { [ "$(tmux show -v -t "$t:" status-left)" = '[job/lead] ' ] && tmux has-session -t '=o-job/lead' 2>/dev/null; }
within 10 renamed || fail "the names shown after the rename: $(tmux show -v -t "$t:" status-left) $(tmux list-sessions)"
named() { prompt_pane | grep -q '^lead> '; }
tmux send-keys -t "$t:0.1" Enter  # an empty line: the next prompt
within 10 named || fail "the prompt line does not show the new name: $(prompt_pane)"
prompt_pane | grep -q 'ollie-9p:' && fail "errors in the prompt line: $(prompt_pane)"
within 10 status_shows 'idle · fake-model' || fail "status line after the rename: $(tmux show -v -t "$t:" status-right)"
# o with the new names attaches to the same tmux session
(cd "$root" && script -qfec "o job lead" /dev/null <"$root/keys" >/dev/null 2>&1 &)
within 10 clients 3 || fail "o job lead did not attach to the pair's tmux session: $(tmux list-clients)"
[ "$(tmux list-sessions | wc -l)" -eq 1 ] || fail "another tmux session for the renamed pair: $(tmux list-sessions)"

# a pane the user split off beside the chat (a shell) is no reason to make another pair: o
# again attaches to this one, and the pane is still there (o took such a pair for a stale one,
# and killed it with the pane)
tmux split-window -d -h -t "$t:0.0" 'sleep 600'
mine() { tmux list-panes -s -t "$t" -F '#{pane_id} #{pane_start_command}' | awk '/sleep 600/ { print $1 }'; }
(cd "$root" && script -qfec "o job lead" /dev/null <"$root/keys" >/dev/null 2>&1 &)
within 10 clients 4 || fail "o job lead with a pane added did not attach: $(tmux list-clients)"
[ "$(tmux list-sessions | wc -l)" -eq 1 ] || fail "another tmux session for a pair with a pane added: $(tmux list-sessions)"
[ -n "$(mine)" ] || fail "the user's pane is gone: $(tmux list-panes -a)"
tmux kill-pane -t "$(mine)"

# !q leaves: the tmux session ends and o's terminals close; the agent stays
tmux send-keys -t "$t:0.1" '!q' Enter
gone() { ! tmux has-session -t "$t" 2>/dev/null; }
within 10 gone || fail "!q did not close the tmux session"
ollie-9p read session/job/agent/lead/log.raw | grep -q '"role":"assistant"' || fail "the agent lost its history"
echo "o: ok"
