/**
 * Putting missing source messages back into the destination, as the link would have written them
 * (identity and headers from link/identity.ts and link/entry.ts) plus `Relay-Repair: true`, through the
 * link's guard (claim → publish → commit, with the claim's repair rule: see ClaimOptions.repair) and with
 * `Nats-Msg-Id`, so broker dedup applies too. Used by `jetstream-relay repair` (verify/repair.ts) and by
 * the link's audit with `audit.repair: auto` (audit/link-audit.ts). Appending cannot restore source
 * order: the messages put back land after later ones.
 */
import type { JetStreamManager, StoredMsg } from "@nats-io/jetstream";
import { jetstreamManager } from "@nats-io/jetstream";
import { linkUnits } from "../config/partitions.js";
import type { LinkConfig } from "../config/types.js";
import { toRelayError } from "../errors.js";
import type { ClaimResult, Guard } from "../guard/types.js";
import { buildHeaders, entryContext } from "../link/entry.js";
import type { EntryContext } from "../link/entry.js";
import { identify, transformSubject } from "../link/identity.js";
import type { MessageIdentity } from "../link/identity.js";
import { storedDelivery } from "../nats/delivery.js";
import type { HeaderBlock } from "../nats/header-block.js";
import { JetStreamPublisher } from "../nats/publisher.js";
import type { PubAck } from "../nats/publisher.js";
import type { StreamSide } from "../nats/stream-reader.js";
import { RelayHeaders } from "../protocol/headers.js";

/**
 * `repaired`: stored in the destination (and committed in the guard). `stale`: the guard holds a newer
 * version of its entity: not published (it would move the entity backwards). `duplicate`: not stored,
 * the destination's duplicate window still holds the id (the message was removed within it). `in-flight`:
 * another relay holds its claim in the guard right now. `gone`: no longer in the source (retention).
 * `failed`: reading, claiming or publishing failed (`detail` says which).
 */
export type RepairOutcome = "repaired" | "stale" | "duplicate" | "in-flight" | "gone" | "failed";

export const REPAIR_OUTCOMES: readonly RepairOutcome[] = ["repaired", "stale", "duplicate", "in-flight", "gone", "failed"];

/** One missing source message: planned, then (unless a dry run) what happened to it. */
export interface RepairItem {
  readonly id: string;
  readonly sourceSeq: number;
  outcome?: RepairOutcome;
  /** Where the destination stored it (`repaired`). */
  destSeq?: number;
  entity?: string;
  version?: number;
  /** The entity's version the guard compared against, when it had one. */
  storedVersion?: number;
  detail?: string;
}

/** One missing message on its way: what the source holds and what goes to the destination. */
interface Candidate {
  readonly item: RepairItem;
  readonly identity: MessageIdentity;
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: HeaderBlock;
  token?: string | undefined;
}

/**
 * Batch by batch, in source order: fetch each message from the source, claim the batch in the guard,
 * publish what it lets through (pipelined, in order), then commit what the destination stored. Sets
 * each item's outcome; returns the error of a guard commit that failed (the messages are stored).
 */
export async function putBack(
  link: LinkConfig,
  sides: { readonly source: StreamSide; readonly dest: StreamSide },
  items: readonly RepairItem[],
  guard: Guard | undefined,
  opts: { readonly batch?: number; readonly incarnation: number | undefined },
): Promise<string | undefined> {
  const jsm = await managerOf(sides.source);
  const incarnation = opts.incarnation;
  const contexts = new Map<string, EntryContext>();
  const units = link.partitions ? linkUnits(link) : [link];
  const contextOf = (subject: string): EntryContext => {
    // A partitioned link writes its partition's name into Relay-Link, as the partition's own link does.
    const token = link.partitions ? Number(subject.split(".")[link.partitions.token - 1]) : 0;
    const unit = units[token] ?? link;
    let ctx = contexts.get(unit.name);
    // Nats-TTL is not copied: a destination without allow_msg_ttl would refuse the message (10166).
    if (!ctx) contexts.set(unit.name, (ctx = entryContext(unit, { keepTtl: false })));
    return ctx;
  };
  const publisher = new JetStreamPublisher(sides.dest.nc, link.publishTimeoutMs);
  const size = opts.batch ?? Math.min(256, link.batchSize);
  let commitError: string | undefined;
  try {
    for (let i = 0; i < items.length; i += size) {
      const batch = items.slice(i, i + size);
      const fetched = await Promise.all(
        batch.map((item) => fetchCandidate(jsm, link, item, incarnation, contextOf)),
      );
      const candidates = fetched.filter((c): c is Candidate => c !== undefined);
      let claimed: Candidate[];
      try {
        claimed = guard ? await claim(guard, candidates) : candidates;
      } catch (err) {
        // Nothing of this batch was published; the rest is not tried (the guard is needed for it).
        const detail = `guard claim failed: ${toRelayError(err).message}`;
        for (const item of items.slice(i)) item.outcome ??= fail(item, detail);
        break;
      }
      const stored = await publishInOrder(publisher, link, claimed);
      if (guard) {
        const notStored = claimed.filter((c) => c.item.outcome !== "repaired" && c.token !== undefined);
        await guard.release(notStored.map(claimedOf)).catch(() => undefined); // else they expire
        try {
          await guard.commit(stored.map(claimedOf));
        } catch (err) {
          commitError ??= toRelayError(err).message;
        }
      }
    }
  } finally {
    publisher.close();
  }
  return commitError;
}

function fail(item: RepairItem, detail: string): RepairOutcome {
  item.detail = detail;
  return (item.outcome = "failed");
}

function managerOf(side: StreamSide): Promise<JetStreamManager> {
  return jetstreamManager(
    side.nc,
    side.domain ? { domain: side.domain, checkAPI: false } : { checkAPI: false },
  );
}

/**
 * The source message of `item`, with the identity, subject and headers the link gives it, and
 * `Relay-Repair: true`. Undefined (with the item's outcome set) when it is gone or no longer missing.
 */
async function fetchCandidate(
  jsm: JetStreamManager,
  link: LinkConfig,
  item: RepairItem,
  incarnation: number | undefined,
  contextOf: (subject: string) => EntryContext,
): Promise<Candidate | undefined> {
  let sm: StoredMsg | null;
  try {
    sm = await jsm.streams.getMessage(link.from.stream, { seq: item.sourceSeq });
  } catch (err) {
    fail(item, `reading source seq ${item.sourceSeq}: ${toRelayError(err).message}`);
    return undefined;
  }
  if (!sm) {
    item.outcome = "gone";
    return undefined;
  }
  const delivery = storedDelivery(sm);
  const r = identify({ subject: sm.subject, headers: sm.header, streamSequence: sm.seq }, link, incarnation);
  if (!r.ok) {
    fail(item, `bad under the current config: ${r.reason}`);
    return undefined;
  }
  if (r.identity.id !== item.id) {
    fail(item, `source seq ${item.sourceSeq} now has id ${r.identity.id}`);
    return undefined;
  }
  const { entity, version } = r.identity;
  if (entity !== undefined) item.entity = entity;
  if (version !== undefined) item.version = version;
  const headers = buildHeaders(delivery, r.identity, contextOf(sm.subject));
  headers.set(RelayHeaders.Repair, "true");
  return { item, identity: r.identity, subject: transformSubject(sm.subject, link), data: sm.data, headers };
}

/** One claim call for the batch, repair rule on; returns what the guard lets through, in order. */
async function claim(guard: Guard, candidates: readonly Candidate[]): Promise<Candidate[]> {
  if (candidates.length === 0) return [];
  const results = await guard.claim(
    candidates.map((c) => c.identity),
    undefined,
    { repair: true },
  );
  const through: Candidate[] = [];
  candidates.forEach((c, i) => {
    const r: ClaimResult = results[i] ?? { decision: "in-flight" };
    if (r.storedVersion !== undefined) c.item.storedVersion = r.storedVersion;
    switch (r.decision) {
      case "relay":
        c.token = r.token;
        through.push(c);
        return;
      case "stale":
        c.item.outcome = "stale";
        return;
      case "duplicate":
        c.item.outcome = "duplicate";
        c.item.detail = "the guard holds it as applied";
        return;
      case "in-flight":
        c.item.outcome = "in-flight";
        return;
    }
  });
  return through;
}

/**
 * Publishes the candidates in order on one connection (JetStream stores them in that order) and waits
 * for every PubAck. Returns those the destination stored.
 */
async function publishInOrder(
  publisher: JetStreamPublisher,
  link: LinkConfig,
  candidates: readonly Candidate[],
): Promise<Candidate[]> {
  const acks = await Promise.all(
    candidates.map(
      (c) =>
        new Promise<{ err: string | undefined; ack: PubAck | null }>((resolve) => {
          publisher.publish(c.subject, c.data, c.headers.asMsgHdrs(), (err, ack) =>
            resolve({ err: err?.message, ack }),
          );
        }),
    ),
  );
  const stored: Candidate[] = [];
  candidates.forEach((c, i) => {
    const { err, ack } = acks[i] ?? { err: "no PubAck", ack: null };
    if (!ack) {
      fail(c.item, `publish failed: ${err ?? "no PubAck"}`);
    } else if (ack.stream !== link.to.stream) {
      fail(c.item, `stored by stream ${ack.stream} (seq ${ack.seq}), not by the link's ${link.to.stream}`);
    } else if (ack.duplicate) {
      c.item.outcome = "duplicate";
      c.item.detail = `the destination's duplicate window still holds the id (as seq ${ack.seq})`;
    } else {
      c.item.outcome = "repaired";
      c.item.destSeq = ack.seq;
      stored.push(c);
    }
  });
  return stored;
}

function claimedOf(c: Candidate) {
  const { id, entity, version } = c.identity;
  return {
    id,
    token: c.token ?? "",
    ...(entity !== undefined ? { entity } : {}),
    ...(version !== undefined ? { version } : {}),
  };
}
