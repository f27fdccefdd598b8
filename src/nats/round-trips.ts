import type { NatsConnection } from "@nats-io/nats-core";
import { withDeadline } from "../lifecycle/deadline.js";

/**
 * The round trip of one connection, measured once for every link on it. Each link's window wants the
 * round trip to its source every few seconds (window-controller.ts); the links of a region share one
 * connection, so a thousand links asking for it each would send a thousand PINGs (and their PONGs) per
 * period where one answers them all. `latest` answers from a measurement younger than `maxAgeMs`, or
 * starts one PING that every caller of the moment waits for.
 */
export class RoundTripMeter {
  private last: { readonly ms: number; readonly at: number } | undefined;
  private pending: Promise<number> | undefined;

  constructor(
    private readonly nc: Pick<NatsConnection, "rtt">,
    private readonly waitMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The round trip (ms), measured within `maxAgeMs`; rejects when a PING gets no PONG within the wait (a silent path is the connection watchdog's business). */
  latest(maxAgeMs: number): Promise<number> {
    const last = this.last;
    if (last !== undefined && this.now() - last.at < maxAgeMs) return Promise.resolve(last.ms);
    this.pending ??= withDeadline(this.nc.rtt(), this.waitMs, "round trip")
      .then((ms) => {
        this.last = { ms, at: this.now() };
        return ms;
      })
      .finally(() => (this.pending = undefined));
    return this.pending;
  }
}

/** One RoundTripMeter per connection (the relay's; connections of a region are shared by its links). */
export class RoundTrips {
  private readonly meters = new WeakMap<object, RoundTripMeter>();

  constructor(private readonly waitMs: number) {}

  of(nc: Pick<NatsConnection, "rtt">): RoundTripMeter {
    let meter = this.meters.get(nc);
    if (!meter) {
      meter = new RoundTripMeter(nc, this.waitMs);
      this.meters.set(nc, meter);
    }
    return meter;
  }
}
