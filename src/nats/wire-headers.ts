import type { JsMsg } from "@nats-io/jetstream";
import type { Msg, MsgHdrs } from "@nats-io/nats-core";
import type { HeaderNames } from "./header-names.js";

const decoder = new TextDecoder();
/** `\r\n<key>:` per key asked for: a handful of constant keys, built once. */
const needles = new Map<string, string>();

/** The parts of the client's message object that hold the raw header block (nats-core 3.x internals). */
interface RawMsg {
  readonly _rdata?: unknown;
  readonly _msg?: { readonly hdr?: unknown; readonly subject?: unknown };
}

/**
 * Read-only headers over the wire text of a header block, `NATS/1.0\r\nKey: value\r\n...\r\n\r\n`.
 * `get` has the client's default semantics (`MsgHdrs.get(key)`, exact key match): the first value of
 * the key, trimmed, or "" when absent. The client's own decoding validates, canonicalises and copies
 * every header into arrays in a Map, which is most of the verifier's CPU time (about 10 µs a message);
 * this is one string decode and an `indexOf` per header read.
 */
export class WireHeaders {
  constructor(private readonly text: string) {}

  get(key: string): string {
    let needle = needles.get(key);
    if (needle === undefined) needles.set(key, (needle = `\r\n${key}:`));
    const at = this.text.indexOf(needle);
    if (at < 0) return "";
    const start = at + key.length + 3;
    const end = this.text.indexOf("\r\n", start);
    return this.text.slice(start, end < 0 ? undefined : end).trim();
  }

  /**
   * The header lines, as on the wire (`Key: value\r\n` each), whose key is not one of `skip`
   * (case-insensitively): the relay copies a source message's headers this way, without decoding them.
   */
  linesExcept(skip: HeaderNames): string {
    const text = this.text;
    let out = "";
    let pos = text.indexOf("\r\n") + 2; // past the status line, NATS/1.0
    for (;;) {
      const end = text.indexOf("\r\n", pos);
      if (end <= pos) return out; // the empty line that ends the block (or a truncated block)
      const colon = text.indexOf(":", pos);
      if (colon > pos && colon < end && !skip.matches(text, pos, colon)) out += text.slice(pos, end + 2);
      pos = end + 2;
    }
  }

  /** identify() and the verifier only ever call `get`. */
  asMsgHdrs(): MsgHdrs {
    return this as unknown as MsgHdrs;
  }
}

/** The buffer the client read a message into and where its payload starts (-1: no headers). */
export interface RawParts {
  readonly data: Uint8Array;
  readonly hdr: number;
}

/**
 * The buffer the client read `m` into and where its payload starts (the header block's length, -1
 * without headers), when this client version keeps them where 3.x does.
 */
export function rawParts(m: JsMsg): RawParts | undefined {
  const raw = (m as unknown as { msg?: RawMsg }).msg;
  const hdr = raw?._msg?.hdr;
  const data = raw?._rdata;
  return typeof hdr === "number" && data instanceof Uint8Array ? { data, hdr } : undefined;
}

/**
 * A copy of `m`'s payload (see Delivery in delivery.ts for why a copy), read straight from the
 * client's buffer when it is reachable: the client's `data` getter makes a new view on every read.
 * Buffer.allocUnsafe takes payloads under 4 KiB from Node's shared pool (no ArrayBuffer of its own).
 */
export function copyPayload(m: JsMsg, raw = rawParts(m)): Uint8Array {
  if (raw) {
    const start = raw.hdr > 0 ? raw.hdr : 0;
    const out = Buffer.allocUnsafe(raw.data.length - start);
    Buffer.prototype.copy.call(raw.data, out, 0, start);
    return out;
  }
  const view = m.data;
  const out = Buffer.allocUnsafe(view.length);
  out.set(view);
  return out;
}

/** True when `headersOf` takes the fast path for `m` (a test asserts it, so a client upgrade that moves the internals is noticed). */
export function fastHeadersAvailable(m: JsMsg): boolean {
  return rawParts(m) !== undefined;
}

/** The headers of `m`: WireHeaders when the raw block is reachable, else the client's MsgHdrs. */
export function wireHeadersOf(m: JsMsg, raw = rawParts(m)): WireHeaders | MsgHdrs | undefined {
  if (!raw) return m.headers;
  if (raw.hdr <= 0) return undefined;
  // A Buffer (as the Node transport reads) decodes its range without a view of it being made first.
  return new WireHeaders(Buffer.isBuffer(raw.data) ? raw.data.toString("utf8", 0, raw.hdr) : decoder.decode(raw.data.subarray(0, raw.hdr)));
}

/** The headers of `m` for reading (`get` only). */
export function headersOf(m: JsMsg): MsgHdrs | undefined {
  const h = wireHeadersOf(m);
  return h instanceof WireHeaders ? h.asMsgHdrs() : h;
}

/**
 * The number the last token of `m`'s subject is (NaN when it is not digits), read from the client's
 * bytes when reachable: the `subject` getter decodes a new string. The publisher's replies carry their
 * publish's number there.
 */
export function lastTokenNumber(m: Msg): number {
  const raw = (m as unknown as RawMsg)._msg?.subject;
  if (!(raw instanceof Uint8Array)) {
    const subject = m.subject;
    const token = subject.slice(subject.lastIndexOf(".") + 1);
    return /^\d+$/.test(token) ? Number(token) : Number.NaN;
  }
  const start = raw.lastIndexOf(0x2e) + 1;
  if (start === raw.length) return Number.NaN;
  let n = 0;
  for (let i = start; i < raw.length; i++) {
    const c = raw[i]! - 48;
    if (c < 0 || c > 9) return Number.NaN;
    n = n * 10 + c;
  }
  return n;
}
