/**
 * `Nats-Expected-Last-Sequence` on one publish (`to.order: strict`): the server stores the message only
 * if the stream's last sequence is this one, and otherwise answers err_code 10071 ("wrong last
 * sequence: <its last sequence>", nats-server 2.9 and later; a deduplicated publish is answered as a
 * duplicate before the check). The value changes with every attempt, so it is not part of the entry's
 * header block: each publish gets the block's bytes with this line added before the empty line that
 * ends them, in one buffer.
 */
import type { MsgHdrs } from "@nats-io/nats-core";

export const EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence";

/** The longest line the header adds (a sequence has at most 20 digits), for the size limit. */
export const EXPECTED_LAST_SEQ_MAX_LINE = `${EXPECTED_LAST_SEQ}: \r\n`.length + 20;

const CRLF_LENGTH = 2;

/** Something with the wire form of a header block, `NATS/1.0\r\n...\r\n\r\n` (HeaderBlock). */
export interface EncodedHeaders {
  encode(): Uint8Array;
}

/** `headers` with `Nats-Expected-Last-Sequence: <lastSeq>` added, as the client's publish takes them. */
export function withExpectedLastSeq(headers: EncodedHeaders, lastSeq: number): MsgHdrs & EncodedHeaders {
  const block = headers.encode();
  const line = Buffer.from(`${EXPECTED_LAST_SEQ}: ${lastSeq}\r\n\r\n`, "latin1");
  const bytes = Buffer.allocUnsafe(block.length - CRLF_LENGTH + line.length);
  bytes.set(block.subarray(0, block.length - CRLF_LENGTH), 0);
  bytes.set(line, block.length - CRLF_LENGTH);
  // The client only calls encode() on the headers it publishes (see HeaderBlock.asMsgHdrs).
  return { encode: () => bytes } as unknown as MsgHdrs & EncodedHeaders;
}
