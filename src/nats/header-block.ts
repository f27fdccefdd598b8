import type { MsgHdrs } from "@nats-io/nats-core";

const STATUS_LINE = "NATS/1.0\r\n";
const decoder = new TextDecoder();

/**
 * An outgoing NATS header block kept as wire text and encoded once. The client's MsgHdrs validates and
 * canonicalises every key on every set and keeps arrays per key; on the relay's hot path the keys are
 * our own constants and the values were already valid headers at the source, so that work (and its
 * garbage) is skipped. Values are still refused if they contain CR or LF, which would corrupt the
 * protocol. `set`/`delete` re-scan the text: they are for the rare dead-letter path only.
 *
 * Once encoded, the block keeps its bytes only: an entry holds its headers from intake to the source
 * ack, thousands of them at a time, and the text (a string of a dozen parts) would be held beside the
 * bytes for nothing on the hot path. What reads or edits the text again decodes it from the bytes.
 */
export class HeaderBlock {
  /** The status line and header lines; undefined while only `bytes` is kept. */
  private text: string | undefined;
  private bytes: Uint8Array | undefined;

  /**
   * `lines`: header lines already in wire form (`Key: value\r\n` each), trusted as they are: the
   * relay's own hot path builds them from values that were header values at the source or are its
   * own (see `append` for anything else).
   */
  constructor(lines = "") {
    this.text = `${STATUS_LINE}${lines}`;
  }

  /**
   * A block already in wire form, ending with the empty line (`NATS/1.0\r\nKey: value\r\n...\r\n`),
   * as the relay's own writer builds it (link/header-bytes.ts): kept as these bytes.
   */
  static fromWire(bytes: Uint8Array): HeaderBlock {
    const block = new HeaderBlock();
    block.bytes = bytes;
    block.text = undefined;
    return block;
  }

  append(key: string, value: string): this {
    if (value.includes("\r") || value.includes("\n")) throw new TypeError(`header ${key}: value contains CR or LF`);
    this.text = `${this.wireText()}${key}: ${value}\r\n`;
    this.bytes = undefined;
    return this;
  }

  /**
   * Appends header lines already in wire form (`Key: value\r\n` each), as read from another block:
   * the source's own header block, whose lines the server accepted.
   */
  appendLines(lines: string): this {
    if (lines === "") return this;
    this.text = `${this.wireText()}${lines}`;
    this.bytes = undefined;
    return this;
  }

  /** The header lines after the status line, in wire form (`Key: value\r\n` each). */
  get lines(): string {
    return this.wireText().slice(STATUS_LINE.length);
  }

  /** Replaces every value of `key` (case-insensitive) with one. */
  set(key: string, value: string): this {
    this.delete(key);
    return this.append(key, value);
  }

  get(key: string): string | undefined {
    return this.parsed().find((l) => l.key === key.toLowerCase())?.value;
  }

  delete(key: string): void {
    const lower = key.toLowerCase();
    this.text = `${STATUS_LINE}${this.parsed()
      .filter((l) => l.key !== lower)
      .map((l) => `${l.raw}\r\n`)
      .join("")}`;
    this.bytes = undefined;
  }

  /** The wire form, `NATS/1.0\r\nKey: value\r\n...\r\n`, cached until the block changes. */
  encode(): Uint8Array {
    if (this.bytes === undefined) {
      // Buffer.from takes small buffers from Node's shared pool: no ArrayBuffer per message.
      this.bytes = Buffer.from(`${this.wireText()}\r\n`, "utf8");
      this.text = undefined;
    }
    return this.bytes;
  }

  /** What `NatsConnection.publish` takes: it only ever calls `encode()` on it. */
  asMsgHdrs(): MsgHdrs {
    return this as unknown as MsgHdrs;
  }

  /** The status line and the header lines (decoded from the bytes when only they are kept). */
  private wireText(): string {
    // The bytes end with the empty line that closes the block; the text does not.
    this.text ??= decoder.decode(this.bytes ?? new Uint8Array(0)).slice(0, -2);
    return this.text;
  }

  private parsed(): { key: string; value: string; raw: string }[] {
    return this.wireText()
      .split("\r\n")
      .slice(1)
      .filter((l) => l !== "")
      .map((raw) => {
        const i = raw.indexOf(":");
        return { key: raw.slice(0, i).trim().toLowerCase(), value: raw.slice(i + 1).trim(), raw };
      });
  }
}
