/**
 * Reads, from the JSON log lines of several relays, when each held each link's lease, and reports any
 * two relays whose holding intervals for one lease key intersect. A relay logs `"to":"owner"` once its
 * acquiring write is confirmed and a transition `"from":"owner"` once it has fenced itself (released,
 * lost, stopped), so a logged interval contains every moment the relay could publish for the link:
 * intervals that never meet mean no two relays published one link at the same time.
 */
export interface Overlap {
  readonly key: string;
  readonly first: { relay: number; from: number; to: number };
  readonly second: { relay: number; from: number; to: number };
}

interface LeaseLine {
  time: number;
  key: string;
  from?: string;
  to?: string;
}

export function ownershipOverlaps(relayLogs: readonly (readonly string[])[]): Overlap[] {
  const byKey = new Map<string, { relay: number; from: number; to: number }[]>();
  relayLogs.forEach((lines, relay) => {
    const open = new Map<string, number>();
    for (const line of lines) {
      if (!line.includes('"component":"lease"')) continue;
      const l = JSON.parse(line) as Partial<LeaseLine>;
      if (typeof l.key !== "string" || typeof l.time !== "number") continue;
      if (l.to === "owner") open.set(l.key, l.time);
      else if (l.from === "owner") {
        const from = open.get(l.key);
        if (from !== undefined) push(byKey, l.key, { relay, from, to: l.time });
        open.delete(l.key);
      }
    }
    for (const [key, from] of open) push(byKey, key, { relay, from, to: Number.POSITIVE_INFINITY });
  });
  const overlaps: Overlap[] = [];
  for (const [key, spans] of byKey) {
    spans.sort((x, y) => x.from - y.from);
    spans.forEach((first, i) => {
      for (const second of spans.slice(i + 1)) {
        // The same millisecond is not an overlap: the log times of a release and an acquisition that
        // follows it can coincide.
        if (second.relay !== first.relay && second.from < first.to) overlaps.push({ key, first, second });
      }
    });
  }
  return overlaps;
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
