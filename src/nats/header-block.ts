import type { MsgHdrs } from "@nats-io/nats-core";

const encoder = new TextEncoder();

/**
 * An outgoing NATS header block built as text and encoded once. The client's MsgHdrs validates and
 * canonicalises every key on every set; on the relay's hot path the keys are our own constants and the
 * values were already valid headers at the source, so that work (and its garbage) is skipped.
 * Values are still refused if they contain CR or LF, which would corrupt the protocol.
 */
export class HeaderBlock {
  private readonly pairs: [string, string][] = [];
  private bytes: Uint8Array | undefined;

  append(key: string, value: string): this {
    if (value.includes("\r") || value.includes("\n")) throw new TypeError(`header ${key}: value contains CR or LF`);
    this.pairs.push([key, value]);
    this.bytes = undefined;
    return this;
  }

  /** Replaces every value of `key` (case-insensitive) with one. */
  set(key: string, value: string): this {
    this.delete(key);
    return this.append(key, value);
  }

  get(key: string): string | undefined {
    const lower = key.toLowerCase();
    return this.pairs.find(([k]) => k.toLowerCase() === lower)?.[1];
  }

  delete(key: string): void {
    const lower = key.toLowerCase();
    for (let i = this.pairs.length - 1; i >= 0; i--) if (this.pairs[i]?.[0].toLowerCase() === lower) this.pairs.splice(i, 1);
    this.bytes = undefined;
  }

  /** The wire form, `NATS/1.0\r\nKey: value\r\n...\r\n`, cached until the block changes. */
  encode(): Uint8Array {
    if (!this.bytes) {
      let text = "NATS/1.0\r\n";
      for (const [k, v] of this.pairs) text += `${k}: ${v}\r\n`;
      this.bytes = encoder.encode(`${text}\r\n`);
    }
    return this.bytes;
  }

  /** What `NatsConnection.publish` takes: it only ever calls `encode()` on it. */
  asMsgHdrs(): MsgHdrs {
    return this as unknown as MsgHdrs;
  }
}
