/**
 * Where a link without a record starts (README "Where a new link starts"). A link has a record when
 * its source consumer exists or the destination holds one of its `Relay-Source` markers; then that
 * record says where it goes on, whatever `startAt` says. Without one, `startAt` decides how the new
 * consumer starts: `earliest` (the first message the stream holds), `new` (the next message stored),
 * a time (the first message stored at or after it) or a source sequence.
 *
 * Within one process the first start is remembered: a consumer lost before any of the link's messages
 * reached the destination (deleted by an operator, or by the stall watch's healing) is re-created where
 * the link first started, not at a new "now" (that would skip what was published since).
 */
import type { ConsumerInfo } from "@nats-io/jetstream";
import type { LinkConfig, StartAt } from "../config/types.js";
import type { CursorStart } from "../nats/durable-consumer.js";

/** `earliest`, `new`, `time <ISO time>` or `seq <n>`, as logs and `check --live` write it. */
export function describeStartAt(startAt: StartAt): string {
  if (typeof startAt === "string") return startAt;
  return "time" in startAt ? `time ${startAt.time}` : `seq ${startAt.seq}`;
}

/** How a consumer starts for `startAt` (undefined: from the start of the stream). */
export function cursorStartOf(startAt: StartAt): CursorStart | undefined {
  if (startAt === "earliest") return undefined;
  if (startAt === "new") return "new";
  return "time" in startAt ? { time: startAt.time } : startAt.seq;
}

export interface StartChoice {
  /** How the new consumer starts: undefined from the start of the stream. */
  readonly start: CursorStart | undefined;
  /** Why there, for the log line. */
  readonly why: string;
}

export class LinkStart {
  private first: { readonly seq: number; readonly incarnation: number | undefined } | undefined;
  private told = false;

  /** True the first time only: that an existing consumer rules over `startAt` is logged once a process. */
  tellOnce(): boolean {
    const first = !this.told;
    this.told = true;
    return first;
  }

  /** Where the consumer of `link`, which has no record, starts now (`incarnation`: the source stream's). */
  choose(link: LinkConfig, incarnation: number | undefined): StartChoice {
    const startAt = link.startAt;
    const said = `startAt ${describeStartAt(startAt)}`;
    const first = this.first;
    if (startAt !== "earliest" && first) {
      if (first.incarnation === incarnation) return { start: first.seq, why: `${said}, as the link first started in this process, at source seq ${first.seq}` };
      // Everything in a stream recreated after the link first ran was stored after that.
      if (startAt === "new") return { start: undefined, why: `${said}: the source stream was recreated after the link first started, everything in it is new` };
    }
    const start = cursorStartOf(startAt);
    if (start === "new") return { start, why: `${said}: the next message stored` };
    if (typeof start === "object") return { start, why: `${said}: the first message stored at or after it` };
    return { start, why: said };
  }

  /** The consumer `choose` placed was created: its first start is remembered (the server says it: delivered + 1). */
  created(link: LinkConfig, info: ConsumerInfo, incarnation: number | undefined): void {
    if (link.startAt === "earliest" || this.first?.incarnation === incarnation) return;
    this.first = { seq: info.delivered.stream_seq + 1, incarnation };
  }
}

/** True when a consumer created at `start` sets its gap baseline at its first delivery (`new`, a time). */
export function startsAtFirstDelivery(start: CursorStart | undefined): boolean {
  return start === "new" || typeof start === "object";
}
