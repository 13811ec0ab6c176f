// The client against a live daemon on loopback (docs/typescript-client.md, "Tests").
// tests/test_typescript_client.py starts the daemon and passes CREATIVE_MEMORY_URL,
// CREATIVE_MEMORY_TOKEN and CREATIVE_MEMORY_USER; run alone, point them at any daemon
// whose memory may be erased. CREATIVE_MEMORY_EVENTS_FILE (optional: the user's
// events.jsonl on the daemon's file store) lets the repair test damage the log first.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import {
  AuthProblem,
  CreativeMemoryClient,
  LogDamagedProblem,
  NotFoundProblem,
  ProblemError,
  ServerProblem,
  TransportError,
  ValidationProblem,
  type Archive,
  type DerivationVersion,
  type WireEvent,
} from "../src/index.js";

const url = process.env.CREATIVE_MEMORY_URL;
const token = process.env.CREATIVE_MEMORY_TOKEN;
const user = process.env.CREATIVE_MEMORY_USER ?? "default";
const eventsFile = process.env.CREATIVE_MEMORY_EVENTS_FILE;
if (!url || !token) throw new Error("set CREATIVE_MEMORY_URL and CREATIVE_MEMORY_TOKEN");

const client = new CreativeMemoryClient({ baseUrl: url, token });
const PROJECT = "ts-client";

function event(kind: string, artifact: string, pattern: string, extra: Record<string, unknown>): WireEvent {
  return {
    event: kind,
    user_id: user,
    artifact_id: artifact,
    session_id: "ts-session",
    project_id: PROJECT,
    timestamp: new Date().toISOString(),
    artifact_meta: { signals: [{ preference_type: pattern.split("/")[0], pattern: pattern.split("/")[1] }] },
    ...extra,
  };
}

// Enough evidence for both patterns to reach the memory block: four negative tags on
// neon_palette, one positive tag on bento_grid.
const EVIDENCE: WireEvent[] = [
  ...[0, 1, 2, 3].map((i) => event("explicit_tag_applied", `neon-${i}`, "color/neon_palette", { tag_text: "too noisy" })),
  event("explicit_tag_applied", "bento-0", "layout/bento_grid", { tag_text: "love this" }),
];

/** Which client method covers each operationId of the daemon's OpenAPI document. */
const METHOD_OF: Record<string, keyof CreativeMemoryClient> = {
  healthz: "health",
  openapi: "openapi",
  inspect: "inspect",
  forget: "forget",
  explain: "explain",
  timeline: "timeline",
  reset: "reset",
  check: "check",
  repair: "repair",
  ingestEvents: "ingestEvents",
  prompt: "prompt",
  composePrompt: "composePrompt",
  getSettings: "getSettings",
  changeSettings: "changeSettings",
  export: "exportArchive",
  import: "importArchive",
  derivation: "derivation",
  useDerivation: "useDerivation",
  previewDerivation: "previewDerivation",
};

describe("the client against a live daemon", () => {
  before(async () => {
    await client.reset({ confirm: true, scope: `project:${PROJECT}` });
    const ingested = await client.ingestEvents(EVIDENCE);
    assert.equal(ingested.accepted, EVIDENCE.length, JSON.stringify(ingested.results));
  });

  after(async () => {
    await client.reset({ confirm: true, scope: `project:${PROJECT}` });
  });

  test("every operation of the OpenAPI document has a method", async () => {
    const doc = (await client.openapi()) as unknown as { paths: Record<string, Record<string, { operationId: string }>> };
    const ids = Object.values(doc.paths).flatMap((ops) => Object.values(ops).map((op) => op.operationId));
    assert.deepEqual([...ids].sort(), Object.keys(METHOD_OF).sort());
    for (const method of Object.values(METHOD_OF)) assert.equal(typeof client[method], "function", method);
  });

  test("health needs no token", async () => {
    const anonymous = new CreativeMemoryClient({ baseUrl: url });
    assert.equal((await anonymous.health()).status, "ok");
  });

  test("ingestEvents reports each event; one bad event does not fail the batch", async () => {
    // a literal wire event with its kind's own keys (rating) type-checks: WireEvent is open
    const literal: WireEvent = {
      event: "thumbs_rated",
      user_id: user,
      artifact_id: "literal",
      session_id: "ts-session",
      project_id: PROJECT,
      timestamp: new Date().toISOString(),
      artifact_meta: { signals: [{ preference_type: "color", pattern: "teal" }] },
      rating: "up",
    };
    assert.equal((await client.ingestEvents(literal)).accepted, 1);
    const single = await client.ingestEvents(event("thumbs_rated", "single", "color/teal", { rating: "up" }));
    assert.equal(single.events, 1);
    assert.equal(single.results[0]?.where, "body");
    const mixed = await client.ingestEvents([
      event("thumbs_rated", "ok-1", "color/teal", { rating: "up" }),
      event("no_such_event", "bad-1", "color/teal", {}),
    ]);
    assert.equal(mixed.accepted, 1);
    assert.equal(mixed.rejected, 1);
    assert.equal(mixed.results[1]?.status, "rejected");
    assert.equal(mixed.results[1]?.where, "events[1]");
  });

  test("inspect lists the records of the project", async () => {
    const view = await client.inspect({ projectId: PROJECT });
    assert.equal(view.user_id, user);
    assert.equal(view.project_id, PROJECT);
    const patterns = view.preferences.map((p) => `${p.preference_type}/${p.pattern}`);
    assert.ok(patterns.includes("color/neon_palette"), patterns.join(", "));
    assert.ok(view.projects.includes(PROJECT));
  });

  test("prompt returns the memory block, as JSON or text", async () => {
    const json = await client.prompt({ projectId: PROJECT, variant: "generation" });
    assert.equal(json.project_id, PROJECT);
    assert.match(json.block, /avoids \(\w+\): neon_palette/);
    const text = await client.promptText({ projectId: PROJECT });
    assert.equal(text, json.block);
    assert.equal(await client.promptText({ variant: "legacy" }), "");
  });

  test("composePrompt inserts the block into the host prompt", async () => {
    const host = "You are a designer.\n\n## Active skill\nLanding pages.\n";
    const composed = await client.composePrompt({ host_prompt: host, project_id: PROJECT });
    assert.ok(composed.prompt?.startsWith("You are a designer."));
    assert.ok(composed.prompt?.includes(composed.block.trim()));
    assert.ok(composed.prompt?.indexOf("neon_palette")! < composed.prompt!.indexOf("## Active skill"));
    const text = await client.composePromptText({ host_prompt: host, project_id: PROJECT });
    assert.equal(text, composed.prompt);
  });

  test("composePrompt and composePromptText at a point in the past (atSeq / asOf, in the query)", async () => {
    const host = "You are a designer.\n";
    const now = await client.composePrompt({ host_prompt: host, project_id: PROJECT });
    assert.equal(now.as_of ?? null, null);
    const empty = await client.composePrompt({ host_prompt: host, project_id: PROJECT, atSeq: 0 });
    assert.equal(empty.as_of?.at_seq, 0);
    assert.equal(empty.block, "");
    assert.ok(!empty.prompt?.includes("neon_palette"));
    const before = await client.composePrompt({ host_prompt: host, project_id: PROJECT, asOf: "2001-01-01" });
    assert.equal(before.as_of?.events, 0);
    assert.equal(before.block, "");
    const later = await client.composePrompt({ host_prompt: host, project_id: PROJECT, asOf: "2999-01-01T00:00:00Z" });
    assert.equal(later.block, now.block);
    assert.equal(await client.composePromptText({ host_prompt: host, project_id: PROJECT, atSeq: 0 }), empty.prompt);
    assert.equal(
      await client.composePromptText({ host_prompt: host, project_id: PROJECT, asOf: "2999-01-01T00:00:00Z" }),
      now.prompt,
    );
    await assert.rejects(client.composePrompt({ host_prompt: host, atSeq: -1 }), (err: unknown) => {
      assert.ok(err instanceof ValidationProblem);
      assert.equal(err.field, "at_seq");
      return true;
    });
  });

  test("explain traces a pattern; an unknown one is a NotFoundProblem naming the field", async () => {
    const why = await client.explain("color", "neon_palette", { projectId: PROJECT });
    assert.equal(why.pattern, "neon_palette");
    assert.ok(why.steps.length >= 4);
    await assert.rejects(client.explain("color", "never_seen", { projectId: PROJECT }), (err: unknown) => {
      assert.ok(err instanceof NotFoundProblem);
      assert.equal(err.status, 404);
      assert.equal(err.field, "pattern");
      assert.match(err.detail, /nothing to explain/);
      return true;
    });
  });

  test("timeline lists the evidence events without deriving; an unknown pattern is a NotFoundProblem", async () => {
    const seen = await client.timeline("color", "neon_palette", { projectId: PROJECT });
    assert.equal(seen.pattern, "neon_palette");
    assert.equal(seen.events.length, 4);
    assert.ok(seen.events.every((e) => e.kind === "signal" && e.polarity === "negative"));
    const why = await client.explain("color", "neon_palette", { projectId: PROJECT });
    const first = why.steps[0]!.seq;
    assert.deepEqual((await client.timeline("color", "neon_palette", { projectId: PROJECT, atSeq: first })).events.map((e) => e.seq), [first]);
    await assert.rejects(client.timeline("color", "never_seen", { projectId: PROJECT }), (err: unknown) => {
      assert.ok(err instanceof NotFoundProblem);
      assert.equal(err.field, "pattern");
      return true;
    });
  });

  test("inspect, explain and prompt at a point in the past (atSeq / asOf)", async () => {
    const why = await client.explain("color", "neon_palette", { projectId: PROJECT });
    const first = why.steps[0]!.seq;
    const then = await client.explain("color", "neon_palette", { projectId: PROJECT, atSeq: first });
    assert.equal(then.steps.length, 1);
    const view = await client.inspect({ projectId: PROJECT, atSeq: first });
    assert.equal(view.as_of?.at_seq, first);
    assert.equal(view.event_count, view.as_of?.events);
    assert.equal((await client.inspect({ projectId: PROJECT })).as_of ?? null, null);
    const before = await client.prompt({ projectId: PROJECT, asOf: "2001-01-01" });
    assert.equal(before.block, "");
    assert.equal(before.as_of?.events, 0);
    assert.equal(await client.promptText({ projectId: PROJECT, atSeq: 0 }), "");
    const now = await client.prompt({ projectId: PROJECT, asOf: "2999-01-01T00:00:00Z" });
    assert.equal(now.block, (await client.prompt({ projectId: PROJECT })).block);
    for (const [options, field] of [[{ atSeq: -1 }, "at_seq"], [{ asOf: "last tuesday" }, "as_of"]] as const) {
      await assert.rejects(client.inspect(options), (err: unknown) => {
        assert.ok(err instanceof ValidationProblem);
        assert.equal(err.field, field);
        return true;
      });
    }
  });

  test("derivation: show, preview a switch, switch and back", async () => {
    const info = await client.derivation();
    assert.equal(info.user_id, user);
    assert.ok(info.known.includes(info.in_force));
    const other = info.known.find((v) => v !== info.in_force) as DerivationVersion;
    const preview = await client.previewDerivation(other, { projectId: PROJECT });
    assert.equal(preview.from_version, info.in_force);
    assert.equal(preview.to_version, other);
    assert.equal(preview.project_id, PROJECT);
    assert.equal(typeof preview.change.block_changed, "boolean");
    assert.deepEqual(await client.derivation(), info); // a preview writes nothing
    assert.equal((await client.useDerivation(other)).changed, true);
    const switched = await client.derivation();
    assert.equal(switched.in_force, other);
    assert.equal(switched.history.at(-1)?.version, other);
    const back = info.in_force as DerivationVersion;
    assert.equal((await client.useDerivation(back)).changed, true);
    assert.equal((await client.useDerivation(back)).changed, false);
    for (const send of [() => client.useDerivation("9" as DerivationVersion), () => client.previewDerivation("9" as DerivationVersion)]) {
      await assert.rejects(send(), (err: unknown) => {
        assert.ok(err instanceof ValidationProblem);
        assert.equal(err.status, 422);
        assert.equal(err.field, "version");
        return true;
      });
    }
  });

  test("forget erases the events about a pattern and says how many", async () => {
    const gone = await client.forget("layout", "bento_grid", { projectId: PROJECT });
    assert.equal(gone.events_removed, 1);
    const again = await client.forget("layout", "bento_grid", { projectId: PROJECT });
    assert.equal(again.events_removed, 0);
    const view = await client.inspect({ projectId: PROJECT });
    assert.ok(!view.preferences.some((p) => p.pattern === "bento_grid"));
  });

  test("settings: read, change, and a 422 ValidationProblem with its field", async () => {
    const before = await client.getSettings();
    const paused = await client.changeSettings({ paused: true });
    assert.equal(paused.paused, true);
    const resumed = await client.changeSettings({ paused: before.paused });
    assert.equal(resumed.paused, before.paused);
    await assert.rejects(client.changeSettings({ paused_until: "2000-01-01T00:00:00Z" }), (err: unknown) => {
      assert.ok(err instanceof ValidationProblem);
      assert.ok(err instanceof ProblemError);
      assert.equal(err.status, 422);
      assert.equal(err.field, "paused_until");
      assert.equal(err.problem.status, 422);
      return true;
    });
  });

  test("export and import round-trip the archive", async () => {
    const archive = await client.exportArchive();
    assert.equal(archive.format, "creative-memory-archive");
    assert.equal(archive.user_id, user);
    assert.ok(archive.events.length >= EVIDENCE.length);
    const replaced = await client.importArchive(archive, { mode: "replace" });
    assert.equal(replaced.mode, "replace");
    assert.equal(replaced.events_total, archive.events.length);
    const merged = await client.importArchive(archive);
    assert.equal(merged.events_added, 0);
  });

  test("exportArchiveText and importArchive(text | bytes) keep the archive byte-exact (1.0, integers above 2^53)", async () => {
    // JSON.stringify cannot write 1.0, so the edit-save goes in as raw JSON text; the thumbs
    // on the same artifact delivers it at once (no 30 s coalescing wait).
    const common = `"user_id":${JSON.stringify(user)},"artifact_id":"exact-1","session_id":"ts-session",` +
      `"project_id":${JSON.stringify(PROJECT)},"timestamp":${JSON.stringify(new Date().toISOString())},` +
      `"artifact_meta":{"signals":[{"preference_type":"color","pattern":"pastel"}]}`;
    const body = `[{"event":"artifact_edited_and_saved",${common},"diff":{"scale":1.0,"big":9007199254740993}},` +
      `{"event":"thumbs_rated",${common},"rating":"up"}]`;
    const sent = await fetch(`${url}/api/v1/events`, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body,
    });
    assert.equal(sent.status, 200);
    const ingested = (await sent.json()) as { accepted: number };
    assert.equal(ingested.accepted, 2, JSON.stringify(ingested));

    const text = await client.exportArchiveText();
    assert.ok(text.includes('"diff":{"scale":1.0,"big":9007199254740993}'), "the export keeps the diff as sent");
    const events = (JSON.parse(text) as Archive).events.length;
    const replaced = await client.importArchive(text, { mode: "replace" });
    assert.equal(replaced.events_total, events);
    const fromBytes = await client.importArchive(new TextEncoder().encode(text), { mode: "replace" });
    assert.equal(fromBytes.events_total, events);
    const again = await client.exportArchiveText(); // the import kept the diff as it was
    assert.ok(again.includes('"diff":{"scale":1.0,"big":9007199254740993}'));
    assert.equal((await client.importArchive(again)).events_added, 0);
    // the parsed form cannot make that round trip: JSON.parse rewrites 1.0 and 2^53 + 1
    await assert.rejects(client.importArchive(await client.exportArchive(), { mode: "replace" }), (err: unknown) => {
      assert.ok(err instanceof ValidationProblem);
      assert.equal(err.field, "checksum");
      return true;
    });
  });

  test("reset needs confirm; it reports what it erased", async () => {
    await assert.rejects(client.reset({ scope: `project:${PROJECT}` }), (err: unknown) => {
      assert.ok(err instanceof ValidationProblem);
      assert.equal(err.field, "confirm");
      return true;
    });
    const before = await client.inspect({ projectId: PROJECT });
    assert.ok(before.preferences.length > 0);
    const reset = await client.reset({ confirm: true, scope: `project:${PROJECT}` });
    assert.equal(reset.scope, `project:${PROJECT}`);
    assert.ok(reset.events_removed > 0);
    assert.equal((await client.inspect({ projectId: PROJECT })).preferences.length, 0);
  });

  test("check finds a healthy log; repair needs confirm and leaves a healthy log as it is", async () => {
    const checked = await client.check();
    assert.equal(checked.user_id, user);
    assert.equal(checked.healthy, true);
    assert.ok(checked.events > 0);
    assert.deepEqual(checked.problems, []);
    await assert.rejects(client.repair({}), (err: unknown) => {
      assert.ok(err instanceof ValidationProblem);
      assert.equal(err.status, 422);
      assert.equal(err.field, "confirm");
      return true;
    });
    const repaired = await client.repair({ confirm: true });
    assert.equal(repaired.repaired, false);
    assert.equal(repaired.events_kept, checked.events);
    assert.equal(repaired.events_dropped, 0);
    assert.equal(repaired.dropped_saved_to, null);
    assert.deepEqual(repaired.problems, []);
  });

  test(
    "a damaged log: check lists the line, forget is a ServerProblem until repair drops it",
    { skip: eventsFile ? false : "set CREATIVE_MEMORY_EVENTS_FILE to damage the log" },
    async () => {
      const ingested = await client.ingestEvents([
        event("thumbs_rated", "damaged-0", "color/teal", { rating: "up" }),
        event("thumbs_rated", "damaged-1", "color/teal", { rating: "up" }),
      ]);
      assert.equal(ingested.accepted, 2, JSON.stringify(ingested.results));
      const before = await client.check();
      const lines = readFileSync(eventsFile!, "utf8").split("\n"); // ends with "\n": "" last
      const damaged = lines.length - 1; // 1-based number of the last event's line
      lines[damaged - 1] = '{"garbage"';
      writeFileSync(eventsFile!, lines.join("\n"));

      const checked = await client.check();
      assert.equal(checked.healthy, false);
      assert.equal(checked.events, before.events - 1);
      assert.deepEqual(
        checked.problems.map((p) => [p.where, p.kind]),
        [[`line ${damaged}`, "unreadable"]],
      );
      await assert.rejects(client.forget("color", "teal", { projectId: PROJECT }), (err: unknown) => {
        assert.ok(err instanceof LogDamagedProblem && err instanceof ServerProblem);
        assert.equal(err.status, 500);
        assert.ok(err.correlationId);
        assert.equal(err.type, "urn:creative-memory:problem:log-damaged");
        return true;
      });
      const repaired = await client.repair({ confirm: true });
      assert.equal(repaired.repaired, true);
      assert.equal(repaired.events_kept, before.events - 1);
      assert.equal(repaired.events_dropped, 1);
      assert.equal(repaired.dropped_saved_to, null);
      assert.deepEqual(repaired.problems, checked.problems);
      assert.equal((await client.check()).healthy, true);
      assert.equal((await client.forget("color", "teal", { projectId: PROJECT })).events_removed, 1);
    },
  );

  test("a wrong token is an AuthProblem (401)", async () => {
    const stranger = new CreativeMemoryClient({ baseUrl: url, token: "not-a-token" });
    await assert.rejects(stranger.inspect(), (err: unknown) => {
      assert.ok(err instanceof AuthProblem);
      assert.equal(err.status, 401);
      return true;
    });
  });

  test("no daemon listening is a TransportError", async () => {
    const nowhere = new CreativeMemoryClient({ baseUrl: "http://127.0.0.1:9", token });
    await assert.rejects(nowhere.health(), (err: unknown) => {
      assert.ok(err instanceof TransportError);
      assert.match(err.message, /cannot reach the daemon at http:\/\/127\.0\.0\.1:9/);
      return true;
    });
  });
});
