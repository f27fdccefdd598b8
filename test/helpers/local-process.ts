import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, closeSync, constants, openSync, rmSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { createServer } from "node:net";
import { delimiter, join } from "node:path";
import { once } from "node:events";
import { check } from "./check.js";

/**
 * PIDs of every live server process any local backend started. The synchronous 'exit' hook is the
 * safety net for a test file that crashes or forgets cleanup(): leaked servers would keep ports
 * and store dirs busy and confuse later runs. It only ever signals PIDs we spawned ourselves.
 */
const livePids = new Set<number>();
/** Temp dirs not yet removed by a cleanup(); the emergency path deletes them too. */
const liveDirs = new Set<string>();
let exitHookInstalled = false;

export function trackTempDir(dir: string): void {
  installExitHook();
  liveDirs.add(dir);
}
export function untrackTempDir(dir: string): void {
  liveDirs.delete(dir);
}

function killAllLive(): void {
  for (const pid of livePids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  for (const dir of liveDirs) {
    try {
      // A just-SIGKILLed server can still be mid-write; retries cover ENOTEMPTY races.
      rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      // best effort: a leftover temp dir is harmless
    }
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", killAllLive);
  // node --test stops a test file with SIGTERM (and Ctrl-C delivers SIGINT) when interrupted; by
  // default Node then dies without emitting 'exit', leaking the servers. So kill them first, then
  // re-raise the signal with its default action restored, unless someone else also handles it.
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    const onSignal = (): void => {
      killAllLive();
      if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
    };
    process.once(sig, onSignal);
  }
}

export interface ProcessSpec {
  /** Used in error messages. */
  label: string;
  command: string;
  /** Evaluated at every start so a restart can use ports learned on the first start. */
  args: () => string[];
  /** stdout+stderr are appended here, so restarts keep the earlier log. */
  logFile: string;
  /** Resolves once the server accepts work; rejects (named timeout) otherwise. */
  ready: (proc: LocalProcess, signal: AbortSignal) => Promise<void>;
}

/** One child process with stop/kill/pause/resume/restart semantics shared by NATS and Redis nodes. */
export class LocalProcess {
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private paused = false;
  /** Set once the current child has exited or failed to spawn. */
  private gone = true;

  constructor(readonly spec: ProcessSpec) {}

  get pid(): number | undefined {
    return this.running ? this.child?.pid : undefined;
  }

  get running(): boolean {
    return this.child !== undefined && !this.gone;
  }

  /** Spawns the process and waits for readiness; on failure kills it and reports the log tail. */
  async start(): Promise<void> {
    if (this.running) return;
    installExitHook();
    const fd = openSync(this.spec.logFile, "a");
    let child: ChildProcess;
    try {
      child = spawn(this.spec.command, this.spec.args(), { stdio: ["ignore", fd, fd] });
    } finally {
      closeSync(fd); // the child has its own copy of the descriptor
    }
    this.child = child;
    this.paused = false;
    this.gone = false;
    const pid = child.pid;
    if (pid !== undefined) livePids.add(pid);
    let spawnError: unknown;
    const onGone = (resolve: () => void) => {
      if (pid !== undefined) livePids.delete(pid);
      this.gone = true;
      resolve();
    };
    // 'error' without a following 'exit' is how a failed spawn (ENOENT, EACCES) shows up.
    const exited = new Promise<void>((resolve) => {
      child.once("exit", () => onGone(resolve));
      child.once("error", (err) => {
        spawnError = err;
        onGone(resolve);
      });
    });
    this.exited = exited;
    const earlyExit = exited.then(async () => {
      const how = spawnError
        ? `could not be spawned (${String(spawnError)})`
        : `exited during startup (code ${child.exitCode}, signal ${child.signalCode})`;
      throw new Error(`${this.spec.label} ${how}${await this.logTail()}`);
    });
    // Aborting stops the readiness poll once the outcome is known (early exit or success).
    const ac = new AbortController();
    try {
      await Promise.race([this.spec.ready(this, ac.signal), earlyExit]);
    } catch (err) {
      await this.kill();
      const msg = err instanceof Error ? err.message : String(err);
      if (msg.includes("--- log tail")) throw err;
      throw new Error(`${msg}${await this.logTail()}`, { cause: err });
    } finally {
      ac.abort();
      earlyExit.catch(() => undefined);
    }
  }

  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`. Idempotent. */
  async stop(graceMs = 10_000): Promise<void> {
    if (!this.running) return;
    // A stopped (SIGSTOPped) process only acts on SIGTERM once continued.
    if (this.paused) await this.resume();
    this.signal("SIGTERM");
    const timer = setTimeout(() => this.signal("SIGKILL"), graceMs);
    try {
      await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** SIGKILL (works on a paused process too) and wait for the exit. Idempotent. */
  async kill(): Promise<void> {
    if (!this.running) return;
    this.signal("SIGKILL");
    await this.exited;
    this.paused = false;
  }

  async pause(): Promise<void> {
    if (!this.running) throw new Error(`${this.spec.label}: cannot pause, not running`);
    if (this.paused) return;
    this.signal("SIGSTOP");
    this.paused = true;
    // kill(2) only queues the signal; threads of a Go server can still answer a request or two
    // until the group stop completes. Wait for it so "paused" really means "answers nothing".
    const pid = this.child?.pid;
    if (pid !== undefined && process.platform === "linux") {
      await check(() => allThreadsStopped(pid), {
        name: `${this.spec.label} stopped by SIGSTOP`,
        timeoutMs: 5_000,
      });
    }
  }

  async resume(): Promise<void> {
    if (!this.running || !this.paused) return;
    this.signal("SIGCONT");
    this.paused = false;
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  /** Last lines of the log, formatted for appending to an error message. */
  async logTail(lines = 30): Promise<string> {
    const text = await readFile(this.spec.logFile, "utf8").catch(() => "");
    const tail = text.trimEnd().split("\n").slice(-lines).join("\n");
    return `\n--- log tail (${this.spec.logFile}) ---\n${tail}`;
  }

  private signal(sig: NodeJS.Signals): void {
    try {
      this.child?.kill(sig);
    } catch {
      // exited between the running check and the signal
    }
  }
}

/** Linux: every thread of `pid` is in state T (stopped), per /proc/<pid>/task/<tid>/stat. */
async function allThreadsStopped(pid: number): Promise<boolean> {
  const tids = await readdir(`/proc/${pid}/task`);
  const states = await Promise.all(
    tids.map(async (tid) => {
      const stat = await readFile(`/proc/${pid}/task/${tid}/stat`, "utf8");
      // Format: "tid (comm) S ..."; comm may contain spaces or parens, so split after the last ")".
      return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    }),
  );
  return states.every((s) => s === "T");
}

/**
 * A port that was free a moment ago: bind a random one of 127.0.0.1:20000-31999, close. Needed where
 * every process must know a port before any of them starts (cluster routes). Never 4222/6379, which
 * belong to the machine's own servers.
 */
export async function freePort(): Promise<number> {
  // Below the kernel's ephemeral range (32768+ by default), where the outgoing connections of every
  // test and server get their local ports: a port found free there can be taken by a connection
  // before the server that was given it binds (seen: a cluster route port, "address already in use").
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const srv = createServer();
    const bound = await new Promise<boolean>((resolve) => {
      srv.once("error", () => resolve(false));
      srv.listen(port, "127.0.0.1", () => resolve(true));
    });
    if (!bound) continue;
    srv.close();
    await once(srv, "close");
    return port;
  }
}

/**
 * Full path of `bin` from PATH. Debian installs nats-server in /usr/sbin, which is not on a
 * non-root user's PATH, so the sbin dirs are tried as a fallback.
 */
export function findBinary(bin: string): string | undefined {
  // .tools/prometheus: where scripts/setup.sh unpacks Debian's prometheus package (promtool, prometheus).
  const tools = join(new URL("../..", import.meta.url).pathname, ".tools/prometheus/usr/bin");
  const dirs = [...(process.env.PATH ?? "").split(delimiter), "/usr/local/sbin", "/usr/sbin", "/sbin", tools];
  for (const dir of dirs.filter(Boolean)) {
    const full = join(dir, bin);
    try {
      accessSync(full, constants.X_OK);
      return full;
    } catch {
      // not here
    }
  }
  return undefined;
}

export function requireBinary(bin: string, pkg: string): string {
  const full = findBinary(bin);
  if (!full) {
    throw new Error(
      `${bin} not found on PATH; the real-server tests need it: run \`apt-get install -y ${pkg}\``,
    );
  }
  return full;
}
