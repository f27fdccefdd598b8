/** Anything with node:test's `after` hook: a TestContext (`t`), a SuiteContext, or `{ after }` itself. */
export interface HasAfter {
  after(fn: () => unknown): void;
}

const stacks = new WeakMap<HasAfter, (fn: () => unknown) => void>();

/**
 * The teardown stack of `t`: one per test (or suite), shared by every helper given the same `t`, run
 * last-in first-out when it ends (node:test runs `after` hooks first-in first-out). What a test
 * started last is stopped first: a relay before the client connections and the servers it uses, as an
 * operator stops a deployment (a relay stopped after its servers waits out request timeouts instead:
 * seconds per relay). Every teardown runs even when one before it throws; the first error is rethrown.
 */
export function deferrals(t: HasAfter): (fn: () => unknown) => void {
  const known = stacks.get(t);
  if (known) return known;
  const fns: (() => unknown)[] = [];
  t.after(async () => {
    let failed: { err: unknown } | undefined;
    for (const fn of fns.splice(0).reverse()) {
      try {
        await fn();
      } catch (err) {
        failed ??= { err };
      }
    }
    if (failed) throw failed.err;
  });
  const push = (fn: () => unknown): void => void fns.push(fn);
  stacks.set(t, push);
  return push;
}
