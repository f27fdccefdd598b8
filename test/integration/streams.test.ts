/**
 * `jetstream-relay streams plan|apply` against real nats-servers (2.9.10 here), run as the CLI.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { TestContext } from "node:test";
import { JetStreamApiCodes, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { StreamInfo } from "@nats-io/jetstream";
import { millis, nanos } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { parseConfigText } from "../../src/config/load.js";
import { isApiCode } from "../../src/nats/durable-consumer.js";
import { Progress } from "../../src/observability/progress.js";
import { runPreflight } from "../../src/preflight/preflight.js";
import { applyExitCode, applyPlan } from "../../src/streams/apply.js";
import { planStreams } from "../../src/streams/plan.js";
import { closeSessions } from "../../src/nats/region-session.js";
import { freePort } from "../helpers/local-process.js";
import { RelayProcess, writeConfig } from "../helpers/relays.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream, publishMany } from "../helpers/streams.js";
import type { NatsNode } from "../helpers/types.js";

interface Regions {
  readonly a: NatsNode;
  readonly b: NatsNode;
  readonly nca: NatsConnection;
  readonly ncb: NatsConnection;
}

async function twoServers(t: TestContext): Promise<Regions> {
  const servers = withServers(t);
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  return { a, b, nca: await connectTo(t, a.url), ncb: await connectTo(t, b.url) };
}

function yaml(r: Regions, links: string): string {
  return `regions:\n  a: { servers: ["${r.a.url}"] }\n  b: { servers: ["${r.b.url}"] }\nlinks:\n${links}`;
}

async function streams(yamlText: string, ...args: string[]) {
  const path = await writeConfig(yamlText);
  const p = new RelayProcess(["streams", ...args.map((x) => (x === "CONFIG" ? path : x))]);
  const code = await p.exited;
  return { code, out: p.stdout.join(""), err: p.stderr.join(""), path };
}

async function info(nc: NatsConnection, name: string): Promise<StreamInfo | undefined> {
  try {
    return await (await jetstreamManager(nc)).streams.info(name);
  } catch (err) {
    if (isApiCode(err, JetStreamApiCodes.StreamNotFound)) return undefined;
    throw err;
  }
}

interface JsonItem {
  kind: string;
  name: string;
  status: string;
  outcome?: string;
  changes: { field: string; rule: string; reason?: string }[];
}

function itemsOf(out: string): JsonItem[] {
  const parsed = JSON.parse(out) as { regions: { items: JsonItem[] }[] };
  return parsed.regions.flatMap((r) => r.items);
}

test("a fresh region: plan lists the creates, apply makes them, check --live is happy, a second plan has nothing to do", async (t) => {
  const r = await twoServers(t);
  await createStream(r.nca, { name: "ORDERS", subjects: ["orders.>"] });
  await createStream(r.nca, { name: "PAY", subjects: ["pay.>"] });
  const config = yaml(
    r,
    `  - { name: orders-to-b, from: { region: a, stream: ORDERS }, to: { region: b, stream: INBOX, subject: { addPrefix: "a." } }, ackWait: 90s }
  - { name: pay-to-b, from: { region: a, stream: PAY, filter: "pay.eu.>" }, to: { region: b, stream: INBOX } }
`,
  );

  const plan = await streams(config, "plan", "--config", "CONFIG");
  assert.equal(plan.code, 0, plan.out + plan.err);
  assert.match(plan.out, /region b: .*\(nats-server 2\.9\.10, single server\)/);
  assert.match(plan.out, /create {3}destination {3}INBOX {2}\(links orders-to-b, pay-to-b\)/);
  assert.match(plan.out, /subjects {10}a\.orders\.>, pay\.eu\.>/);
  assert.match(plan.out, /duplicate window {2}3m, the replay horizon of link orders-to-b/);
  assert.match(plan.out, /create {3}dead-letter {3}RELAY_DLQ/);
  assert.match(plan.out, /create {3}lease bucket {2}relay_leases/);
  assert.match(plan.out, /note {5}source {8}a\/ORDERS .*\n.*read by the relay, never changed/);
  assert.match(plan.out, /plan: 3 to create, 0 to update, 0 refused, 0 blocked, 0 failed, 0 ok/);
  assert.match(plan.out, /apply it: jetstream-relay streams apply --config \S+relay\.yaml/);
  assert.equal(await info(r.ncb, "INBOX"), undefined, "plan changes nothing");

  const apply = await streams(config, "apply", "--config", "CONFIG");
  assert.equal(apply.code, 0, apply.out + apply.err);
  assert.match(apply.out, /apply: 3 created, 0 updated, 0 refused, 0 blocked, 0 failed, 0 already in place/);
  assert.ok(!apply.err.includes("streams apply:"), "no progress line when stderr is not a terminal");
  const inbox = await info(r.ncb, "INBOX");
  assert.deepEqual(inbox?.config.subjects, ["a.orders.>", "pay.eu.>"]);
  assert.equal(inbox?.config.retention, RetentionPolicy.Limits);
  assert.equal(inbox?.config.storage, StorageType.File);
  assert.equal(millis(inbox?.config.duplicate_window ?? 0), 180_000);
  assert.deepEqual((await info(r.ncb, "RELAY_DLQ"))?.config.subjects, [
    "relay.dlq.orders-to-b",
    "relay.dlq.pay-to-b",
  ]);
  assert.ok(await info(r.ncb, "KV_relay_leases"), "the lease bucket exists");
  assert.ok(
    !(await info(r.nca, "ORDERS"))?.config.subjects?.includes("a.orders.>"),
    "the source is untouched",
  );

  const report = await runPreflight(parseConfigText(config, "relay.yaml", {}), { region: "b" });
  for (const link of report.links) {
    for (const name of [
      "destination stream",
      "destination retention",
      "duplicate window",
      "subjects bound",
      "dead-letter subject",
    ]) {
      const row = link.rows.find((x) => x.name === name);
      assert.equal(row?.level, "ok", `${link.link.name} / ${name}: ${row?.detail} ${row?.fix ?? ""}`);
    }
  }

  const again = await streams(config, "plan", "--config", "CONFIG", "--json");
  assert.equal(again.code, 0, again.out + again.err);
  const items = itemsOf(again.out);
  assert.deepEqual(
    items.filter((i) => i.kind !== "source").map((i) => [i.kind, i.name, i.status]),
    [
      ["destination", "INBOX", "ok"],
      ["dead-letter", "RELAY_DLQ", "ok"],
      ["lease bucket", "relay_leases", "ok"],
    ],
  );
  const text = await streams(config, "plan", "--config", "CONFIG");
  assert.match(text.out, /nothing to do: every stream the relay needs is in place/);
});

test("an existing destination: the missing subject is added and the window raised; its messages and other streams untouched", async (t) => {
  const r = await twoServers(t);
  await createStream(r.nca, { name: "ORDERS", subjects: ["orders.>"] });
  await createStream(r.nca, { name: "PAY", subjects: ["pay.>"] });
  await createStream(r.ncb, { name: "ORDERS", subjects: ["orders.>"], duplicateWindowMs: 10_000 });
  await createStream(r.ncb, { name: "OTHER", subjects: ["other.>"], duplicateWindowMs: 10_000 });
  await publishMany(r.ncb, 5, (i) => ({ subject: `orders.${i}` }));
  const config = yaml(
    r,
    `  - { name: orders-to-b, from: { region: a, stream: ORDERS }, to: { region: b, stream: ORDERS } }
  - { name: pay-to-b, from: { region: a, stream: PAY }, to: { region: b, stream: ORDERS } }
`,
  );
  const plan = await streams(config, "plan", "--config", "CONFIG");
  assert.equal(plan.code, 0, plan.out + plan.err);
  assert.match(plan.out, /update {3}destination {3}ORDERS/);
  assert.match(plan.out, /subjects {10}orders\.> → orders\.>, pay\.> \(\+ pay\.>\)/);
  assert.match(plan.out, /duplicate window {2}10s → 2m/);

  const apply = await streams(config, "apply", "--config", "CONFIG", "--region", "b");
  assert.equal(apply.code, 0, apply.out + apply.err);
  assert.match(apply.out, /updated {2}destination {3}ORDERS/);
  const orders = await info(r.ncb, "ORDERS");
  assert.deepEqual(orders?.config.subjects, ["orders.>", "pay.>"]);
  assert.equal(millis(orders?.config.duplicate_window ?? 0), 120_000);
  assert.equal(orders?.state.messages, 5, "no message lost");
  const other = await info(r.ncb, "OTHER");
  assert.deepEqual(other?.config.subjects, ["other.>"]);
  assert.equal(millis(other?.config.duplicate_window ?? 0), 10_000, "a stream no link uses is left alone");
});

test("narrowing: interest retention and unneeded subjects are reported, not applied without --force, and nothing is deleted", async (t) => {
  const r = await twoServers(t);
  await createStream(r.nca, { name: "ORDERS", subjects: ["orders.>"] });
  await (
    await jetstreamManager(r.ncb)
  ).streams.add({
    name: "ORDERS",
    subjects: ["orders.>", "legacy.>"],
    retention: RetentionPolicy.Interest,
    storage: StorageType.File,
    duplicate_window: nanos(120_000),
  });
  const config = yaml(
    r,
    `  - { name: orders-to-b, from: { region: a, stream: ORDERS }, to: { region: b, stream: ORDERS } }\n`,
  );

  const plan = await streams(config, "plan", "--config", "CONFIG", "--json");
  assert.equal(plan.code, 0, plan.out + plan.err);
  const orders = itemsOf(plan.out).find((i) => i.kind === "destination");
  assert.equal(orders?.status, "blocked");
  assert.deepEqual(
    orders?.changes.map((c) => [c.field, c.rule]),
    [
      ["subjects", "force"],
      ["retention", "impossible"],
    ],
  );

  const apply = await streams(config, "apply", "--config", "CONFIG");
  assert.equal(apply.code, 1, apply.out + apply.err);
  assert.match(apply.out, /blocked {2}destination {3}ORDERS/);
  assert.match(
    apply.out,
    /retention {9}interest → limits {2}\[blocked\]\n\s+nats-server 2\.9\.10 cannot change a stream's retention in place .*jetstream-relay never deletes a stream/,
  );
  assert.match(
    apply.out,
    /subjects {10}orders\.>, legacy\.> → orders\.> \(- legacy\.>\) {2}\[kept: --force to apply\]/,
  );
  let after = await info(r.ncb, "ORDERS");
  assert.equal(after?.config.retention, RetentionPolicy.Interest, "retention unchanged");
  assert.deepEqual(after?.config.subjects, ["orders.>", "legacy.>"], "no subject removed without --force");

  const forced = await streams(config, "apply", "--config", "CONFIG", "--force");
  assert.equal(forced.code, 1, "--force cannot change retention on nats-server 2.9");
  after = await info(r.ncb, "ORDERS");
  assert.ok(after, "the stream still exists");
  assert.equal(after.config.retention, RetentionPolicy.Interest);
  assert.deepEqual(after.config.subjects, ["orders.>"], "--force removes the subject no link needs");
});

test("a max age below the replay horizon: refused without --force (exit 1), raised with it (exit 0)", async (t) => {
  const r = await twoServers(t);
  await createStream(r.nca, { name: "ORDERS", subjects: ["orders.>"] });
  await createStream(r.ncb, {
    name: "ORDERS",
    subjects: ["orders.>"],
    maxAgeMs: 60_000,
    duplicateWindowMs: 60_000,
  });
  const config = yaml(
    r,
    `  - { name: orders-to-b, from: { region: a, stream: ORDERS }, to: { region: b, stream: ORDERS } }\n`,
  );

  const apply = await streams(config, "apply", "--config", "CONFIG");
  assert.equal(apply.code, 1, apply.out + apply.err);
  assert.match(apply.out, /refused {2}destination {3}ORDERS/);
  assert.match(
    apply.out,
    /max age {11}1m → 2m {2}\[needs --force\]\n\s+the duplicate window cannot exceed the max age/,
  );
  assert.match(
    apply.out,
    /refused changes are made only with --force .*: jetstream-relay streams apply --config \S+ --force/,
  );
  assert.equal(millis((await info(r.ncb, "ORDERS"))?.config.max_age ?? 0), 60_000);

  const forced = await streams(config, "apply", "--config", "CONFIG", "--force");
  assert.equal(forced.code, 0, forced.out + forced.err);
  const after = await info(r.ncb, "ORDERS");
  assert.equal(millis(after?.config.max_age ?? 0), 120_000);
  assert.equal(millis(after?.config.duplicate_window ?? 0), 120_000);
});

test("--region plans and applies one region only; an unknown region or action is a usage error (exit 2)", async (t) => {
  const r = await twoServers(t);
  await createStream(r.nca, { name: "ORDERS", subjects: ["orders.>"] });
  await createStream(r.ncb, { name: "ORDERS", subjects: ["orders.>"] });
  const config = yaml(
    r,
    `  - { name: a-to-b, from: { region: a, stream: ORDERS }, to: { region: b, stream: FROM_A, subject: { addPrefix: "a." } } }
  - { name: b-to-a, from: { region: b, stream: ORDERS }, to: { region: a, stream: FROM_B, subject: { addPrefix: "b." } } }
`,
  );
  const plan = await streams(config, "plan", "--config", "CONFIG", "--region", "a");
  assert.equal(plan.code, 0, plan.out + plan.err);
  assert.match(plan.out, /^region a: /m);
  assert.doesNotMatch(plan.out, /^region b: /m);
  assert.match(plan.out, /apply it: jetstream-relay streams apply --config \S+ --region a/);

  const apply = await streams(config, "apply", "--config", "CONFIG", "--region", "a");
  assert.equal(apply.code, 0, apply.out + apply.err);
  assert.deepEqual((await info(r.nca, "FROM_B"))?.config.subjects, ["b.orders.>"]);
  assert.equal(await info(r.ncb, "FROM_A"), undefined, "region b untouched");
  assert.equal(await info(r.ncb, "RELAY_DLQ"), undefined, "region b untouched");

  const unknown = await streams(config, "plan", "--config", "CONFIG", "--region", "zz");
  assert.equal(unknown.code, 2);
  assert.match(unknown.err, /streams: --region zz is not a region of the config \(known: a, b\)/);
  const noAction = await streams(config, "--config", "CONFIG");
  assert.equal(noAction.code, 2);
  assert.match(noAction.err, /streams: expected plan or apply/);
  const help = await streams(config, "--help");
  assert.equal(help.code, 0);
  assert.match(help.out, /usage: jetstream-relay streams plan\|apply --config FILE/);
});

test("an unreachable region: exit 1, the region named, no secret printed", async (t) => {
  const r = await twoServers(t);
  await createStream(r.ncb, { name: "ORDERS", subjects: ["orders.>"] });
  const port = await freePort();
  const config = `regions:
  a: { servers: ["nats://relay:nats-s3cret-pw@127.0.0.1:${port}"] }
  b: { servers: ["${r.b.url}"] }
links:
  - { name: b-to-a, from: { region: b, stream: ORDERS }, to: { region: a, stream: ORDERS } }
`;
  const plan = await streams(config, "plan", "--config", "CONFIG");
  assert.equal(plan.code, 1, plan.out + plan.err);
  assert.match(plan.out, new RegExp(`region a: error: region a \\(nats://127\\.0\\.0\\.1:${port}\\)`));
  const apply = await streams(config, "apply", "--config", "CONFIG", "--json");
  assert.equal(apply.code, 1);
  assert.equal((JSON.parse(apply.out) as { exitCode: number }).exitCode, 1);
  for (const x of [plan, apply])
    assert.ok(!(x.out + x.err).includes("nats-s3cret-pw"), "no password in the output");
});

test("apply draws its progress (streams done / total) on a terminal, as the command does", async (t) => {
  const r = await twoServers(t);
  await createStream(r.nca, { name: "ORDERS", subjects: ["orders.>"] });
  const config = parseConfigText(
    yaml(
      r,
      `  - { name: orders-to-b, from: { region: a, stream: ORDERS }, to: { region: b, stream: ORDERS } }\n`,
    ),
    "relay.yaml",
    {},
  );
  const writes: string[] = [];
  const progress = new Progress({
    label: "streams apply",
    unit: "streams",
    intervalMs: 0,
    stream: { isTTY: true, write: (text: string) => (writes.push(text), true) },
  });
  const { plan, sessions } = await planStreams(config, { region: "b" });
  try {
    const results = await applyPlan(plan, sessions, {
      force: false,
      onProgress: (done, total) => progress.update(done, total),
    });
    progress.finish();
    assert.equal(applyExitCode(results), 0);
  } finally {
    await closeSessions(sessions.values());
  }
  const drawn = writes.join("");
  assert.match(drawn, /streams apply: 0\/3 streams \(0%\)/);
  assert.match(drawn, /streams apply: 3\/3 streams \(100%\)/);
  assert.ok(drawn.endsWith("\n"), "finish ends the line");
});
