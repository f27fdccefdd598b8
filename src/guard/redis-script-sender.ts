import { Cluster } from "ioredis";
import type { Logger } from "pino";
import { ErrorCodes, RelayError } from "../errors.js";
import { DIRECTORY_REPLY, FENCED_REPLY } from "./lua.js";
import type { GuardRedisClient } from "./redis-connection.js";
import { FramePool, ScriptCommand, isNoScript } from "./script-call.js";
import type { GuardScript, ScriptArgs } from "./script-call.js";

/**
 * How the layout client's calls reach Redis: a command on the guard's client (GUARD_UNAVAILABLE
 * naming host:port when it fails), a script (EVAL, then EVALSHA), and with `waitReplicas` a commit
 * followed by `WAIT` on the same connection, which counts only when enough replicas acknowledged it.
 */

export interface ScriptSenderOptions {
  readonly waitReplicas: number;
  readonly waitTimeoutMs: number;
  /** "redis host:port" of a single Redis, for messages. */
  readonly target: string;
  readonly log: Logger;
  readonly client: () => GuardRedisClient | undefined;
  /** Turns a failure into GUARD_UNAVAILABLE naming host:port only (RelayErrors pass through). */
  readonly unavailable: (op: string, err: unknown) => RelayError;
}

export class ScriptSender {
  /** Buffers for the calls' ScriptArgs (recycled once a call is answered). */
  readonly frames = new FramePool();
  private replicationShort = false;

  constructor(private readonly o: ScriptSenderOptions) {}

  async call<T>(op: string, fn: (c: GuardRedisClient) => Promise<T>): Promise<T> {
    const client = this.o.client();
    if (!client) throw new RelayError(ErrorCodes.GUARD_UNAVAILABLE, `${this.o.target}: ${op} before start()`);
    try {
      return await fn(client);
    } catch (err) {
      throw this.o.unavailable(op, err);
    }
  }

  /**
   * Runs a script (EVAL on a connection's first use, then EVALSHA; EVAL again after NOSCRIPT).
   * `wait`: in one pipeline with `WAIT <waitReplicas> <waitTimeout>` on the same connection.
   */
  async send(op: string, script: GuardScript, args: ScriptArgs, wait: boolean): Promise<unknown> {
    return this.call(op, async (client) => {
      for (let attempt = 0; ; attempt++) {
        const cmd = new ScriptCommand(script, args);
        try {
          let reply: unknown;
          if (!wait) {
            void client.sendCommand(cmd);
            reply = await cmd.promise;
          } else {
            reply = await this.sendAndWait(client, cmd);
          }
          args.recycle();
          return reply;
        } catch (err) {
          if (attempt === 0 && isNoScript(err) && cmd.socket) {
            script.forget(cmd.socket);
            continue;
          }
          throw err;
        }
      }
    });
  }

  private async sendAndWait(client: GuardRedisClient, cmd: ScriptCommand): Promise<unknown> {
    // A Pipeline has sendCommand (ioredis types only its chainable commands).
    const pipeline = client.pipeline() as ReturnType<GuardRedisClient["pipeline"]> & {
      sendCommand(command: ScriptCommand): unknown;
    };
    pipeline.sendCommand(cmd);
    pipeline.call("WAIT", String(this.o.waitReplicas), String(this.o.waitTimeoutMs));
    const [scriptReply, waitReply] = (await pipeline.exec()) ?? [];
    if (!scriptReply || !waitReply) throw new Error("no reply to the commit pipeline");
    if (scriptReply[0]) throw scriptReply[0];
    const reply = scriptReply[1];
    // Fenced or a stale directory: nothing was written, nothing to wait for.
    if (Array.isArray(reply) && (reply[0] === FENCED_REPLY || reply[0] === DIRECTORY_REPLY)) return reply;
    if (waitReply[0]) throw waitReply[0];
    const acked = Number(waitReply[1]);
    const required = this.o.waitReplicas;
    const node = this.nodeOf(client, cmd);
    if (acked < required) {
      const text = `${required} replica${required === 1 ? "" : "s"} required, ${acked} acknowledged within ${this.o.waitTimeoutMs} ms`;
      if (!this.replicationShort) {
        this.replicationShort = true;
        this.o.log.warn(
          { node, required, acknowledged: acked },
          `guard commit not replicated (${text}): the link pauses and retries`,
        );
      }
      throw new RelayError(
        ErrorCodes.GUARD_UNAVAILABLE,
        `redis ${node}: guard commit not replicated: ${text} (guard.redis.waitReplicas)`,
      );
    }
    if (this.replicationShort) {
      this.replicationShort = false;
      this.o.log.info({ node, required, acknowledged: acked }, "guard commits are replicated again");
    }
    return reply;
  }

  /** host:port of the node that ran `cmd`. */
  private nodeOf(client: GuardRedisClient, cmd: ScriptCommand): string {
    if (client instanceof Cluster) return client.slots[cmd.getSlot()]?.[0] ?? "?";
    const stream = client.stream as { remoteAddress?: string; remotePort?: number } | undefined;
    if (stream?.remoteAddress && stream.remotePort) {
      const host = stream.remoteAddress.includes(":") ? `[${stream.remoteAddress}]` : stream.remoteAddress;
      return `${host}:${stream.remotePort}`;
    }
    return this.o.target.replace(/^redis /, "");
  }
}
