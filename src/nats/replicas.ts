/**
 * Replicas of what the relay creates (the group bucket, the streams `streams apply` makes): min(3,
 * cluster size), found by asking for 3, then 2, then 1 while the server answers that it has too few
 * peers. A single server (no cluster in its INFO) gets 1 at once.
 */
import { isApiCode } from "./durable-consumer.js";

/**
 * The refusals of a create with more replicas than there are servers: "replicas > 1 not supported in
 * non-clustered mode" (10074), "insufficient resources" (10023), "no suitable peers for placement" (10005).
 */
export const TOO_MANY_REPLICAS: readonly number[] = [10074, 10023, 10005];

export function tooManyReplicas(err: unknown): boolean {
  return TOO_MANY_REPLICAS.some((code) => isApiCode(err, code));
}

/** Runs `create` with 3, 2, then 1 replicas (1 only on a single server); returns what it got. */
export async function createWithReplicas<T>(
  clustered: boolean,
  create: (replicas: number) => Promise<T>,
): Promise<{ value: T; replicas: number }> {
  const tries = clustered ? [3, 2, 1] : [1];
  let last: unknown;
  for (const replicas of tries) {
    try {
      return { value: await create(replicas), replicas };
    } catch (err) {
      if (!tooManyReplicas(err)) throw err;
      last = err;
    }
  }
  throw last;
}
