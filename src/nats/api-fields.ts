/**
 * JetStream API requests carry only the fields the connected server knows. The client library adds
 * fields of newer servers to every request whatever the server (`action` and `pedantic` on each
 * consumer create, 2.10 and 2.11), and a server ignores a field it does not know: nothing says the
 * request meant more than it did. So on a connection to a server older than 2.10 every API request is
 * trimmed to nats-server 2.9's own fields (the json tags of v2.9.10's request structs, server/consumer.go,
 * stream.go, jetstream_api.go and jetstream_cluster.go), and what was removed is logged at debug. The
 * version is read per request from the server the connection is on now (a reconnect may land on
 * another). Servers from 2.10 on get the requests as the client wrote them; 2.12+ refuses fields it
 * does not know, and the client sends none newer than the server it talks to.
 */
import type { NatsConnection, RequestOptions } from "@nats-io/nats-core";
import type { Logger } from "pino";

/** A request body's shape: `true` for a field kept as it is, a nested shape for an object (or a list of objects). */
export interface Shape {
  readonly [field: string]: true | Shape;
}

const EXTERNAL: Shape = { api: true, deliver: true };
const SOURCE: Shape = { name: true, opt_start_seq: true, opt_start_time: true, filter_subject: true, external: EXTERNAL };

/** ConsumerConfig of nats-server v2.9.10 (server/consumer.go). */
export const CONSUMER_CONFIG_2_9: Shape = fields(
  "durable_name name description deliver_policy opt_start_seq opt_start_time ack_policy ack_wait max_deliver backoff filter_subject replay_policy rate_limit_bps sample_freq max_waiting max_ack_pending idle_heartbeat flow_control headers_only max_batch max_expires max_bytes deliver_subject deliver_group inactive_threshold num_replicas mem_storage direct",
);

/** StreamConfig of nats-server v2.9.10 (server/stream.go; Placement in jetstream_cluster.go). */
export const STREAM_CONFIG_2_9: Shape = {
  ...fields(
    "name description subjects retention max_consumers max_msgs max_bytes max_age max_msgs_per_subject max_msg_size discard storage num_replicas no_ack template_owner duplicate_window allow_direct mirror_direct discard_new_per_subject sealed deny_delete deny_purge allow_rollup_hdrs",
  ),
  placement: { cluster: true, tags: true },
  mirror: SOURCE,
  sources: SOURCE,
  republish: { src: true, dest: true, headers_only: true },
};

const MSG_GET: Shape = fields("seq last_by_subj next_by_subj");
const PAGED: Shape = fields("offset");

/**
 * The request bodies of nats-server v2.9.10 by API subject (after `$JS.API.` or `$JS.<domain>.API.`),
 * longest prefix first. A subject not listed is passed as it is (the API test records every request
 * the relay sends and fails on one it does not know).
 */
export const REQUESTS_2_9: readonly (readonly [string, Shape])[] = [
  ["CONSUMER.DURABLE.CREATE.", { stream_name: true, config: CONSUMER_CONFIG_2_9 }],
  ["CONSUMER.CREATE.", { stream_name: true, config: CONSUMER_CONFIG_2_9 }],
  ["CONSUMER.MSG.NEXT.", fields("expires batch max_bytes no_wait idle_heartbeat")],
  ["CONSUMER.LIST.", PAGED],
  ["CONSUMER.NAMES.", PAGED],
  ["STREAM.CREATE.", STREAM_CONFIG_2_9],
  ["STREAM.UPDATE.", STREAM_CONFIG_2_9],
  ["STREAM.INFO.", fields("deleted_details subjects_filter offset")],
  ["STREAM.MSG.GET.", MSG_GET],
  ["STREAM.MSG.DELETE.", fields("seq no_erase")],
  ["STREAM.PURGE.", fields("seq filter keep")],
  ["STREAM.NAMES", fields("subject offset")],
  ["STREAM.LIST", fields("subject offset")],
  ["DIRECT.GET.", MSG_GET],
];

function fields(names: string): Shape {
  const out: Record<string, true> = {};
  for (const n of names.split(" ")) out[n] = true;
  return out;
}

/** `[major, minor]` of a server version such as `2.9.10` or `2.11.0-RC.1`; undefined when unreadable. */
export function majorMinor(version: string | undefined): readonly [number, number] | undefined {
  const m = /^v?(\d+)\.(\d+)/.exec(version ?? "");
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

/** Whether `version` is at least `major.minor` (an unreadable version is taken as new: nothing is trimmed). */
export function atLeast(version: string | undefined, major: number, minor: number): boolean {
  const v = majorMinor(version);
  return v === undefined || v[0] > major || (v[0] === major && v[1] >= minor);
}

/** The shape of the request on `subject` for a 2.9 server, or undefined (not a JetStream API request, or one not listed). */
export function shapeOf(subject: string): Shape | undefined {
  if (!subject.startsWith("$JS.")) return undefined;
  const at = subject.indexOf(".API.");
  if (at < 0) return undefined;
  const api = subject.slice(at + 5);
  for (const [prefix, shape] of REQUESTS_2_9) if (api.startsWith(prefix)) return shape;
  return undefined;
}

/** A copy of `body` with only the fields `shape` lists (recursively); `removed` collects the dotted paths dropped. */
export function trimmed(body: unknown, shape: Shape, removed: string[], path = ""): unknown {
  if (Array.isArray(body)) return body.map((item) => trimmed(item, shape, removed, path));
  if (body === null || typeof body !== "object") return body;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body)) {
    const rule = shape[key];
    if (rule === undefined) {
      removed.push(`${path}${key}`);
      continue;
    }
    out[key] = rule === true ? value : trimmed(value, rule, removed, `${path}${key}.`);
  }
  return out;
}

/**
 * The request body to send on `subject` to a server of `version`: `data` itself unless the server is
 * older than 2.10 and the body has fields 2.9 does not know (then the trimmed JSON, and what was dropped).
 */
export function requestFor(subject: string, data: Uint8Array | undefined, version: string | undefined): { data: Uint8Array | undefined; removed: string[] } {
  const removed: string[] = [];
  if (data === undefined || data.length === 0 || atLeast(version, 2, 10)) return { data, removed };
  const shape = shapeOf(subject);
  if (shape === undefined) return { data, removed };
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.length).toString("utf8"));
  } catch {
    return { data, removed }; // not JSON: the server says what it makes of it
  }
  const out = trimmed(body, shape, removed);
  return removed.length === 0 ? { data, removed } : { data: Buffer.from(JSON.stringify(out), "utf8"), removed };
}

/**
 * Makes `nc`'s requests to a server older than 2.10 carry only 2.9's fields (see the module comment).
 * Every JetStream API call of the client goes through `request`; the pull requests (`MSG.NEXT`) are
 * published and carry only 2.9 fields already (the API test checks them).
 */
export function limitApiFields(nc: NatsConnection, logger: Logger): void {
  const request = nc.request.bind(nc);
  nc.request = (subject: string, payload?: Uint8Array | string, opts?: RequestOptions) => {
    if (payload === undefined || typeof payload === "string" || !subject.startsWith("$JS.")) return request(subject, payload, opts);
    const version = nc.info?.version;
    const { data, removed } = requestFor(subject, payload, version);
    if (removed.length > 0) logger.debug({ subject, server: version, removed }, "API request trimmed to the fields this nats-server knows");
    return request(subject, data, opts);
  };
}
