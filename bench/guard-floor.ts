/**
 * The floor under the guard's Redis cost per id, for bench:guard: the Redis commands the current
 * layout cannot do without, run by scripts that do nothing else. A new id must be looked for in both
 * live buckets (two HEXISTS) and, once published, written into the current one (one HSET); the
 * protocol puts the publish between the two, so they are two script calls per batch (claim, then
 * commit). Keys and digests are passed as the guard passes them (one key per item and bucket, the
 * 16-byte digests packed in one argument), hashes hold as many ids as a steady bucket's (BUCKET_TARGET),
 * and the previous bucket is full. No fence, no writers' hash, no directory check, no versions, no
 * replies to build, no expiry (the guard's buckets expire as a whole: one PEXPIREAT per new hash, and
 * Redis frees each bucket in the background): what the guard adds to these commands is everything it
 * costs beyond this floor.
 * It also runs the two scripts merged into one call per batch: not a guard (nothing can be published
 * between looking and writing), only the lowest cost this layout's commands could reach at all.
 */
import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { BUCKET_TARGET } from "../src/guard/layout.js";
import { cpuSeconds, redisCommandStats, scriptInnerCommands } from "./common.js";

const CLAIM = `local d = ARGV[1]
local n = #KEYS / 2
local codes = {}
for i = 1, n do
  local f = string.sub(d, 16 * i - 15, 16 * i)
  if redis.call('HEXISTS', KEYS[i], f) == 1 or redis.call('HEXISTS', KEYS[n + i], f) == 1 then codes[i] = 'd' else codes[i] = 'r' end
end
return table.concat(codes)`;

const COMMIT = `local d = ARGV[1]
for i = 1, #KEYS do redis.call('HSET', KEYS[i], string.sub(d, 16 * i - 15, 16 * i), '1') end
return #KEYS`;

const MERGED = `local d = ARGV[1]
local n = #KEYS / 2
local codes = {}
for i = 1, n do
  local f = string.sub(d, 16 * i - 15, 16 * i)
  if redis.call('HEXISTS', KEYS[i], f) == 1 or redis.call('HEXISTS', KEYS[n + i], f) == 1 then codes[i] = 'd' else
    redis.call('HSET', KEYS[i], f, '1')
    codes[i] = 'r'
  end
end
return table.concat(codes)`;

export interface FloorResult {
  readonly name: string;
  readonly redisUsPerId: number;
  /** Per command the scripts ran: calls per id × µs per call (INFO commandstats). */
  readonly commands: string[];
  /** The scripts' own work per id: their usec less that of the commands they ran. */
  readonly scriptUsPerId: number;
}

/** One batch: its digests, and each item's key in the current and the previous bucket. */
function batch(size: number, fanout: number, prefix: string): { digests: Buffer; current: string[]; previous: string[] } {
  const digests = randomBytes(16 * size);
  const current: string[] = [];
  const previous: string[] = [];
  for (let i = 0; i < size; i++) {
    const h = digests.readUInt32BE(16 * i) % fanout;
    current.push(`${prefix}c:${h}`);
    previous.push(`${prefix}p:${h}`);
  }
  return { digests, current, previous };
}

/**
 * Runs `count` new ids through the floor scripts in batches of `batchSize`, `inFlight` batches at a
 * time (as bench:guard drives the guard), after filling the previous bucket with as many; Redis's CPU
 * per id from its /proc entry.
 */
export async function guardFloor(admin: Redis, redisPid: number | undefined, count: number, batchSize: number, inFlight: number): Promise<FloorResult[]> {
  const fanout = Math.max(1, Math.ceil(count / BUCKET_TARGET));
  const load = (lua: string) => admin.script("LOAD", lua) as Promise<string>;
  const [claimSha, commitSha, mergedSha] = [await load(CLAIM), await load(COMMIT), await load(MERGED)];
  const results: FloorResult[] = [];
  for (const [name, merged] of [
    ["claim + commit (2 calls per batch)", false],
    ["merged (1 call per batch, not a guard)", true],
  ] as const) {
    await admin.flushall();
    const prefix = `relay:{bench:floor}:i:`;
    const run = async (measured: boolean) => {
      let done = 0;
      const worker = async () => {
        while (done < count) {
          const size = Math.min(batchSize, count - done);
          done += size;
          const { digests, current, previous } = batch(size, fanout, prefix);
          if (!measured) {
            // The previous bucket, full: its ids written under the names the claims read.
            await admin.evalsha(commitSha, size, ...previous, digests);
          } else if (merged) {
            await admin.evalsha(mergedSha, 2 * size, ...current, ...previous, digests);
          } else {
            const codes = (await admin.evalsha(claimSha, 2 * size, ...current, ...previous, digests)) as string;
            if (codes.includes("d")) throw new Error("the floor's claim found a new id in a bucket: a digest collided");
            await admin.evalsha(commitSha, size, ...current, digests);
          }
        }
      };
      await Promise.all(Array.from({ length: inFlight }, worker));
    };
    await run(false);
    await admin.config("RESETSTAT");
    const cpu0 = cpuSeconds(redisPid);
    await run(true);
    const cpu = cpuSeconds(redisPid) - cpu0;
    const stats = await redisCommandStats(admin);
    const inner = scriptInnerCommands(stats);
    const innerUsec = inner.reduce((sum, [, c]) => sum + c.usec, 0);
    results.push({
      name,
      redisUsPerId: (cpu * 1e6) / count,
      commands: inner.filter(([, c]) => c.calls / count >= 0.01).map(([cmd, c]) => `${cmd} ${(c.calls / count).toFixed(2)} × ${(c.usec / c.calls).toFixed(2)} µs`),
      scriptUsPerId: ((stats.get("evalsha")?.usec ?? 0) - innerUsec) / count,
    });
  }
  await admin.flushall();
  return results;
}
