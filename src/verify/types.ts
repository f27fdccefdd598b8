import type { Logger } from "pino";
import type { ProgressStream } from "../observability/progress.js";
import type { VerifyReport } from "./report.js";

/**
 * What verify.ts (connecting, reading the streams) and the verifier (classifying what was read)
 * share: the options of a verification, where the dead-letter records were found, and headers as
 * both read them. Both import this file; neither imports the other's types.
 */

export interface VerifyOptions {
  /** Only source messages stored at/after this time, and destination messages at/after it. */
  readonly since?: Date;
  /** Example ids kept per kind (default 20). */
  readonly examples?: number;
  /**
   * With `since`, destination messages up to this much earlier still count as present (not as examined):
   * the regions' clocks differ, and a copy can carry an earlier time than its source. Default 60 s.
   */
  readonly clockSlackMs?: number;
  readonly logger?: Logger;
  /** Give up connecting to a region after this long (default 15 s). */
  readonly connectTimeoutMs?: number;
  /** Passed to the stream reader: fail when a read makes no progress for this long (default 30 s). */
  readonly idleTimeoutMs?: number;
  /**
   * Where to draw a progress line per phase (dead letters, destination, source): done/total, rate, ETA.
   * Nothing is drawn unless it is a TTY; absent: no progress at all (the CLI leaves it out for `--json`).
   */
  readonly progress?: ProgressStream;
  /**
   * Told of every missing source message as the last pass finds it, in source order (the report keeps
   * only examples): `jetstream-relay repair` puts these back.
   */
  readonly onMissing?: (missing: { readonly id: string; readonly sourceSeq: number }) => void;
}

/** Where the dead-letter records of the link are read from, as verifySides found out. */
export interface DeadLetterSource {
  readonly status: VerifyReport["deadLetter"]["status"];
  readonly subject?: string;
  readonly stream?: string;
  readonly detail?: string;
}

/** Headers as verify reads them (WireHeaders or MsgHdrs). */
export type Headers = { get(key: string): string } | undefined;
