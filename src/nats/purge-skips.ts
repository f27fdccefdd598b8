/**
 * A nats-server before 2.10.11 moves a consumer past messages its stream still holds when one subject
 * of the stream is purged (a KV purge's rollup, `Nats-Rollup: sub`, or `nats stream purge --subject`)
 * and the consumer's filter is wider than that subject (nats-server #5075): its next sequence and its
 * ack floor jump to the purged subject's first remaining message (past the stream's last one when none
 * remains), and 2.9 also forgets every delivery still waiting for its ack. The messages in between are
 * neither delivered nor redelivered. On such a server a link reads every jump back before it takes it
 * for a loss (link/skip-recovery.ts).
 */
import type { JetStreamManager, StoredMsg } from "@nats-io/jetstream";

/** Whether a server of `version` skips stored messages on a subject purge (before 2.10.11; an unreadable version is taken as fixed). */
export function skipsOnSubjectPurge(version: string | undefined): boolean {
  const m = /^v?(\d+)\.(\d+)\.(\d+)/.exec(version ?? "");
  if (!m) return false;
  const [major, minor, patch] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (major !== 2) return major < 2;
  return minor < 10 || (minor === 10 && patch < 11);
}

/**
 * The first message at or after `fromSeq` on `filter` that the stream still holds, or undefined when
 * there is none (STREAM.MSG.GET with `next_by_subj`, which 2.9 has: one round trip, whatever lies
 * deleted in between).
 */
export async function nextStored(jsm: JetStreamManager, stream: string, filter: string, fromSeq: number): Promise<StoredMsg | undefined> {
  // The client's MsgRequest type does not list `next_by_subj`; the server takes it.
  const query = { seq: fromSeq, next_by_subj: filter } as unknown as { seq: number };
  return (await jsm.streams.getMessage(stream, query)) ?? undefined;
}
