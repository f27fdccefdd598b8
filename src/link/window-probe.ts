/**
 * A larger window tried when the relay holds most of its window (window-controller.ts: "destination" or
 * "relay"). A message holds its place in the window for its whole cycle (the source's round trip, the
 * relay's work, the destination's PubAck, the cumulative ack), and a cycle that grows with the load (a
 * relay waiting for a CPU, an R3 destination's quorum, a destination across a WAN from the relay) fills
 * a window the round trip alone would leave half empty: the messages then wait at the source, and that
 * wait is the link's lag. Nothing in one observation tells that apart from a destination or a relay that
 * takes no more, so while a backlog waits and the event loop is not busy, the window is tried
 * PROBE_GROWTH larger and judged at the next observation: kept when more was completed (PROBE_GAIN) or
 * the backlog halved, else undone; an undone probe's window is the ceiling for
 * PROBE_CEILING_OBSERVATIONS while the relay keeps holding most of the window.
 *
 * Pure: no timers, no I/O; the controller feeds it its observations.
 */

/** A probe tries the window this much larger. */
export const PROBE_GROWTH = 1.5;
/** A probe is kept when it completed this much more (or the backlog halved). */
export const PROBE_GAIN = 0.1;
/** Observations an undone probe's window stays the ceiling while the relay holds most of the window. */
export const PROBE_CEILING_OBSERVATIONS = 60;

export type ProbeOutcome = "started" | "kept" | "undone";

export interface ProbeInput {
  /** The window now, and the largest allowed. */
  readonly window: number;
  readonly cap: number;
  /** Messages completed per second since the last observation (delivered − held). */
  readonly completionPerSec: number;
  /** Messages waiting at the source. */
  readonly sourcePending: number;
  /** The event loop is at its limit (a larger window would only queue more inside). */
  readonly busy: boolean;
  /** A shrink of the window is being judged: no probe meanwhile. */
  readonly shrinking: boolean;
}

export class WindowProbe {
  /** The probe under way: the window before it, and what moved then. */
  private trying: { readonly from: number; readonly completionPerSec: number; readonly sourcePending: number } | undefined;
  /** An undone probe: no probe at or above `window` for a while. */
  private ceiling: { readonly window: number; observations: number } | undefined;

  /**
   * One observation while the relay holds most of the window: the window to apply and what the probe
   * did (started, kept: the window stays, undone: back to where it was), or undefined when no probe
   * decides this observation.
   */
  step(o: ProbeInput): { window: number; outcome: ProbeOutcome } | undefined {
    const trying = this.trying;
    if (trying !== undefined) {
      this.trying = undefined;
      if (o.completionPerSec > trying.completionPerSec * (1 + PROBE_GAIN) || o.sourcePending <= trying.sourcePending / 2) return { window: o.window, outcome: "kept" };
      this.ceiling = { window: trying.from, observations: 0 };
      return { window: trying.from, outcome: "undone" };
    }
    if (this.ceiling !== undefined && ++this.ceiling.observations >= PROBE_CEILING_OBSERVATIONS) this.ceiling = undefined;
    if (o.sourcePending <= 0 || o.busy || o.shrinking || o.window >= o.cap) return undefined;
    if (this.ceiling !== undefined && o.window >= this.ceiling.window) return undefined;
    this.trying = { from: o.window, completionPerSec: o.completionPerSec, sourcePending: o.sourcePending };
    return { window: Math.min(o.cap, Math.ceil(o.window * PROBE_GROWTH)), outcome: "started" };
  }

  /** The relay holds little now, or a cap or the destination's refusals decide: a probe under way and a ceiling say nothing any more. */
  forget(): void {
    this.trying = undefined;
    this.ceiling = undefined;
  }
}
