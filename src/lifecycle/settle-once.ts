/**
 * A promise settled at most once, from whichever of several callbacks (a message, a timer, an abort)
 * gets there first: the shape of every bounded stream read. `onSettle` runs once, on the first settle.
 */
export interface SettleOnce {
  readonly finished: Promise<void>;
  /** Resolves (no argument) or rejects; later calls do nothing. */
  settle(err?: unknown): void;
  readonly done: boolean;
}

export function settleOnce(onSettle: () => void): SettleOnce {
  let done = false;
  let settleFn!: (err?: unknown) => void;
  const finished = new Promise<void>((resolve, reject) => {
    settleFn = (err?: unknown) => {
      if (done) return;
      done = true;
      onSettle();
      if (err === undefined) resolve();
      else reject(err instanceof Error ? err : new Error(String(err)));
    };
  });
  finished.catch(() => undefined); // awaited by the caller; this only keeps an early failure from going unhandled
  return {
    finished,
    settle: (err?: unknown) => settleFn(err),
    get done() {
      return done;
    },
  };
}
