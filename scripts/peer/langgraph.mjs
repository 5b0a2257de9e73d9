// langgraph.mjs — the peer checkpointd is compared with (issue #17):
// LangGraph.js's PostgresSaver.put, in-process, against the same PostgreSQL.
//
//   node langgraph.mjs --url postgres://… --schema peer_x [--clients 16] [--duration 10]
//
// setup() creates the saver's tables in their own schema; then --clients
// async workers, one thread_id each, put a new checkpoint back to back for
// --duration seconds. Each checkpoint's one channel value ("checkpoint") is
// the document `checkpointd loadtest` sends (cmd/checkpointd/loadtest.go,
// newLoadDocument, ported below), with the write number stamped in as the
// load test does, and its parent is the worker's previous checkpoint (the
// config the previous put returned). The schema is dropped at the end, also
// on error. Run it through langgraph.sh, which installs Node 22 and the
// pinned packages.
//
// Output: human-readable "key: value" lines on stderr (as the load test
// prints them) and one machine line on stdout, in the shape of the floor
// lines compare.sh parses:
//
//   peer langgraph-postgres clients=16 seconds=10 doc_bytes=3002 puts_s=… p50_ms=… p99_ms=… cpu_us_per_put=…
//
// cpu_us_per_put is this node process's user+system CPU (process.cpuUsage)
// over the put loop divided by the puts: the client-side cost, which in the
// daemon's case is split between the load-test client and the daemon.
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import pg from "pg";
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import { uuid6 } from "@langchain/langgraph-checkpoint";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    schema: { type: "string" },
    clients: { type: "string", default: "16" },
    duration: { type: "string", default: "10" },
  },
});
const clients = Number(args.clients);
const seconds = Number(args.duration);
if (!args.url || !/^peer_[a-z0-9_]{1,50}$/.test(args.schema ?? "") ||
    !Number.isInteger(clients) || clients < 1 || clients > 256 ||
    !Number.isInteger(seconds) || seconds < 1 || seconds > 300) {
  console.error("usage: langgraph.mjs --url POSTGRES_URL --schema peer_NAME [--clients 1-256] [--duration 1-300]");
  process.exit(2);
}

const loadCounter = "000000000000";
const prose = "The flaky TestWatchReload failed once on CI and passed on retry; unrelated to this change. ";

// sortKeys returns v with every object's keys in byte order, so
// JSON.stringify gives what Go's json.Marshal of a map gives.
function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === "object") {
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys(v[k])]));
  }
  return v;
}

// loadDocument is newLoadDocument of cmd/checkpointd/loadtest.go, field for
// field, for a session and run with ids of the daemon's shape (ses_/run_ and
// 32 hex digits), padded with the same note to about size bytes. Kept in
// step by hand: if the load test's document changes, change this too.
function loadDocument(repo, size) {
  const hex = () => randomUUID().replaceAll("-", "");
  const s = { id: "ses_" + hex(), runID: "run_" + hex(), token: 1 };
  const branch = "loadtest-" + s.id;
  const head = "9fceb02d0ae598e95dc970b74767f19372d61af8";
  const d = {
    schema_version: 1, run_id: s.runID, fencing_token: s.token,
    identity: { runtime: "checkpointd-loadtest", runtime_version: "1.0.0",
      provider: "anthropic", model: "claude-sonnet-4-5", instance: "loadtest/" + s.id },
    role: "author",
    target: { repo, issue: 1, pr: 2 },
    workspace: { worktree: "/srv/agents/loadtest/" + s.id, branch, head, base: "main" },
    capabilities: ["git.push", "pr.create", "pr.comment", "tests.run"],
    stage: "implementing",
    last_completed_action: { kind: "git.commit", at: "2026-03-01T12:04:05Z",
      summary: "Load-test write " + loadCounter + ": guard Widget.Render against a nil theme and add a regression test." },
    pending_operation: { kind: "tests.run", started_at: "2026-03-01T12:05:00Z",
      summary: "go test ./... -race on the branch head before replying to the review" },
    pending_mutation: { kind: "gitea.pr.comment", target: repo + "!2",
      idempotency_key: "loadtest-" + s.id + "-reply",
      summary: "Reply to review #2: nil theme now handled, test added, asked to re-review." },
    evidence: [
      { kind: "test_run", ref: "https://ci.example.invalid/builds/881", summary: "go test ./... passed: 412 tests, 0 failures" },
      { kind: "git.commit", ref: head, summary: "fix: guard Render against nil theme" },
      { kind: "review", ref: "https://git.example.invalid/pulls/2#issuecomment-2207",
        summary: "Reviewer asked for a regression test and a changelog entry." },
    ],
    blocker: { kind: "waiting_review", waiting_on: "reviewer",
      summary: "Changes requested; the fix is pushed, waiting for the reviewer to look again." },
    next_action: { actor: "author",
      action: "Post the reply to review #2 unless a comment with the idempotency key already exists, then request a re-review.",
      prompt: "You are resuming work on the load-test session. Check whether your reply to review #2 was posted; if not, post it. Then request a re-review and wait." },
    recovery: {
      instructions: "Fetch the branch and make sure the worktree is at the recorded head before doing anything. If the head moved, re-read the PR before continuing.",
      commands: ["git fetch origin", "git checkout " + branch, "git reset --hard " + head, "go test ./..."],
    },
  };
  let raw = JSON.stringify(sortKeys(d));
  const want = Math.max(size - raw.length - ',"note":""'.length, 0);
  let note = "";
  while (note.length < want) note += prose.slice(0, Math.min(prose.length, want - note.length));
  if (note.length > 0) d.note = note.trim() + ".";
  return sortKeys(d);
}

// stamped returns a copy of doc with write number n in the place the load
// test stamps it, so successive checkpoints differ as real ones do.
function stamped(doc, n) {
  const digits = String(n).padStart(loadCounter.length, "0").slice(-loadCounter.length);
  return { ...doc, last_completed_action: { ...doc.last_completed_action,
    summary: doc.last_completed_action.summary.replace(loadCounter, digits) } };
}

// percentile is the nearest-rank percentile of sorted numbers, as the load
// test computes it.
function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  const i = Math.floor((p / 100) * sorted.length + 0.5) - 1;
  return sorted[Math.min(Math.max(i, 0), sorted.length - 1)];
}

// worker is one thread: back-to-back puts, each a child of the previous one.
async function worker(saver, i, deadline, latencies) {
  const doc = loadDocument("loadtest/loadtest", 3000);
  let config = { configurable: { thread_id: `peer-thread-${i}`, checkpoint_ns: "" } };
  let puts = 0;
  for (let n = 1; performance.now() < deadline; n++) {
    const checkpoint = {
      v: 4,
      id: uuid6(n),
      ts: new Date().toISOString(),
      channel_values: { checkpoint: stamped(doc, n) },
      channel_versions: { checkpoint: n },
      versions_seen: {},
    };
    const metadata = { source: "loop", step: n, parents: {} };
    const t0 = performance.now();
    config = await saver.put(config, checkpoint, metadata, { checkpoint: n });
    latencies.push(performance.now() - t0);
    puts++;
  }
  return puts;
}

// One pool connection per worker, as the daemon's load test keeps one
// keep-alive connection per client (pg's default pool of 10 would queue 16
// workers on the client side and measure the pool, not the saver).
const pool = new pg.Pool({ connectionString: args.url, max: clients });
const saver = new PostgresSaver(pool, undefined, { schema: args.schema });
let exitCode = 0;
try {
  await saver.setup();
  const docBytes = JSON.stringify(loadDocument("loadtest/loadtest", 3000)).length;
  const latencies = [];
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const deadline = start + seconds * 1000;
  const puts = (await Promise.all(Array.from({ length: clients }, (_, i) => worker(saver, i, deadline, latencies))))
    .reduce((a, b) => a + b, 0);
  const elapsed = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpu0);
  latencies.sort((a, b) => a - b);
  const rate = puts / elapsed;
  const ms = (p) => percentile(latencies, p).toFixed(2);
  const cpuPerPut = puts > 0 ? (cpu.user + cpu.system) / puts : 0;
  console.error(`target:      PostgresSaver.put, schema ${args.schema}, ${clients} threads, ${seconds}s, ${docBytes}-byte documents`);
  console.error(`puts:        ${puts}`);
  console.error(`elapsed:     ${elapsed.toFixed(3)}s`);
  console.error(`puts/s:      ${rate.toFixed(1)}`);
  console.error(`latency p50: ${ms(50)}ms`);
  console.error(`latency p90: ${ms(90)}ms`);
  console.error(`latency p99: ${ms(99)}ms`);
  console.error(`latency max: ${ms(100)}ms`);
  console.error(`node cpu:    ${(cpu.user / 1e6).toFixed(2)}s user, ${(cpu.system / 1e6).toFixed(2)}s sys, ${cpuPerPut.toFixed(0)} µs/put`);
  console.log(`peer langgraph-postgres clients=${clients} seconds=${seconds} doc_bytes=${docBytes} ` +
    `puts=${puts} puts_s=${rate.toFixed(1)} p50_ms=${ms(50)} p99_ms=${ms(99)} cpu_us_per_put=${cpuPerPut.toFixed(0)}`);
} catch (e) {
  console.error("langgraph.mjs:", e);
  exitCode = 1;
} finally {
  // The schema name was checked against ^peer_[a-z0-9_]+$ above.
  await pool.query(`DROP SCHEMA IF EXISTS "${args.schema}" CASCADE`).catch((e) => {
    console.error(`langgraph.mjs: drop schema ${args.schema}:`, e.message);
    exitCode = 1;
  });
  await saver.end();
}
process.exit(exitCode);
