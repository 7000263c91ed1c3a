/**
 * The live cluster the tests run against: spawns test/cluster_fixture.py (the Python launcher) in
 * its own process group, waits for its ready file, talks to its stdin control channel, and always
 * tears it down: stdin EOF first (the fixture stops every process it started), then SIGTERM, then
 * SIGKILL of the group, each bounded. A process exit hook signals the group if the runner dies first.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync, mkdirSync, openSync, readFileSync, closeSync } from "node:fs";
import { once } from "node:events";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** clients/typescript (this file runs from dist/test/). */
export const PACKAGE_ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
export const REPO_ROOT = resolve(PACKAGE_ROOT, "../..");

export interface ClusterInfo {
  controller: string;
  coordinator: string;
  controller_http: string;
  coordinator_http: string;
  management_key: string;
  instance_id: number;
  dp_size: number;
  run_dir: string;
  pid: number;
  started_in_sec: number;
}

export interface CommandAnswer {
  ok: boolean;
  cmd?: string;
  error?: string;
  [key: string]: unknown;
}

function stamp(): string {
  const d = new Date();
  const p = (n: number): string => String(n).padStart(2, "0");
  return `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
}

function tail(path: string, lines = 40): string {
  try {
    return readFileSync(path, "utf8").split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

export class ClusterFixture {
  private readonly answers: CommandAnswer[] = [];
  private readonly waiters: ((a: CommandAnswer) => void)[] = [];
  private exited = false;
  private readonly exitHook = (): void => this.signalGroup("SIGTERM");

  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    readonly info: ClusterInfo,
    readonly logPath: string,
  ) {
    createInterface({ input: child.stdout }).on("line", (line) => {
      let answer: CommandAnswer;
      try {
        answer = JSON.parse(line) as CommandAnswer;
      } catch {
        return; // not an answer (the fixture only writes answers to stdout)
      }
      const waiter = this.waiters.shift();
      if (waiter) waiter(answer);
      else this.answers.push(answer);
    });
    process.once("exit", this.exitHook);
  }

  /** Starts the cluster; rejects (after tearing it down) when it is not serving within `timeoutMs`. */
  static async start(options: { timeoutMs?: number } = {}): Promise<ClusterFixture> {
    const timeoutMs = options.timeoutMs ?? 120_000;
    const runDir = process.env.MOTOR_TS_RUN_DIR ?? join(REPO_ROOT, "runs", `ts-client-${stamp()}-${process.pid}`);
    mkdirSync(runDir, { recursive: true });
    const readyFile = join(runDir, "fixture.ready.json");
    const logPath = join(runDir, "fixture.log");
    const python = process.env.MOTOR_PYTHON ?? join(REPO_ROOT, ".venv", "bin", "python");
    const logFd = openSync(logPath, "a");
    const child = spawn(
      python,
      [join(PACKAGE_ROOT, "test", "cluster_fixture.py"), "--ready-file", readyFile, "--run-dir", runDir,
        "--max-lifetime-sec", String(Math.ceil(timeoutMs / 1000) + 300), "--start-timeout-sec", String(Math.ceil(timeoutMs / 1000))],
      { detached: true, stdio: ["pipe", "pipe", logFd], cwd: REPO_ROOT },
    ) as unknown as ChildProcessWithoutNullStreams;
    closeSync(logFd);
    let exitCode: number | null = null;
    child.once("exit", (code, signal) => {
      exitCode = code ?? (signal ? 128 : 1);
    });
    const deadline = Date.now() + timeoutMs;
    let info: ClusterInfo | undefined;
    while (info === undefined) {
      if (exitCode !== null) throw new Error(`cluster fixture exited (${exitCode}) before it was ready; log tail:\n${tail(logPath)}`);
      if (Date.now() > deadline) {
        const fixture = new ClusterFixture(child, {} as ClusterInfo, logPath);
        await fixture.stop();
        throw new Error(`cluster not serving within ${timeoutMs} ms; log tail:\n${tail(logPath)}`);
      }
      if (existsSync(readyFile)) info = JSON.parse(readFileSync(readyFile, "utf8")) as ClusterInfo;
      else await new Promise((r) => setTimeout(r, 100));
    }
    return new ClusterFixture(child, info, logPath);
  }

  /** One control command ("inject-dead 1", "ping"); resolves with the fixture's JSON answer. */
  async command(line: string, timeoutMs = 15_000): Promise<CommandAnswer> {
    const queued = this.answers.shift();
    if (queued) return queued;
    const answer = new Promise<CommandAnswer>((resolveAnswer, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to ${JSON.stringify(line)} within ${timeoutMs} ms`)), timeoutMs);
      this.waiters.push((a) => {
        clearTimeout(timer);
        resolveAnswer(a);
      });
    });
    this.child.stdin.write(line + "\n");
    return answer;
  }

  private signalGroup(signal: NodeJS.Signals): void {
    if (this.exited || this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, signal);
    } catch {
      // already gone
    }
  }

  private async waitExit(ms: number): Promise<boolean> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return true;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<false>((r) => (timer = setTimeout(() => r(false), ms)));
    try {
      return await Promise.race([once(this.child, "exit").then(() => true), expired]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Tears the cluster down; bounded (at most ~50 s even when the fixture does not cooperate). */
  async stop(): Promise<void> {
    if (this.exited) return;
    this.child.stdin.end();
    if (!(await this.waitExit(30_000))) {
      this.signalGroup("SIGTERM");
      if (!(await this.waitExit(15_000))) {
        this.signalGroup("SIGKILL");
        await this.waitExit(5_000);
      }
    }
    this.exited = true;
    process.removeListener("exit", this.exitHook);
  }
}
