/**
 * The chaos soak's fault schedule: a seeded random sequence of every fault the fault matrix knows, so
 * a run that failed can be run again exactly (`npm run test:chaos -- --seed N --minutes M`).
 *
 * Pure: the same seed and length give the same schedule. Faults come one after another (the next
 * starts 8–15 s after the previous one started, and never before it healed), so a cluster never has
 * two nodes down and a group never loses both relays: compound faults come from one fault's effects
 * (a leader election, a lease handover, a redelivery) still running when the next one strikes.
 */

export type FaultKind =
  /** kill -9 of a source-region node, restarted after `durationMs`. */
  | "kill-source-node"
  /** kill -9 of a destination-region node, restarted after `durationMs`. */
  | "kill-dest-node"
  /** SIGSTOP of a source-region node (a hung consumer or stream leader) for `durationMs`. */
  | "pause-source-node"
  /** The path to one source node goes silent (no bytes, no close) for `durationMs`. */
  | "blackhole-source-node"
  /** SIGSTOP of a relay process for `durationMs` (longer than the lease: it loses ownership). */
  | "pause-relay"
  /** SIGKILL of a relay process; a replacement starts after `durationMs`. */
  | "kill-relay"
  /** SIGSTOP of the guard's Redis for `durationMs`. */
  | "pause-redis";

export const FAULT_KINDS: readonly FaultKind[] = [
  "kill-source-node",
  "kill-dest-node",
  "pause-source-node",
  "blackhole-source-node",
  "pause-relay",
  "kill-relay",
  "pause-redis",
];

export interface ScheduledFault {
  /** When it strikes, from the start of the load (ms). */
  readonly atMs: number;
  readonly kind: FaultKind;
  /** Which node, relay or proxy of its kind (an index; the soak takes it modulo what exists). */
  readonly target: number;
  /** How long until it heals (ms). */
  readonly durationMs: number;
}

/** How long each kind lasts: [min, max] ms. */
const DURATIONS: Readonly<Record<FaultKind, readonly [number, number]>> = {
  "kill-source-node": [2_000, 6_000],
  "kill-dest-node": [2_000, 6_000],
  "pause-source-node": [3_000, 8_000],
  "blackhole-source-node": [4_000, 10_000],
  "pause-relay": [4_000, 8_000],
  "kill-relay": [500, 2_000],
  "pause-redis": [1_000, 5_000],
};

const GAP_MS: readonly [number, number] = [8_000, 15_000];

/** mulberry32: small, fast, and the same numbers on every machine for a seed. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/**
 * Faults for a load of `lengthMs`: the first after 5 s, the last healed before the load ends. Every
 * kind appears at least once when the run is long enough for all of them (the first seven faults are
 * the kinds in a shuffled order; after that, kinds are drawn at random).
 */
export function chaosSchedule(seed: number, lengthMs: number): ScheduledFault[] {
  const next = random(seed);
  const between = (lo: number, hi: number) => Math.floor(lo + next() * (hi - lo + 1));
  const firstRound = [...FAULT_KINDS];
  for (let i = firstRound.length - 1; i > 0; i--) {
    const j = between(0, i);
    [firstRound[i], firstRound[j]] = [firstRound[j] as FaultKind, firstRound[i] as FaultKind];
  }
  const faults: ScheduledFault[] = [];
  let at = 5_000;
  for (;;) {
    const kind = firstRound[faults.length] ?? (FAULT_KINDS[between(0, FAULT_KINDS.length - 1)] as FaultKind);
    const [lo, hi] = DURATIONS[kind];
    const durationMs = between(lo, hi);
    if (at + durationMs > lengthMs) break;
    faults.push({ atMs: at, kind, target: between(0, 1_000), durationMs });
    at = Math.max(at + between(GAP_MS[0], GAP_MS[1]), at + durationMs + 1_000);
  }
  return faults;
}

/** One line per fault, for the test's diagnostics (a failed run says what it went through). */
export function describeSchedule(faults: readonly ScheduledFault[]): string {
  return faults.map((f) => `${(f.atMs / 1000).toFixed(1)}s ${f.kind} #${f.target} for ${(f.durationMs / 1000).toFixed(1)}s`).join("; ");
}
