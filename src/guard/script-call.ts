import { createHash } from "node:crypto";
import { Command } from "ioredis";

/**
 * A guard script call encoded by hand. A claim of 500 ids names about 3,000 keys (its claim keys
 * and, per id, the hash of every live bucket it could be in), and Redis wants every key a script
 * touches in KEYS. ioredis encodes each argument as its own JS string (length, concatenation, UTF-8
 * conversion), which measured at ~0.8 µs per key: more than the rest of the guard. Here the keys are
 * written straight into one buffer, as RESP bulk strings, from prefixes that are already bytes.
 *
 * The call goes through ioredis like any command (its connection handling, timeouts, Cluster
 * routing and redirections apply): a Command whose toWritable() returns the prepared frame, EVAL the
 * first time a connection runs the script and EVALSHA after (as ioredis's own scripts do).
 */

const CRLF = [13, 10] as const;
/** Room left at the start of a call's buffer for `*<n>`, EVALSHA, the SHA and numkeys (no copy). */
const HEAD_ROOM = 96;

/** Decimal digits of a non-negative integer (comparisons: keys' indexes and lengths are small). */
function digitCount(n: number): number {
  if (n < 10) return 1;
  if (n < 100) return 2;
  if (n < 1_000) return 3;
  if (n < 10_000) return 4;
  if (n < 100_000) return 5;
  if (n < 1_000_000) return 6;
  if (n < 10_000_000) return 7;
  let digits = 8;
  for (let x = Math.floor(n / 100_000_000); x >= 1; x = Math.floor(x / 10)) digits++;
  return digits;
}

/** Writes a non-negative integer's `digits` decimal digits at `pos`; returns the position after them. */
function writeDigits(buf: Buffer, pos: number, n: number, digits = digitCount(n)): number {
  let end = pos + digits;
  for (let x = n; end > pos; ) {
    const q = Math.floor(x / 10);
    buf[--end] = 48 + (x - q * 10);
    x = q;
  }
  return pos + digits;
}

/**
 * Copies a key prefix (a few dozen bytes) with TypedArray#set: three times faster per key than a
 * byte loop, which was itself faster than Buffer#copy (its argument checks); returns the end.
 */
function copyShort(from: Buffer, to: Buffer, pos: number): number {
  to.set(from, pos);
  return pos + from.length;
}

/** One script: its text and SHA-1, and the connections known to have loaded it. */
export class GuardScript {
  readonly sha: string;
  readonly evalHead: Buffer;
  readonly evalshaHead: Buffer;
  private readonly loaded = new WeakSet<object>();

  constructor(readonly lua: string) {
    this.sha = createHash("sha1").update(lua).digest("hex");
    this.evalHead = Buffer.from(`$4\r\nEVAL\r\n$${Buffer.byteLength(lua)}\r\n${lua}\r\n`);
    this.evalshaHead = Buffer.from(`$7\r\nEVALSHA\r\n$40\r\n${this.sha}\r\n`);
  }

  /** Whether to send EVAL (the script's text) on `socket`: the first time it runs there. */
  needsEval(socket: object): boolean {
    if (this.loaded.has(socket)) return false;
    this.loaded.add(socket);
    return true;
  }

  /** After NOSCRIPT (the server's script cache was flushed): EVAL again on that connection. */
  forget(socket: object): void {
    this.loaded.delete(socket);
  }
}

/**
 * Frame buffers for reuse. A claim or commit of 500 ids writes a frame of 50-150 KB: allocated fresh
 * each time, that is external memory V8 answers with full garbage collections. A buffer comes back
 * only after its call's reply arrived (the frame had been written whole before Redis could answer);
 * one whose call failed is dropped, since a timed-out command may still sit in ioredis's queue.
 */
export class FramePool {
  private readonly free: Buffer[] = [];

  constructor(private readonly keep = 4) {}

  take(size: number): Buffer {
    const i = this.free.findIndex((b) => b.length >= size);
    if (i >= 0) return this.free.splice(i, 1)[0]!;
    return Buffer.allocUnsafe(size);
  }

  give(buf: Buffer): void {
    if (this.free.length < this.keep) this.free.push(buf);
  }
}

/** Builds the arguments after the script: numkeys, the keys, then ARGV. */
export class ScriptArgs {
  private buf: Buffer;
  private pos = HEAD_ROOM;
  private keyCount = 0;
  private argCount = 0;
  private keysDone = false;
  /** One key of the call, for ioredis's Cluster routing (all keys share a hash tag). */
  sampleKey: string | undefined;

  constructor(
    sizeHint = 4096,
    private readonly pool?: FramePool,
  ) {
    const size = HEAD_ROOM + Math.max(256, sizeHint);
    this.buf = pool ? pool.take(size) : Buffer.allocUnsafe(size);
  }

  /** The call has its reply: its buffer may carry another call's frame now (this one is not used again). */
  recycle(): void {
    this.pool?.give(this.buf);
  }

  /** A key: `prefix` (bytes) followed by a decimal number. */
  keyWithIndex(prefix: Buffer, index: number): this {
    const digits = digitCount(index);
    this.header(prefix.length + digits, true);
    const buf = this.buf;
    let pos = copyShort(prefix, buf, this.pos);
    pos = writeDigits(buf, pos, index, digits);
    buf[pos++] = CRLF[0];
    buf[pos++] = CRLF[1];
    this.pos = pos;
    return this;
  }

  /** A key: `prefix` (bytes) followed by `text` (UTF-8). */
  keyWithText(prefix: Buffer, text: string): this {
    const textLen = Buffer.byteLength(text);
    this.header(prefix.length + textLen, true);
    this.pos = copyShort(prefix, this.buf, this.pos);
    this.pos += this.buf.write(text, this.pos, textLen, "utf8");
    this.crlf();
    return this;
  }

  /** A key given whole. */
  key(name: string): this {
    this.sampleKey ??= name;
    const len = Buffer.byteLength(name);
    this.header(len, true);
    this.pos += this.buf.write(name, this.pos, len, "utf8");
    this.crlf();
    return this;
  }

  /** An argument (UTF-8). */
  arg(value: string | number): this {
    const text = String(value);
    const len = Buffer.byteLength(text);
    this.header(len, false);
    this.pos += this.buf.write(text, this.pos, len, "utf8");
    this.crlf();
    return this;
  }

  /** An argument of raw bytes given as a "binary" string (one char per byte, as layout.digest). */
  binaryArg(bytes: string): this {
    this.header(bytes.length, false);
    this.pos += this.buf.write(bytes, this.pos, bytes.length, "latin1");
    this.crlf();
    return this;
  }

  get keys(): number {
    return this.keyCount;
  }

  /**
   * `*<n>` + EVAL/EVALSHA + numkeys + keys + ARGV, for one connection. EVALSHA (every call but a
   * connection's first) is written into the room left before the keys: the frame is not copied.
   */
  frame(script: GuardScript, socket: object): Buffer {
    const numkeys = String(this.keyCount);
    const lead = `*${3 + this.keyCount + this.argCount}\r\n`;
    const nk = `$${numkeys.length}\r\n${numkeys}\r\n`;
    const body = this.buf.subarray(HEAD_ROOM, this.pos);
    if (script.needsEval(socket))
      return Buffer.concat([Buffer.from(lead), script.evalHead, Buffer.from(nk), body]);
    const start = HEAD_ROOM - lead.length - script.evalshaHead.length - nk.length;
    let pos = start + this.buf.write(lead, start, "latin1");
    pos += script.evalshaHead.copy(this.buf, pos);
    this.buf.write(nk, pos, "latin1");
    return this.buf.subarray(start, this.pos);
  }

  private header(len: number, isKey: boolean): void {
    if (isKey) {
      if (this.keysDone) throw new Error("guard script: a key after an argument");
      this.keyCount++;
    } else {
      this.keysDone = true;
      this.argCount++;
    }
    this.ensure(len + 16);
    const buf = this.buf;
    let pos = this.pos;
    buf[pos++] = 36; // $
    pos = writeDigits(buf, pos, len);
    buf[pos++] = CRLF[0];
    buf[pos++] = CRLF[1];
    this.pos = pos;
  }

  private crlf(): void {
    this.buf[this.pos++] = CRLF[0];
    this.buf[this.pos++] = CRLF[1];
  }

  private ensure(extra: number): void {
    if (this.pos + extra <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + extra));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }
}

/**
 * The call as an ioredis command. `socket` remembers the connection that last wrote it, so that a
 * NOSCRIPT reply can mark that connection as not having the script.
 */
export class ScriptCommand extends Command {
  socket: object | undefined;

  constructor(
    readonly script: GuardScript,
    private readonly call: ScriptArgs,
  ) {
    super("evalsha", [], { replyEncoding: "utf8" });
  }

  override getKeys(): Array<string | Buffer> {
    return this.call.sampleKey === undefined ? [] : [this.call.sampleKey];
  }

  override toWritable(socket: object): Buffer {
    this.socket = socket;
    return this.call.frame(this.script, socket);
  }
}

/** Whether a Redis error is NOSCRIPT (the script cache no longer has the script). */
export function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith("NOSCRIPT");
}
