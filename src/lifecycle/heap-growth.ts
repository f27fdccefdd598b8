/**
 * How far V8 lets the old generation grow past what its last full collection kept, by the relay's load.
 *
 * V8 sizes the old generation's next limit as the live size times a factor it picks from the ratio of
 * allocation to collection speed: up to 4 for a process that allocates steadily and collects fast. A
 * relay with a thousand idle links is that process: about 100 MB live, and the old generation grows to
 * 250-300 MB (its RSS to 400-500 MB) before the next full collection, most of it objects that lived a
 * few seconds (pull requests, lease renewals, requests in flight). At rest the relay fixes the factor at
 * 1 + REST_GROWING_PERCENT / 100 (2): RSS about 330 MB at 1,000 idle links, a full collection of ~100 MB
 * about once a minute. A busy relay (more than BUSY_MSGS_PER_SEC messages finished in the last second:
 * relayed, duplicates, dropped; counted in the metrics' `load.finished`, not summed from the Prometheus counters, which costs more)
 * gives the choice back to V8: with the factor fixed, a backlog's stream of short-lived messages made
 * ten times the full collections and cost a quarter more CPU per message (docs/benchmarks.md). Unlike
 * `--max-old-space-size` it is no ceiling either way.
 *
 * A `--heap-growing-percent` given to node (its command line; NODE_OPTIONS does not take it) is kept as
 * it is, whatever the load. Lifecycle: `start()`, `stop()`.
 */
import { setFlagsFromString } from "node:v8";

export const REST_GROWING_PERCENT = 100;
/** Relayed messages a second above which the relay counts as busy. */
export const BUSY_MSGS_PER_SEC = 1_000;
export const CHECK_EVERY_MS = 1_000;

export class HeapGrowth {
  private mode: "rest" | "busy" | undefined;
  /** Finished by the last check. */
  private lastCount: number;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    /** Messages the relay has finished so far (all links: the metrics' `load.finished`). */
    private readonly finishedSoFar: () => number,
    private readonly execArgv: readonly string[] = process.execArgv,
    private readonly setFlags: (flags: string) => void = setFlagsFromString,
  ) {
    this.lastCount = finishedSoFar();
  }

  /** The factor for a relay at rest (a starting relay is one), then checked every CHECK_EVERY_MS; false when node was given one. */
  start(): boolean {
    if (this.execArgv.some((a) => /^--heap[-_]growing[-_]percent\b/.test(a))) return false;
    this.apply("rest");
    this.timer ??= setInterval(() => this.check(), CHECK_EVERY_MS);
    this.timer.unref();
    return true;
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** The load over the last period decides the factor for the next full collections. */
  check(): void {
    const count = this.finishedSoFar();
    const rate = ((count - this.lastCount) * 1000) / CHECK_EVERY_MS;
    this.lastCount = count;
    this.apply(rate > BUSY_MSGS_PER_SEC ? "busy" : "rest");
  }

  get current(): "rest" | "busy" | undefined {
    return this.mode;
  }

  private apply(mode: "rest" | "busy"): void {
    if (mode === this.mode) return;
    this.mode = mode;
    // 0 is V8's own choice (the dynamic factor).
    this.setFlags(`--heap-growing-percent=${mode === "rest" ? REST_GROWING_PERCENT : 0}`);
  }
}
