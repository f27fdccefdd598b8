// Loaded into a benched relay (`node --import`, bench/topology.ts's lag rows): stamps, in the relay's
// own process and with no code in the relay itself, when each source message reached the relay's NATS
// client, when the relay handed its copy to the client to publish, and when the destination's PubAck
// came back. It wraps two methods of the NATS client's protocol handler (one copy of it is installed):
//   processMsg  a MSG whose reply is `$JS.ACK.<...>.SRC.<consumer>.<delivered>.<sseq>...`: delivered;
//               a MSG to a reply subject of a stamped publish: its PubAck
//   publish     an HPUB whose header block holds `Relay-Source: <region> SRC <sseq>`: published
// Times are this machine's wall clock in ms (performance.timeOrigin + now(): sub-ms, same clock as the
// servers' store timestamps on one machine). On exit it writes LAG_PROBE_OUT as JSON:
// { "<sseq>": [delivered, published, pubAck] } (the first of each, redeliveries ignored).
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { ProtocolHandler } = require("@nats-io/nats-core/internal");
const STREAM = process.env.LAG_PROBE_STREAM ?? "SRC";
const OUT = process.env.LAG_PROBE_OUT;

const now = () => performance.timeOrigin + performance.now();
const decoder = new TextDecoder();
/** sseq -> [delivered, published, pubAck] */
const times = new Map();
/** reply subject of a stamped publish -> sseq */
const replies = new Map();
const ACK_PREFIX = Buffer.from("$JS.ACK.");
const INBOX_PREFIX = Buffer.from("_INBOX.");
const SOURCE_KEY = Buffer.from(`Relay-Source: `);

const startsWith = (bytes, prefix) => {
  if (!bytes || bytes.length < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (bytes[i] !== prefix[i]) return false;
  return true;
};

const entry = (seq) => {
  let t = times.get(seq);
  if (!t) times.set(seq, (t = [NaN, NaN, NaN]));
  return t;
};

const processMsg = ProtocolHandler.prototype.processMsg;
ProtocolHandler.prototype.processMsg = function (msg, data) {
  const at = now();
  if (startsWith(msg.reply, ACK_PREFIX)) {
    // $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> or the v2 form with
    // <domain>.<account hash> before the stream and a token after.
    const t = decoder.decode(msg.reply).split(".");
    const off = t.length === 9 ? 2 : 4;
    if (t[off] === STREAM) {
      const e = entry(Number(t[off + 3]));
      if (Number.isNaN(e[0])) e[0] = at;
    }
  } else if (replies.size > 0 && startsWith(msg.subject, INBOX_PREFIX)) {
    const subject = decoder.decode(msg.subject);
    const seq = replies.get(subject);
    if (seq !== undefined) {
      replies.delete(subject);
      const e = entry(seq);
      if (Number.isNaN(e[2])) e[2] = at;
    }
  }
  return processMsg.call(this, msg, data);
};

const publish = ProtocolHandler.prototype.publish;
ProtocolHandler.prototype.publish = function (subject, payload, options) {
  const at = now();
  const hdrs = options?.headers;
  if (hdrs && options.reply) {
    // The relay's header blocks keep their encoded bytes: encoding again returns them.
    const bytes = Buffer.from(hdrs.encode());
    const k = bytes.indexOf(SOURCE_KEY);
    if (k >= 0) {
      const end = bytes.indexOf(13, k);
      const [, stream, seq] = bytes.toString("latin1", k + SOURCE_KEY.length, end).split(" ");
      if (stream === STREAM) {
        const e = entry(Number(seq));
        if (Number.isNaN(e[1])) e[1] = at;
        replies.set(options.reply, Number(seq));
      }
    }
  }
  return publish.call(this, subject, payload, options);
};

process.on("exit", () => {
  if (OUT) writeFileSync(OUT, JSON.stringify(Object.fromEntries(times)));
});
