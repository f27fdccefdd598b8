/**
 * The relayed header block written straight into bytes. Every relayed message gets one; built as a
 * string (a dozen parts) and then encoded, it cost a chain of intermediate strings, their flattening
 * and the UTF-8 encoder: about 1 KB of garbage per message and 5 % of the relay's busy time. Here a
 * link's constant parts are encoded once, and a message's own parts (its id, origin and path, copied
 * header lines, sequence and publish time) are written into one buffer of the exact size, character by
 * character. Those parts are ASCII almost always; when one is not, `write` says so and the caller
 * builds the block as text instead (the same bytes, by the UTF-8 encoder).
 */
import { RelayHeaders } from "../protocol/headers.js";
import type { NanosFormatter } from "../protocol/headers.js";

const ascii = (text: string): Uint8Array => Buffer.from(text, "utf8");

export class HeaderBytes {
  private readonly start = ascii("NATS/1.0\r\n");
  private readonly msgId = ascii(`${RelayHeaders.MsgId}: `);
  private readonly newline = ascii("\r\n");
  /** After the id of a first-hop message: its origin and path lines and the source prefix. */
  private readonly firstHop: Uint8Array;
  private readonly sourcePrefix: Uint8Array;
  private readonly sourceTime = ascii(`\r\n${RelayHeaders.SourceTime}: `);
  /** After the time's nine fraction digits: the link line, the expect line, the empty line. */
  private readonly tail: Uint8Array;

  /** The constant parts as `entryContext` builds them (see EntryContext). */
  constructor(parts: { readonly firstHopLines: string; readonly sourcePrefix: string; readonly linkLine: string; readonly expectLine: string }) {
    this.firstHop = ascii(`\r\n${parts.firstHopLines}${parts.sourcePrefix}`);
    this.sourcePrefix = ascii(parts.sourcePrefix);
    this.tail = ascii(`Z\r\n${parts.linkLine}${parts.expectLine}\r\n`);
  }

  /**
   * The block `NATS/1.0`, `copied`, the id line, `hopLines` (undefined: a first hop's constant lines),
   * the source line with `seq`, the source time (`nanos` as `time` formats it), the constant tail;
   * undefined when a part is not ASCII or `nanos` has fewer than ten digits.
   */
  write(copied: string, id: string, hopLines: string | undefined, seq: number, nanos: string, time: NanosFormatter): Uint8Array | undefined {
    if (nanos.length < 10) return undefined;
    const second = time.secondOf(nanos);
    const seqDigits = digitCount(seq);
    const hopLength = hopLines === undefined ? this.firstHop.length : this.newline.length + hopLines.length + this.sourcePrefix.length;
    const length =
      this.start.length + copied.length + this.msgId.length + id.length + hopLength + seqDigits + this.sourceTime.length + second.length + 10 + this.tail.length;
    const out = Buffer.allocUnsafe(length); // from Node's shared pool: no ArrayBuffer of its own
    let at = put(out, this.start, 0);
    at = putAscii(out, copied, 0, copied.length, at);
    at = put(out, this.msgId, at);
    at = putAscii(out, id, 0, id.length, at);
    if (hopLines === undefined) at = put(out, this.firstHop, at);
    else at = put(out, this.sourcePrefix, putAscii(out, hopLines, 0, hopLines.length, put(out, this.newline, at)));
    if (at < 0) return undefined;
    for (let i = seqDigits - 1, n = seq; i >= 0; i--, n = Math.floor(n / 10)) out[at + i] = 48 + (n % 10);
    at = put(out, this.sourceTime, at + seqDigits);
    at = putAscii(out, second, 0, second.length, at);
    if (at < 0) return undefined;
    out[at++] = 0x2e; // "."
    at = putAscii(out, nanos, nanos.length - 9, nanos.length, at);
    at = put(out, this.tail, at);
    return at === length ? out : undefined;
  }
}

/** Copies `bytes` into `out` at `at` (-1 stays -1); returns where the next part goes. */
function put(out: Buffer, bytes: Uint8Array, at: number): number {
  if (at < 0) return -1;
  out.set(bytes, at);
  return at + bytes.length;
}

/** Writes `text[from, to)` at `at` one byte a character; -1 when a character is not ASCII (or `at` was -1). */
function putAscii(out: Buffer, text: string, from: number, to: number, at: number): number {
  if (at < 0) return -1;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c > 0x7f) return -1;
    out[at++] = c;
  }
  return at;
}

/** Decimal digits of a non-negative safe integer. */
function digitCount(n: number): number {
  let digits = 1;
  for (let x = n; x >= 10; x = Math.floor(x / 10)) digits++;
  return digits;
}
