/**
 * `to.order: strict` needs the link to be its destination stream's only writer (a second writer moves
 * the stream's last sequence and every publish of the link is refused). What the config alone shows is
 * refused at load: another link into the same stream, or a partitioned link (its partitions write the
 * stream at once). What only the servers show (the stream's subjects, sources, the dead-letter subject)
 * is checked at start, by `check --live` and when the stream changes (link/sole-writer.ts).
 */
import { quote } from "./problems.js";
import type { ConfigProblem } from "./problems.js";

interface RawLink {
  readonly index: number;
  readonly name: string | undefined;
  readonly region: string | undefined;
  readonly stream: string | undefined;
  readonly strict: boolean;
  readonly partitioned: boolean;
}

function rawLink(raw: unknown, index: number): RawLink | undefined {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return undefined;
  const link = raw as Record<string, unknown>;
  const to = typeof link.to === "object" && link.to !== null ? (link.to as Record<string, unknown>) : {};
  const str = (v: unknown) => (typeof v === "string" ? v : undefined);
  return {
    index,
    name: str(link.name),
    region: str(to.region),
    stream: str(to.stream),
    strict: to.order === "strict",
    partitioned: link.partitions !== undefined,
  };
}

/** Problems with `to.order: strict` that the config alone shows. Run by `crossChecks`. */
export function orderChecks(links: readonly unknown[]): ConfigProblem[] {
  const out: ConfigProblem[] = [];
  const all = links.map(rawLink).filter((l): l is RawLink => l !== undefined);
  for (const link of all) {
    if (!link.strict) continue;
    const path = ["links", link.index, "to", "order"];
    if (link.partitioned) {
      out.push({
        path,
        message:
          "strict needs the link to be its destination stream's only writer, and a partitioned link writes it from all its partitions at once: remove partitions or to.order",
      });
    }
    if (link.region === undefined || link.stream === undefined) continue;
    const others = all.filter((o) => o !== link && o.region === link.region && o.stream === link.stream);
    if (others.length > 0) {
      const named = others.map((o) => `links[${o.index}]${o.name === undefined ? "" : ` (${quote(o.name)})`}`).join(", ");
      out.push({
        path,
        message: `strict needs the link to be its destination stream's only writer, and ${named} also write${others.length === 1 ? "s" : ""} stream ${link.stream} in region ${link.region}: give each its own destination stream, or remove to.order`,
      });
    }
  }
  return out;
}
