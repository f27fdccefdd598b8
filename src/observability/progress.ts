/**
 * Progress of long work (verify, streams apply, resync) on a terminal: done/total, rate and ETA on one
 * line redrawn in place. Writes nothing when the stream is not a TTY (pipes, CI logs, `--json`), so
 * scripted output stays clean.
 */
export interface ProgressOptions {
  /** What is being done, e.g. `verify a-to-b: source`. */
  readonly label: string;
  /** The unit counted (default `msgs`). */
  readonly unit?: string;
  /** Where to draw (default process.stderr). */
  readonly stream?: ProgressStream;
  /** Least time between redraws (default 250 ms). */
  readonly intervalMs?: number;
  readonly now?: () => number;
}

/** The part of a WriteStream progress uses. */
export interface ProgressStream {
  readonly isTTY?: boolean;
  write(text: string): boolean;
}

export interface ProgressSnapshot {
  readonly done: number;
  readonly total?: number;
  readonly elapsedMs: number;
}

/** `12,000/300,000 msgs (4%), 35,000 msgs/s, ETA 8s` — or without total: `12,000 msgs, 35,000 msgs/s`. */
export function describeProgress(s: ProgressSnapshot, unit = "msgs"): string {
  const rate = s.elapsedMs > 0 ? (s.done * 1000) / s.elapsedMs : 0;
  const parts: string[] = [];
  if (s.total !== undefined && s.total > 0) {
    const pct = Math.min(100, Math.floor((s.done * 100) / s.total));
    parts.push(`${fmt(s.done)}/${fmt(s.total)} ${unit} (${pct}%)`);
  } else {
    parts.push(`${fmt(s.done)} ${unit}`);
  }
  parts.push(`${fmt(Math.round(rate))} ${unit}/s`);
  if (s.total !== undefined && s.total > s.done && rate > 0)
    parts.push(`ETA ${formatEta((s.total - s.done) / rate)}`);
  return parts.join(", ");
}

function fmt(n: number): string {
  return n.toLocaleString("en-US");
}

function formatEta(seconds: number): string {
  const s = Math.ceil(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

export class Progress {
  private readonly stream: ProgressStream;
  private readonly now: () => number;
  private readonly intervalMs: number;
  private readonly startedAt: number;
  private lastDrawAt = -Infinity;
  private drawn = false;
  private done = 0;
  private total: number | undefined;

  constructor(private readonly options: ProgressOptions) {
    this.stream = options.stream ?? process.stderr;
    this.now = options.now ?? Date.now;
    this.intervalMs = options.intervalMs ?? 250;
    this.startedAt = this.now();
  }

  /** True when this progress draws anything (the stream is a terminal). */
  get active(): boolean {
    return this.stream.isTTY === true;
  }

  /** Records how far the work is; redraws at most every `intervalMs`. */
  update(done: number, total?: number): void {
    this.done = done;
    if (total !== undefined) this.total = total;
    if (!this.active) return;
    const t = this.now();
    if (t - this.lastDrawAt < this.intervalMs) return;
    this.lastDrawAt = t;
    this.draw(t);
  }

  /** Draws the final figures and ends the line. */
  finish(): void {
    if (!this.active) return;
    this.draw(this.now());
    this.stream.write("\n");
    this.drawn = false;
  }

  private draw(t: number): void {
    const line = `${this.options.label}: ${describeProgress({ done: this.done, ...(this.total === undefined ? {} : { total: this.total }), elapsedMs: t - this.startedAt }, this.options.unit)}`;
    // \r + clear-to-end-of-line: redraw in place.
    this.stream.write(`\r${line}\x1b[K`);
    this.drawn = true;
  }
}
