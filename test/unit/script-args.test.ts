import { test } from "node:test";
import assert from "node:assert/strict";
import { GuardScript, ScriptArgs } from "../../src/guard/script-call.js";

/** Reads a RESP array of bulk strings (what ScriptArgs frames are) into its elements, as latin1 text. */
function parseFrame(frame: Buffer): string[] {
  const text = frame.toString("latin1");
  let pos = 0;
  const line = (): string => {
    const end = text.indexOf("\r\n", pos);
    assert.ok(end >= 0, `a line ends at or after ${pos}`);
    const l = text.slice(pos, end);
    pos = end + 2;
    return l;
  };
  const head = line();
  assert.match(head, /^\*\d+$/);
  const out: string[] = [];
  for (let i = 0; i < Number(head.slice(1)); i++) {
    const h = line();
    assert.match(h, /^\$\d+$/, `element ${i} is a bulk string`);
    const len = Number(h.slice(1));
    out.push(text.slice(pos, pos + len));
    assert.equal(text.slice(pos + len, pos + len + 2), "\r\n", `element ${i} ends with CRLF after ${len} bytes`);
    pos += len + 2;
  }
  assert.equal(pos, text.length, "nothing after the last element");
  return out;
}

test("ScriptArgs writes keys with every digit count, text keys, arguments and binary arguments as RESP; EVAL first, EVALSHA after", () => {
  const script = new GuardScript("return 1");
  const indexes = [0, 9, 10, 99, 100, 4_095, 65_535, 999_999, 1_000_000, 9_999_999, 10_000_000, 123_456_789, 4_294_967_295];
  const prefix = Buffer.from("relay:{s}:i:k1:");
  // A small size hint: the buffer must grow on the way.
  const build = () => {
    const a = new ScriptArgs(16);
    a.key("relay:{s}:meta");
    for (const i of indexes) a.keyWithIndex(prefix, i);
    a.keyWithText(Buffer.from("relay:{s}:id:"), "id-é-1");
    a.arg(42).arg("").arg("c:tok").binaryArg("\u0000\u00ff\r\n");
    return a;
  };
  const keys = ["relay:{s}:meta", ...indexes.map((i) => `relay:{s}:i:k1:${i}`), Buffer.from("relay:{s}:id:id-é-1").toString("latin1")];
  const argv = ["42", "", "c:tok", "\u0000\u00ff\r\n"];
  const socket = {};
  const first = parseFrame(build().frame(script, socket));
  assert.deepEqual(first, ["EVAL", "return 1", String(keys.length), ...keys, ...argv]);
  const again = parseFrame(build().frame(script, socket));
  assert.deepEqual(again, ["EVALSHA", script.sha, String(keys.length), ...keys, ...argv]);
});
