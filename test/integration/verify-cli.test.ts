import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import type { VerifyReport } from "../../src/verify/report.js";
import { publishMany } from "../helpers/streams.js";
import { RelayProcess, writeConfig } from "../helpers/relays.js";
import { linkYaml, twoRegions } from "../helpers/scenario.js";


async function cli(args: readonly string[]) {
  const p = new RelayProcess(["verify", ...args]);
  return { code: await p.exited, out: p.stdout.join(""), err: p.stderr.join("") };
}

test(
  "the CLI as a user runs it: exit 0 when the sides agree, 1 when they differ, 2 for usage errors",
  async (t) => {
    const { a, b, src, dst, nca, ncb } = await twoRegions(t);
    const config = await writeConfig(linkYaml({
      regions: { a: [a.url], b: [b.url] },
      links: [
        { name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst },
        { name: "b-to-a", from: "b", fromStream: dst, to: "a", toStream: src },
      ],
    }));
    await publishMany(nca, 20, (i) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `m-${i}` } }));
    await publishMany(ncb, 20, (i) => ({
      subject: `${src}.x`,
      headers: { "Nats-Msg-Id": `m-${i}`, "Relay-Origin": "a", "Relay-Path": "a", "Relay-Source": `a ${src} ${i + 1}` },
    }), 1);

    // Usage errors need no servers; they run while the agreeing verify does.
    const [agree, unknown, badSince, help] = await Promise.all([
      cli(["--config", config, "--link", "a-to-b"]),
      cli(["--config", config, "--link", "c-to-b"]),
      cli(["--config", config, "--link", "a-to-b", "--since", "soon"]),
      cli(["--help"]),
    ]);
    assert.equal(agree.code, 0, agree.out + agree.err);
    assert.match(agree.out, /result: AGREE/);
    assert.equal(unknown.code, 2);
    assert.match(unknown.err, /unknown link "c-to-b" \(links in the config: a-to-b, b-to-a\)/);
    assert.equal(badSince.code, 2);
    assert.match(badSince.err, /--since "soon"/);
    assert.equal(help.code, 0);
    assert.match(help.out, /jetstream-relay verify/);

    await (await jetstreamManager(ncb)).streams.deleteMessage(dst, 3);
    const differ = await cli(["--config", config, "--link", "a-to-b", "--json"]);
    assert.equal(differ.code, 1, differ.err);
    assert.deepEqual((JSON.parse(differ.out) as VerifyReport).missing.examples, [{ id: "m-2", sourceSeq: 3 }]);
  },
);
