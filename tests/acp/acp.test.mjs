// ollie-acp driven by the Agent Client Protocol's own client (@agentclientprotocol/sdk), as an
// editor drives it: a real olliesrv with its tools and toolsrv, the fake provider standing in
// for the model. One world for the whole file, the scenarios in order (the fake provider's
// responses are one queue): initialize, a new session, a tool-using turn with its plan, a FIFO
// linked, a cancelled turn and a cancelled !command, a permission request answered, olliesrv
// going away mid-turn, the session loaded after olliesrv restarted, prompts queued behind another
// client's turn, a permission request open at stdin's end, malformed JSON-RPC, and the requests
// read before stdin's end.
//   node --test acp.test.mjs   (OLLIE_SOURCE_DIR, OLLIE_BUILD_DIR in the environment)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, symlinkSync, copyFileSync, readFileSync, rmSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import { createInterface } from "node:readline";
import { tmpdir } from "node:os";
import path from "node:path";
import { client, ndJsonStream } from "@agentclientprotocol/sdk";

const src = process.env.OLLIE_SOURCE_DIR;
const build = process.env.OLLIE_BUILD_DIR;
const root = mkdtempSync(path.join(tmpdir(), "ollie-acp-"));
const project = path.join(root, "project");
const children = [];
let olliesrv, fakeUrl;

const slow = "slowly ".repeat(400);
const elsewhere = "elsewhere ".repeat(50);  // another client's turn: about 2.5 s
const responses = [
  // the prompt linking a FIFO and the bridge's stdin (for that prompt alone, wherever it comes)
  { text: "Named, not read.", when: "Mind the fifo." },
  // the tool-using turn
  { tool_calls: [{ id: "c1", name: "shell", arguments: { cmd: "sleep 1; echo hi-from-tool" } }] },
  { reasoning: "The tool said hi.", text: "Done: hi-from-tool" },
  // the cancelled turn
  { text: slow, chunk: 4, delay_ms: 50 },
  // the turn cancelled by a request
  { text: slow, chunk: 4, delay_ms: 50, when: "Cancel me by request." },
  // the permission request
  { tool_calls: [{ id: "c2", name: "shell", arguments: { cmd: "echo outside-the-sandbox", bypass: true } }] },
  { text: "It ran." },
  // olliesrv goes away in this one
  { text: slow, chunk: 4, delay_ms: 50 },
  // after the restart
  { text: "Back again." },
  // the permission denied
  { tool_calls: [{ id: "c3", name: "shell", arguments: { cmd: "echo must-not-run", bypass: true } }] },
  { text: "It was denied." },
  // the refusal
  { text: "I would rather not.", stop: "filter" },
  // the second session, with the editor's MCP servers
  { text: "Hello from the second session." },
  // another client's turn, then the editor's prompt queued behind it
  { text: elsewhere, chunk: 8, delay_ms: 40 },
  { text: "Mine, after the other turn." },
  // again, the editor's prompt cancelled while queued: stopped as it starts, it may make its
  // request or not (the load decides), so its answer is only for it and is left unused if not
  { text: elsewhere, chunk: 8, delay_ms: 40 },
  { text: slow, chunk: 4, delay_ms: 50, when: "Cancel me while queued." },
  // a permission request open when the editor hangs up
  { tool_calls: [{ id: "c4", name: "shell", arguments: { cmd: "echo never-asked-again", bypass: true } }] },
  { text: "Denied at hang-up." },
];

const env = {
  ...process.env,
  HOME: path.join(root, "home"),
  XDG_CONFIG_HOME: path.join(root, "home/.config"),
  XDG_DATA_HOME: path.join(root, "home/.local/share"),
  XDG_RUNTIME_DIR: path.join(root, "run"),
  NAMESPACE: path.join(root, "ns"),
  PATH: `${build}/bin:${process.env.PATH}`,
  OLLIE_LOG: "info",
};
delete env.OLLIE_ADDR;
delete env.OLLIE_UNAME;
delete env.OLLIE_AUTH;

function start(cmd, args, extra = {}) {
  const p = spawn(cmd, args, { env: { ...env, ...extra }, stdio: ["ignore", "pipe", "pipe"] });
  children.push(p);
  return p;
}

function firstLine(stream, re, what) {
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: stream });
    const t = setTimeout(() => reject(new Error(`${what} did not start`)), 10000);
    rl.on("line", (l) => {
      const m = l.match(re);
      if (m) { clearTimeout(t); resolve(m); }
    });
  });
}

async function within(seconds, check, what) {
  const end = Date.now() + seconds * 1000;
  for (;;) {
    try { if (await check()) return; } catch {}
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function ollie9p(verb, file, input) {
  return execFileSync(`${build}/bin/ollie-9p`, [verb, file], { env, encoding: "utf8", input: input ?? "", stdio: ["pipe", "pipe", "pipe"] });
}

async function startOlliesrv() {
  olliesrv = start(`${build}/bin/olliesrv`, [], {
    OLLIE_BACKEND: "openai", OLLIE_OPENAI_URL: `${fakeUrl}/v1`, OLLIE_OPENAI_KEY: "x", OLLIE_MODEL: "fake-model",
  });
  olliesrv.stderr.on("data", () => {});
  await within(10, () => ollie9p("read", "session/idx") !== undefined, "olliesrv answers");
}

// Gone at once (SIGKILL): a SIGTERM would first interrupt the turn, which ends it cancelled.
function killOlliesrv() {
  return new Promise((resolve) => {
    olliesrv.once("exit", resolve);
    olliesrv.kill("SIGKILL");
  });
}

// A bridge and the SDK's client connected to it; updates are collected per session.
function connect({ permission } = {}) {
  const p = spawn(`${build}/bin/ollie-acp`, [], { env, stdio: ["pipe", "pipe", "pipe"] });
  children.push(p);
  let stderr = "";
  p.stderr.on("data", (d) => (stderr += d));
  const updates = [];
  const permissions = [];
  const app = client()
    .onNotification("session/update", (ctx) => { updates.push(ctx.params); })
    .onRequest("session/request_permission", async (ctx) => {
      permissions.push(ctx.params);
      return permission ? permission(ctx.params) : { outcome: { outcome: "cancelled" } };
    });
  const conn = app.connect(ndJsonStream(Writable.toWeb(p.stdin), Readable.toWeb(p.stdout)));
  return { p, agent: conn.agent, conn, updates, permissions, stderr: () => stderr };
}

const text = (updates, kind) =>
  updates.filter((u) => u.update.sessionUpdate === kind).map((u) => u.update.content.text).join("");

before(async () => {
  mkdirSync(project, { recursive: true });
  const cfg = path.join(env.XDG_CONFIG_HOME, "ollie");
  mkdirSync(cfg, { recursive: true });
  mkdirSync(env.XDG_DATA_HOME, { recursive: true });
  mkdirSync(env.XDG_RUNTIME_DIR, { mode: 0o700 });
  mkdirSync(env.NAMESPACE, { mode: 0o700 });
  copyFileSync(path.join(src, "data/sandbox.yaml"), path.join(cfg, "sandbox.yaml"));
  symlinkSync(path.join(build, "tools"), path.join(cfg, "tools"));
  symlinkSync(path.join(src, "data/agents"), path.join(cfg, "agents"));
  symlinkSync(path.join(src, "data/prompts"), path.join(cfg, "prompts"));
  const models = [{ id: "fake-model", context_length: 65536 }, { id: "other-model", context_length: 65536 }];
  writeFileSync(path.join(root, "script.json"), JSON.stringify({ responses, models }));
  const fake = start(`${build}/tests/fakeprovider/fakeprovider`, ["--port", "0", "--script", path.join(root, "script.json")]);
  fakeUrl = (await firstLine(fake.stdout, /listening on (\S+)/, "the fake provider"))[1];
  await startOlliesrv();
});

after(() => {
  for (const p of children) if (p.exitCode === null) p.kill("SIGKILL");
  if (!process.env.KEEP) rmSync(root, { recursive: true, force: true });
});

let main;  // the bridge the scenarios share
let answer = "allow";  // what main's user picks in permission requests
const answerKind = { allow: "allow_once", always: "allow_always", deny: "reject_once" };
let sessionId;
let second;  // the session with the MCP servers notice

test("initialize negotiates version 1 and states the capabilities", async () => {
  main = connect({ permission: (req) => ({ outcome: { outcome: "selected", optionId: req.options.find((o) => o.kind === answerKind[answer]).optionId } }) });
  const r = await main.agent.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
  assert.equal(r.protocolVersion, 1);
  assert.equal(r.agentCapabilities.loadSession, true);
  assert.equal(r.agentCapabilities.promptCapabilities.embeddedContext, true);
  assert.equal(r.agentCapabilities.promptCapabilities.image, false);
  assert.equal(r.agentInfo.name, "ollie-acp");
  // A client that asks for a later version gets the one the bridge speaks.
  const later = await main.agent.request("initialize", { protocolVersion: 7 });
  assert.equal(later.protocolVersion, 1);
});

test("session/new makes an olliesrv session and agent in the editor's cwd, with modes and models", async () => {
  const r = await main.agent.request("session/new", { cwd: project, mcpServers: [] });
  sessionId = r.sessionId;
  const [sid, aid] = sessionId.split("/");
  assert.match(sid, /^[0-9a-f-]{36}$/);
  assert.equal(ollie9p("read", `session/${sid}/agent/${aid}/id`).trim(), aid);
  assert.ok(ollie9p("read", "session/idx").includes(project), "the session's cwd is the editor's");
  assert.equal(r.modes.currentModeId, "default");
  assert.ok(r.modes.availableModes.some((m) => m.id === "explorer"), "the profiles are the modes");
  const model = r.configOptions.find((o) => o.id === "model");
  assert.equal(model.currentValue, "openai/fake-model");
  assert.ok(model.options.some((o) => o.value === "openai/fake-model"));
});

test("a tool-using prompt streams the tool call, its result, the plan, thoughts and the answer", async () => {
  const [sid, aid] = sessionId.split("/");
  main.updates.length = 0;
  const file = path.join(project, "notes.txt");
  writeFileSync(file, "the attached file's text\n");
  const done = main.agent.request("session/prompt", {
    sessionId,
    prompt: [{ type: "text", text: "Say hi with the shell." }, { type: "resource_link", uri: `file://${file}`, name: "notes.txt" }],
  });
  // While the tool runs, the agent's plan changes (here the hostowner writes it).
  await within(10, () => main.updates.some((u) => u.update.sessionUpdate === "tool_call"), "the tool call");
  ollie9p("write", `session/${sid}/agent/${aid}/plan`, "- [x] look around\n- [ ] say hi\n");
  const r = await done;
  assert.equal(r.stopReason, "end_turn");
  const ups = main.updates.filter((u) => u.sessionId === sessionId).map((u) => u.update);
  const call = ups.find((u) => u.sessionUpdate === "tool_call");
  assert.equal(call.kind, "execute");
  assert.equal(call.status, "in_progress");
  assert.match(call.title, /^shell sleep 1; echo hi-from-tool/);
  const result = ups.find((u) => u.sessionUpdate === "tool_call_update" && u.toolCallId === call.toolCallId);
  assert.equal(result.status, "completed");
  assert.match(result.content[0].content.text, /hi-from-tool/);
  const plan = ups.find((u) => u.sessionUpdate === "plan");
  assert.deepEqual(plan.entries.map((e) => [e.content, e.status]), [["look around", "completed"], ["say hi", "pending"]]);
  assert.equal(text(main.updates, "agent_thought_chunk"), "The tool said hi.");
  assert.equal(text(main.updates, "agent_message_chunk"), "Done: hi-from-tool");
  assert.ok(!ups.some((u) => u.sessionUpdate === "user_message_chunk"), "the editor's own prompt is not echoed");
  // The attached file reached the model as context.
  const log = ollie9p("read", `session/${sid}/agent/${aid}/log.raw`);
  assert.ok(log.includes("the attached file's text"), "the linked file is inlined");
});

// The bridge reads and writes on one thread: a linked FIFO or /dev/stdin (its own stdin, the
// editor's pipe) read there would stop it for good. They are named, not read.
test("a linked FIFO or /dev/stdin is named, and the bridge goes on", async () => {
  const [sid, aid] = sessionId.split("/");
  const fifo = path.join(project, "a.fifo");
  execFileSync("mkfifo", [fifo]);
  main.updates.length = 0;
  const done = main.agent.request("session/prompt", {
    sessionId,
    prompt: [{ type: "text", text: "Mind the fifo." },
             { type: "resource_link", uri: `file://${fifo}`, name: "a.fifo" },
             { type: "resource_link", uri: "file:///dev/stdin", name: "stdin" }],
  });
  const late = new Promise((_, reject) => setTimeout(() => reject(new Error("the bridge is stuck on the FIFO")), 10000));
  const r = await Promise.race([done, late]);
  assert.equal(r.stopReason, "end_turn");
  assert.equal(text(main.updates, "agent_message_chunk"), "Named, not read.");
  const again = await Promise.race([main.agent.request("initialize", { protocolVersion: 1 }), late]);
  assert.equal(again.protocolVersion, 1, "a second request is answered");
  const log = ollie9p("read", `session/${sid}/agent/${aid}/log.raw`);
  assert.ok(log.includes(`<file path=\\"${fifo}\\" inlined=\\"false\\"/>`), "the FIFO is named");
  // Node's child stdio is a socket pair, which cannot be opened: named as unreadable (a pipe,
  // as AcpPrompt.AFifoOrAPipeIsNamedWithoutBlocking has it, is named as not inlined).
  assert.match(log, /<file path=\\"\/dev\/stdin\\" (inlined=\\"false\\"|unreadable=\\"true\\")\/>/, "so is /dev/stdin");
  rmSync(fifo);
});

test("session/cancel stops the turn: the prompt ends cancelled", async () => {
  main.updates.length = 0;
  const done = main.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "Talk slowly." }] });
  await within(10, () => text(main.updates, "agent_message_chunk").length > 0, "the first chunk");
  await main.agent.notify("session/cancel", { sessionId });
  const r = await done;
  assert.equal(r.stopReason, "cancelled");
  assert.ok(text(main.updates, "agent_message_chunk").length < slow.length, "the answer was cut short");
});

// ACP's session/cancel is a notification; sent with an id (as some editors do), it still cancels,
// and its answer is null, not "method not found".
test("session/cancel sent as a request cancels the turn and is answered null", async () => {
  main.updates.length = 0;
  const done = main.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "Cancel me by request." }] });
  await within(10, () => text(main.updates, "agent_message_chunk").length > 0, "the first chunk");
  assert.equal(await main.agent.request("session/cancel", { sessionId }), null);
  const r = await done;
  assert.equal(r.stopReason, "cancelled");
});

// A !command runs at once, beside any turn; ctl stop ends it (its exec block says interrupted).
test("session/cancel stops a !command: the prompt ends cancelled at once", async () => {
  main.updates.length = 0;
  const start = Date.now();
  const done = main.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "!sleep 30; echo slept" }] });
  await new Promise((r) => setTimeout(r, 1000));
  await main.agent.notify("session/cancel", { sessionId });
  const r = await done;
  assert.equal(r.stopReason, "cancelled");
  assert.ok(Date.now() - start < 8000, `answered after ${Date.now() - start} ms`);
  const said = text(main.updates, "agent_message_chunk");
  assert.match(said, /interrupted/);
  assert.doesNotMatch(said, /^slept$/m);
});

test("a bypass request becomes session/request_permission; allow runs it outside the sandbox", async () => {
  main.updates.length = 0;
  main.permissions.length = 0;
  const r = await main.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "Run it outside." }] });
  assert.equal(r.stopReason, "end_turn");
  assert.equal(main.permissions.length, 1);
  const ask = main.permissions[0];
  assert.equal(ask.sessionId, sessionId);
  assert.match(ask.toolCall.title, /shell echo outside-the-sandbox$/, "exactly what would run");
  assert.deepEqual(ask.options.map((o) => o.kind), ["allow_once", "allow_always", "reject_once"]);
  const ups = main.updates.map((u) => u.update);
  // The request is an update of the call awaiting it, by that call's id; allowed, it runs.
  const call = ups.find((u) => u.sessionUpdate === "tool_call");
  assert.equal(call.title, "shell echo outside-the-sandbox", "the command, not the arguments' JSON");
  assert.equal(ask.toolCall.toolCallId, call.toolCallId);
  assert.equal(ask.toolCall.status, "pending");
  const running = ups.findIndex((u) => u.sessionUpdate === "tool_call_update" && u.toolCallId === call.toolCallId && u.status === "in_progress");
  const result = ups.find((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
  assert.ok(running >= 0 && running < ups.indexOf(result), "in progress once allowed, then completed");
  assert.equal(result.toolCallId, call.toolCallId);
  assert.match(result.content[0].content.text, /outside-the-sandbox/);
  const [sid, aid] = sessionId.split("/");
  assert.match(ollie9p("read", `session/${sid}/agent/${aid}/log.raw`), /approved/);
});

test("olliesrv going away ends the open prompt with an error", async () => {
  main.updates.length = 0;
  const done = main.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "Talk slowly again." }] });
  await within(10, () => text(main.updates, "agent_message_chunk").length > 0, "the first chunk");
  await killOlliesrv();
  await assert.rejects(done, /olliesrv|killed|event/);
});

test("after olliesrv restarts, session/load replays the history and the next prompt runs", async () => {
  await startOlliesrv();
  main.updates.length = 0;
  const r = await main.agent.request("session/load", { sessionId, cwd: project, mcpServers: [] });
  assert.equal(r.modes.currentModeId, "default");
  const ups = main.updates.filter((u) => u.sessionId === sessionId).map((u) => u.update);
  assert.ok(text(main.updates, "user_message_chunk").includes("Say hi with the shell."), "the user's prompts");
  assert.ok(text(main.updates, "agent_message_chunk").includes("Done: hi-from-tool"), "the answers");
  assert.ok(ups.some((u) => u.sessionUpdate === "tool_call" && /hi-from-tool/.test(u.title)), "the tool calls");
  assert.ok(ups.some((u) => u.sessionUpdate === "plan" && u.entries.length === 2), "the plan");
  main.updates.length = 0;
  const p = await main.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "Still there?" }] });
  assert.equal(p.stopReason, "end_turn");
  assert.equal(text(main.updates, "agent_message_chunk"), "Back again.");
  // An id the bridge did not make is not found, and nothing of olliesrv's is reached through it.
  await assert.rejects(main.agent.request("session/load", { sessionId: "../../bypass", cwd: project, mcpServers: [] }),
                       (e) => e.code === -32002);
});

test("olliesrv restarting while the bridge is idle: the next request dials again and works", async () => {
  await killOlliesrv();
  await startOlliesrv();
  const r = await main.agent.request("session/load", { sessionId, cwd: project, mcpServers: [] });
  assert.equal(r.modes.currentModeId, "default");
});

test("deny in the permission request: nothing runs", async () => {
  answer = "deny";
  main.updates.length = 0;
  main.permissions.length = 0;
  const r = await main.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "Try again outside." }] });
  assert.equal(r.stopReason, "end_turn");
  assert.equal(main.permissions.length, 1);
  const call = main.updates.map((u) => u.update).find((u) => u.sessionUpdate === "tool_call");
  assert.equal(main.permissions[0].toolCall.toolCallId, call.toolCallId);
  const result = main.updates.map((u) => u.update).find((u) => u.sessionUpdate === "tool_call_update");
  assert.equal(result.toolCallId, call.toolCallId);
  assert.equal(result.status, "failed");
  assert.match(result.content[0].content.text, /bypass denied/);
  assert.doesNotMatch(result.content[0].content.text, /must-not-run\n/);
  assert.equal(text(main.updates, "agent_message_chunk").includes("It was denied."), true);
});

test("modes and models are set through ctl agent and ctl model", async () => {
  const [sid, aid] = sessionId.split("/");
  await main.agent.request("session/set_mode", { sessionId, modeId: "explorer" });
  assert.match(ollie9p("read", `session/${sid}/agent/${aid}/cfg`), /^agent=explorer$/m);
  await assert.rejects(main.agent.request("session/set_mode", { sessionId, modeId: "no-such-profile" }), /unknown agent profile/);
  // A value the select does not offer is refused, and nothing changes.
  await assert.rejects(main.agent.request("session/set_config_option", { sessionId, configId: "model", value: "openai/nosuch" }),
                       /model not offered: openai\/nosuch/);
  assert.match(ollie9p("read", `session/${sid}/agent/${aid}/cfg`), /^model=fake-model$/m);
  const r = await main.agent.request("session/set_config_option", { sessionId, configId: "model", value: "openai/other-model" });
  assert.equal(r.configOptions[0].currentValue, "openai/other-model");
  assert.match(ollie9p("read", `session/${sid}/agent/${aid}/cfg`), /^model=other-model$/m);
});

test("a /verb prompt is the agent's ctl verb: its reply is the answer, no turn runs", async () => {
  main.updates.length = 0;
  const r = await main.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "/model" }] });
  assert.equal(r.stopReason, "end_turn");
  assert.match(text(main.updates, "agent_message_chunk"), /:: other-model/);
});

test("a turn the provider filtered ends with stop reason refusal", async () => {
  main.updates.length = 0;
  const r = await main.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "Something it refuses." }] });
  assert.equal(r.stopReason, "refusal");
  assert.match(text(main.updates, "agent_message_chunk"), /I would rather not\./);
});

test("the editor's MCP servers are not used, and the chat says so", async () => {
  const r = await main.agent.request("session/new", {
    cwd: project, mcpServers: [{ name: "fs", command: "/bin/true", args: [], env: [] }],
  });
  assert.notEqual(r.sessionId, sessionId);
  second = r.sessionId;
  main.updates.length = 0;
  const p = await main.agent.request("session/prompt", { sessionId: r.sessionId, prompt: [{ type: "text", text: "Hi." }] });
  assert.equal(p.stopReason, "end_turn");
  const said = text(main.updates, "agent_message_chunk");
  assert.match(said, /MCP servers \(fs\) are not used/);
  assert.match(said, /Hello from the second session\./);
  assert.ok(main.updates.every((u) => u.sessionId === r.sessionId), "only the second session's updates");
});

test("a blank prompt is answered end_turn at once, writes nothing and leaves the session free", async () => {
  const [sid, aid] = second.split("/");
  const before = ollie9p("read", `session/${sid}/agent/${aid}/log.raw`);
  for (const blank of ["   ", "", " \n\t"]) {
    const r = await main.agent.request("session/prompt", { sessionId: second, prompt: [{ type: "text", text: blank }] });
    assert.equal(r.stopReason, "end_turn");
  }
  assert.equal(ollie9p("read", `session/${sid}/agent/${aid}/log.raw`), before, "nothing reached the agent");
});

// ollie-9p is the other client: its prompt runs first, the editor's is queued behind it.
test("a prompt queued behind another client's turn shows only its own turn", async () => {
  const [sid, aid] = second.split("/");
  main.updates.length = 0;
  ollie9p("write", `session/${sid}/agent/${aid}/prompt`, "A question from elsewhere.");
  const r = await main.agent.request("session/prompt", { sessionId: second, prompt: [{ type: "text", text: "  My question.\n" }] });
  assert.equal(r.stopReason, "end_turn");
  assert.equal(text(main.updates, "agent_message_chunk"), "Mine, after the other turn.");
  assert.ok(!main.updates.some((u) => u.update.sessionUpdate === "user_message_chunk"), "neither prompt echoed");
});

test("a cancel while queued behind another client's turn stops only the editor's own turn", async () => {
  const [sid, aid] = second.split("/");
  main.updates.length = 0;
  ollie9p("write", `session/${sid}/agent/${aid}/prompt`, "Another question from elsewhere.");
  const done = main.agent.request("session/prompt", { sessionId: second, prompt: [{ type: "text", text: "Cancel me while queued." }] });
  await main.agent.notify("session/cancel", { sessionId: second });
  const r = await done;
  assert.equal(r.stopReason, "cancelled");
  assert.ok(!text(main.updates, "agent_message_chunk").includes("elsewhere"), "nothing of the other turn");
  const log = ollie9p("read", `session/${sid}/agent/${aid}/log.raw`).trim().split("\n").map((l) => JSON.parse(l));
  const theirs = log.findIndex((b) => b.role === "user" && b.content === "Another question from elsewhere.");
  const mine = log.findIndex((b) => b.role === "user" && b.content === "Cancel me while queued.");
  assert.ok(theirs >= 0 && mine > theirs, "the editor's prompt ran after the other one");
  const between = log.slice(theirs + 1, mine);
  assert.ok(between.some((b) => b.role === "assistant" && b.content === elsewhere), "the other turn answered in full");
  assert.ok(!between.some((b) => b.role === "info" && b.content === "interrupted"), "the other turn was not stopped");
  assert.ok(log.slice(mine + 1).some((b) => b.role === "info" && b.content === "interrupted"), "the editor's turn was");
  // Its prompt leaves the model's history, so no later request takes the answer it may have left.
  ollie9p("rdwr", `session/${sid}/agent/${aid}/ctl`, "clear");
});

test("the editor hanging up with a permission request open denies it before the bridge exits", async () => {
  const [sid, aid] = second.split("/");
  const hang = connect({ permission: () => new Promise(() => {}) });  // never answered
  await hang.agent.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
  await hang.agent.request("session/load", { sessionId: second, cwd: project, mcpServers: [] });
  const abandoned = hang.agent.request("session/prompt", { sessionId: second, prompt: [{ type: "text", text: "Once more outside." }] });
  abandoned.catch(() => {});
  await within(10, () => hang.permissions.length === 1, "the permission request");
  const reqid = hang.permissions[0].toolCall.content[0].content.text.match(/bypass request (\d+)/)[1];
  const pending = () => ollie9p("read", `bypass/pending/${ollie9p("read", `session/${sid}/name`).trim()}`);
  const listed = new RegExp(`^${reqid}\t`, "m");
  assert.match(pending(), listed);
  const exited = new Promise((r) => hang.p.on("exit", (code, signal) => r({ code, signal })));
  hang.p.stdin.end();
  assert.deepEqual(await exited, { code: 0, signal: null }, hang.stderr());
  // Its prompt, not waited for, is answered all the same.
  await assert.rejects(abandoned, /stdin ended/);
  assert.doesNotMatch(pending(), listed, "denied, not left pending");
  // The turn goes on without the bridge; its end keeps the fake provider's queue in step.
  await within(10, () => ollie9p("read", `session/${sid}/agent/${aid}/log.raw`).includes("Denied at hang-up."), "the turn's end");
  assert.match(ollie9p("read", `session/${sid}/agent/${aid}/log.raw`), /bypass denied/);
});

test("malformed JSON-RPC gets a JSON-RPC error and the bridge keeps going", async () => {
  const p = spawn(`${build}/bin/ollie-acp`, [], { env, stdio: ["pipe", "pipe", "pipe"] });
  children.push(p);
  const replies = [];
  createInterface({ input: p.stdout }).on("line", (l) => replies.push(JSON.parse(l)));
  // Before initialize: a request is refused, a notification ignored.
  p.stdin.write(`{"jsonrpc":"2.0","id":0,"method":"session/new","params":{"cwd":"${project}","mcpServers":[]}}\n`);
  p.stdin.write(`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"x"}}\n`);
  p.stdin.write("this is not json\n");
  p.stdin.write('{"jsonrpc":"2.0","id":1,"method":"no/such/method"}\n');
  p.stdin.write('{"jsonrpc":"1.0","id":2,"method":"initialize"}\n');
  p.stdin.write('[1,2,3]\n');
  p.stdin.write('{"jsonrpc":"2.0","id":10,"method":"initialize","params":{"protocolVersion":1}}\n');
  p.stdin.write('{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"nope","prompt":[]}}\n');
  // Parameters of the wrong type are invalid params, named.
  p.stdin.write(`{"jsonrpc":"2.0","id":11,"method":"session/new","params":{"cwd":"${project}","mcpServers":"none"}}\n`);
  p.stdin.write(`{"jsonrpc":"2.0","id":12,"method":"session/new","params":{"cwd":"${project}","mcpServers":[{"name":5}]}}\n`);
  p.stdin.write('{"jsonrpc":"2.0","id":13,"method":"session/load","params":{"sessionId":"a/b","cwd":5,"mcpServers":[]}}\n');
  p.stdin.write('{"jsonrpc":"2.0","id":14,"method":"session/load","params":{"sessionId":"a/b","cwd":"/","mcpServers":{}}}\n');
  // Nested ten thousand deep: refused as a parse error, not copied (a copy recurses once a level).
  p.stdin.write(`{"jsonrpc":"2.0","id":15,"method":"x","params":${"[".repeat(10000)}${"]".repeat(10000)}}\n`);
  p.stdin.write('{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":1}}\n');
  await within(10, () => replies.length >= 13, "thirteen replies");
  const byId = (id) => replies.find((r) => r.id === id);
  assert.equal(byId(0).error.code, -32600);
  assert.match(byId(0).error.message, /initialize first/);
  // Answered with a null id: the line that is not JSON, the one nested too deep and the batch.
  assert.equal(replies.filter((r) => r.id === null).length, 3, "the notification was not answered");
  assert.ok(replies.some((r) => r.id === null && r.error?.code === -32700 && r.error.message === "parse error: not JSON"), "not JSON");
  assert.ok(replies.some((r) => r.id === null && r.error?.message === "parse error: nested deeper than 128 levels"), "too deep");
  assert.equal(byId(1).error.code, -32601);
  assert.equal(byId(2).error.code, -32600);
  assert.ok(replies.some((r) => r.id === null && r.error?.code === -32600), "a batch is refused");
  assert.equal(byId(3).error.code, -32002);
  for (const [id, field] of [[11, /mcpServers must be an array/], [12, /mcpServers\[0\]/], [13, /cwd must be a string/], [14, /mcpServers must be an array/]]) {
    assert.equal(byId(id).error.code, -32602, `request ${id}`);
    assert.match(byId(id).error.message, field);
  }
  assert.equal(byId(4).result.protocolVersion, 1, "still answering");
  // A line over 16 MiB is refused even when its newline comes with its last bytes.
  const pad = 16 * 1024 * 1024 + 10 - '{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":1,"pad":""}}'.length;
  p.stdin.write(`{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":1,"pad":"${"x".repeat(pad)}"}}\n`);
  p.stdin.write('{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":1}}\n');
  await within(20, () => byId(6), "the reply after the long line");
  assert.ok(!byId(5), "the long line was not served");
  assert.ok(replies.some((r) => r.id === null && r.error?.message === "message longer than 16 MiB"));
  p.stdin.end();
  const code = await new Promise((r) => p.on("exit", r));
  assert.equal(code, 0, "stdin's end ends the bridge");
});

// What was read before stdin's end is answered before the bridge ends: a last line without its
// newline, requests whose handlers had not run, and one that waits for olliesrv.
test("requests read before stdin's end are answered", async () => {
  const run = (input) => new Promise((resolve) => {
    const p = spawn(`${build}/bin/ollie-acp`, [], { env, stdio: ["pipe", "pipe", "pipe"] });
    children.push(p);
    let out = "", err = "";
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => (err += d));
    p.on("exit", (code) => resolve({ code, err, replies: out.split("\n").filter((l) => l).map((l) => JSON.parse(l)) }));
    p.stdin.end(input);
  });
  const one = await run('{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1}}');
  assert.equal(one.code, 0, one.err);
  assert.deepEqual(one.replies.map((r) => [r.id, r.result?.protocolVersion]), [[7, 1]]);
  const two = await run('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n' +
                        `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"${project}","mcpServers":[]}}\n`);
  assert.equal(two.code, 0, two.err);
  assert.equal(two.replies.find((r) => r.id === 1)?.result?.protocolVersion, 1);
  const made = two.replies.find((r) => r.id === 2);
  assert.match(made?.result?.sessionId ?? JSON.stringify(made), /^[0-9a-f-]{36}\/[0-9a-f-]{36}$/, "session/new answered");
});

test("the editor closing stdin ends the bridge cleanly (exit 0: no sanitizer report, no leak)", async () => {
  const exited = new Promise((r) => main.p.on("exit", (code, signal) => r({ code, signal })));
  main.p.stdin.end();
  const { code, signal } = await exited;
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, main.stderr());
});
