/**
 * An operator's pause of a link, kept in the region's group bucket beside the leases, so every member
 * of the group (and one that restarts) honours it: one key per link unit, `_control.<lease key>`, whose
 * value says whether the unit is paused, why, by whom and when (`jetstream-relay link pause|resume`).
 * A missing or deleted key is a unit nobody paused.
 *
 * `LinkControls` follows the keys for a relay: a watch for changes as they happen, and a read of every
 * key at start and every `refreshMs` (a watch that ended quietly is started again). Each key's highest
 * revision wins, whichever of the two saw it first.
 *
 * A revision only compares with revisions of the same bucket: a bucket deleted and created again (its
 * incarnation, the stream's creation time, changes) counts from 1 again. Every read of all keys reads
 * the incarnation first; a new one forgets the revisions of the old bucket (the new bucket's values
 * replace them whatever their revisions) and starts the watch again on the new bucket. A watch entry is
 * taken as one of the incarnation last read: one of a bucket re-created since, below a revision of the
 * old one, waits for the next read (at most `refreshMs`).
 */
import { KvWatchInclude } from "@nats-io/kv";
import type { KV, KvEntry } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { toRelayError } from "../errors.js";
import { Backoff, sleep } from "../lifecycle/backoff.js";
import { withDeadline } from "../lifecycle/deadline.js";
import { stopOnAbort } from "../lifecycle/stop-on-abort.js";
import { bucketIncarnation, isBucketGone, listKeys, openGroupBucket } from "./bucket.js";

/** Control keys live under this prefix in the group bucket, beside the leases and the members. */
export const CONTROL_PREFIX = "_control";

/** What an operator said about a link unit. */
export interface LinkControlValue {
  readonly paused: boolean;
  readonly reason: string;
  /** Who: `user@host`, or the `--by` flag. */
  readonly by: string;
  /** When (ISO 8601). */
  readonly at: string;
}

/** The control key of a link unit, from its lease key (config/lease-key.ts). */
export function controlKey(leaseKey: string): string {
  return `${CONTROL_PREFIX}.${leaseKey}`;
}

/** A stored value, or undefined when it is not one (a key someone wrote by hand: ignored, and said so). */
export function parseControlValue(text: string): LinkControlValue | undefined {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null) return undefined;
  const o = v as Record<string, unknown>;
  if (typeof o["paused"] !== "boolean") return undefined;
  const text_ = (x: unknown) => (typeof x === "string" ? x : "");
  return { paused: o["paused"], reason: text_(o["reason"]), by: text_(o["by"]), at: text_(o["at"]) };
}

export function formatControlValue(value: LinkControlValue): string {
  return JSON.stringify({ paused: value.paused, reason: value.reason, by: value.by, at: value.at });
}

/** How a pause reads in a state reason, a log line and the CLI. */
export function describePause(value: LinkControlValue): string {
  return `paused by ${value.by || "?"} at ${value.at || "?"}${value.reason ? `: ${value.reason}` : ""}`;
}

/** Writes a unit's control key (the CLI). */
export async function writeControl(kv: KV, leaseKey: string, value: LinkControlValue): Promise<number> {
  return kv.put(controlKey(leaseKey), formatControlValue(value));
}

/** Reads a unit's control key: undefined when nobody ever paused it (or the key was deleted). */
export async function readControl(kv: KV, leaseKey: string): Promise<LinkControlValue | undefined> {
  const e = await kv.get(controlKey(leaseKey));
  if (!e || e.operation !== "PUT") return undefined;
  return parseControlValue(e.string());
}

export interface LinkControlsOptions {
  readonly bucket: string;
  readonly logger: Logger;
  /** How often every key is read again (ms), besides the watch. */
  readonly refreshMs: number;
}

type Listener = (value: LinkControlValue | undefined) => void;

/** The control keys as one relay follows them; links subscribe by lease key (`follow`). */
export class LinkControls {
  /** key → the highest revision seen (of the bucket `incarnation`) and its value (undefined: deleted, or not a control value). */
  private readonly values = new Map<string, { revision: number; value: LinkControlValue | undefined }>();
  /** The bucket's incarnation (creation time, ms) the revisions in `values` belong to. */
  private incarnation: number | undefined;
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly abort = new AbortController();
  private read = false;
  private kv: KV | undefined;
  private watching = false;
  private stopWatch: (() => void) | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly opts: LinkControlsOptions) {}

  /** Every key has been read once: a unit's value is known (until then its link pulls nothing). */
  get known(): boolean {
    return this.read;
  }

  /**
   * `cb` runs with the unit's value once every key has been read (at once when it has been), then on
   * every change. Returns the function that stops following it.
   */
  follow(leaseKey: string, cb: Listener): () => void {
    const key = controlKey(leaseKey);
    let set = this.listeners.get(key);
    if (!set) this.listeners.set(key, (set = new Set()));
    set.add(cb);
    if (this.read) cb(this.values.get(key)?.value);
    return () => set.delete(cb);
  }

  start(nc: NatsConnection, domain: string | undefined): void {
    this.running ??= this.loop(nc, domain).catch((err: unknown) => this.opts.logger.error({ err: toRelayError(err).message }, "link control loop failed"));
  }

  async stop(): Promise<void> {
    this.abort.abort();
    this.stopWatch?.();
    await this.running;
  }

  private async loop(nc: NatsConnection, domain: string | undefined): Promise<void> {
    const signal = this.abort.signal;
    const { refreshMs, bucket, logger } = this.opts;
    const backoff = new Backoff(Math.min(100, refreshMs), refreshMs);
    let troubled = false;
    while (!signal.aborted) {
      try {
        this.kv ??= await openGroupBucket({ nc, domain, bucket, timeoutMs: Math.max(refreshMs, 1_000) });
        this.watch(this.kv);
        await withDeadline(this.readAll(this.kv), Math.max(refreshMs, 5_000), `group bucket ${bucket}: reading the link control keys`, signal);
        if (troubled) logger.info("link control keys readable again");
        troubled = false;
        backoff.reset();
        await sleep(refreshMs, signal);
      } catch (err) {
        if (signal.aborted) break;
        if (!troubled) logger.warn({ err: toRelayError(err).message }, "cannot read the link control keys (operator pauses): links keep what they last knew");
        troubled = true;
        if (isBucketGone(err)) {
          this.kv = undefined;
          this.stopWatch?.();
        }
        await sleep(backoff.next(), signal);
      }
    }
  }

  private async readAll(kv: KV): Promise<void> {
    const incarnation = await bucketIncarnation(kv);
    const keys = await listKeys(kv, `${CONTROL_PREFIX}.>`);
    const entries = (await Promise.all(keys.map((k) => kv.get(k)))).filter((e): e is KvEntry => e !== null);
    if (this.abort.signal.aborted) return;
    // Read from another bucket than the one before: re-created, its revisions count from 1 again.
    const recreated = this.incarnation !== undefined && incarnation !== this.incarnation;
    if (recreated) {
      const was = new Date(this.incarnation ?? 0).toISOString();
      this.opts.logger.warn({ was, now: new Date(incarnation).toISOString() }, "the group bucket was re-created: its link control keys count, whatever their revisions");
      this.stopWatch?.(); // the watch followed the old bucket's sequences: a new one starts next round
    }
    this.incarnation = incarnation;
    const present = new Set<string>();
    for (const e of entries) {
      present.add(e.key);
      this.apply(e, recreated);
    }
    // A key purged since (no delete marker left), or absent from a new bucket: nobody pauses that unit any more.
    for (const [key, known] of this.values) {
      if (present.has(key)) continue;
      if (known.value !== undefined) this.set(key, recreated ? 0 : known.revision, undefined);
      else if (recreated) this.values.set(key, { revision: 0, value: undefined });
    }
    if (!this.read) {
      this.read = true;
      for (const [key, set] of this.listeners) for (const cb of set) cb(this.values.get(key)?.value);
    }
  }

  /** Changes as they happen; the periodic read stays the fallback. */
  private watch(kv: KV): void {
    if (this.watching || this.abort.signal.aborted) return;
    this.watching = true;
    (async () => {
      const iter = await kv.watch({ key: `${CONTROL_PREFIX}.>`, include: KvWatchInclude.UpdatesOnly });
      const detach = stopOnAbort(iter, this.abort.signal);
      this.stopWatch = () => iter.stop();
      try {
        for await (const e of iter) this.apply(e);
      } finally {
        detach();
      }
    })()
      .catch((err: unknown) => this.opts.logger.debug({ err: toRelayError(err).message }, "link control watch ended"))
      .finally(() => {
        this.watching = false;
        this.stopWatch = undefined;
      });
  }

  /** An entry of the bucket last read; `replaces`: of a new incarnation, it replaces what is known whatever its revision. */
  private apply(e: KvEntry, replaces = false): void {
    const known = this.values.get(e.key);
    if (known && known.revision >= e.revision && !replaces) return;
    let value: LinkControlValue | undefined;
    if (e.operation === "PUT") {
      value = parseControlValue(e.string());
      if (!value) this.opts.logger.warn({ key: e.key, revision: e.revision }, "ignoring a link control key that holds no control value (expected JSON {paused, reason, by, at})");
    }
    this.set(e.key, e.revision, value);
  }

  private set(key: string, revision: number, value: LinkControlValue | undefined): void {
    this.values.set(key, { revision, value });
    if (!this.read) return; // the first full read tells every listener at once
    for (const cb of this.listeners.get(key) ?? []) cb(value);
  }
}
