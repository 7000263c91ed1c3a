/**
 * RoutingTableSync: the most common Coordinator integration, a gateway that routes to engines itself
 * and keeps its own routing table in sync with Motor.
 *
 * - The Coordinator's `ListInstances` is the authority on what may take traffic (published
 *   endpoints, pause flags).
 * - The Controller's `WatchFaultToleranceStatus` stream says when that changes: every message
 *   triggers a (coalesced) `ListInstances`, and ranks a round is removing (`pending_removed_ranks`)
 *   or has removed (`dead_committed`) leave the table at once, before the Coordinator's DEL lands.
 * - The stream reconnects with exponential backoff and jitter when it fails or ends; the backoff
 *   resets once a message arrives. Every unary call carries a deadline (`callTimeoutMs`), and a
 *   periodic resync (`resyncIntervalMs`) re-reads both services, so a silently dead stream or a
 *   change only the Coordinator saw (a PAUSE by an operator) is picked up within one period.
 *   (No HTTP/2 PINGs by default: gRPC servers refuse frequent pings on quiet streams.)
 */
import { Code, ConnectError, createClient, type Client, type Transport } from "@connectrpc/connect";

import type { Endpoint, Role } from "./gen/motor/v1/common_pb.js";
import { Controller, FtPhase, type InstanceFtRuntime } from "./gen/motor/v1/controller_pb.js";
import { Coordinator, type ListInstancesResponse } from "./gen/motor/v1/coordinator_pb.js";

/** One endpoint the gateway may send inference to now. */
export interface RouteEndpoint {
  /** Original DP rank (the endpoint id). */
  readonly id: number;
  readonly ip: string;
  readonly businessPort: number;
  /** `http://ip:businessPort`, the engine's OpenAI-compatible API. */
  readonly url: string;
}

/** One published instance as the gateway routes to it. */
export interface InstanceRoute {
  readonly instanceId: bigint;
  readonly model: string;
  readonly role: Role;
  /** The Coordinator's pause flag; a paused instance has no routable endpoint. */
  readonly paused: boolean;
  /** Endpoint ids the Coordinator publishes. */
  readonly publishedIds: readonly number[];
  /** Routable now: published, not paused, not being removed or removed by a scale-down round. */
  readonly endpoints: readonly RouteEndpoint[];
  /** The Controller's latest runtime of the instance, when it sent one. */
  readonly runtime?: InstanceFtRuntime;
}

export interface RoutingSnapshot {
  /** Coordinator revision of the last ListInstances (0n before the first one). */
  readonly revision: bigint;
  /** Published instances by id (only those asked for, when `instanceIds` was given). */
  readonly routes: ReadonlyMap<bigint, InstanceRoute>;
  /** The Controller's latest runtime per instance id. */
  readonly runtimes: ReadonlyMap<bigint, InstanceFtRuntime>;
  /** True once both the Coordinator and the Controller answered at least once. */
  readonly synced: boolean;
  /** Increments on every change of routes or runtimes. */
  readonly version: number;
}

export interface BackoffOptions {
  /** First delay (default 100 ms). */
  initialMs?: number;
  /** Upper bound (default 5000 ms). */
  maxMs?: number;
  /** Growth per failed attempt (default 2). */
  multiplier?: number;
  /** Fraction of the delay randomly taken off, 0..1 (default 0.2). */
  jitter?: number;
}

export type SyncSource = "list" | "status" | "watch";

export interface RoutingTableSyncOptions {
  /** Transport to the Coordinator (see createMotorTransport). */
  coordinator: Transport;
  /** Transport to the Controller. */
  controller: Transport;
  /** Instances to follow; default all. */
  instanceIds?: readonly bigint[];
  /** Deadline of every unary call (default 3000 ms). */
  callTimeoutMs?: number;
  /** Period of the full re-read of both services (default 5000 ms). */
  resyncIntervalMs?: number;
  /** Reconnect backoff of the watch stream and retry backoff of ListInstances. */
  backoff?: BackoffOptions;
  /** Called on every failed call or broken stream (the helper retries by itself). */
  onError?: (error: ConnectError, source: SyncSource) => void;
}

export interface RoutingSyncStats {
  watchConnects: number;
  watchMessages: number;
  watchErrors: number;
  listCalls: number;
  listErrors: number;
  statusCalls: number;
  statusErrors: number;
  lastError?: ConnectError;
}

export interface WaitOptions {
  /** Reject with DEADLINE_EXCEEDED after this long (default 30000 ms). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Delay before retry number `attempt` (0-based): exponential, capped, with jitter taken off. */
export function backoffDelayMs(attempt: number, options: BackoffOptions = {}, random: () => number = Math.random): number {
  const { initialMs = 100, maxMs = 5000, multiplier = 2, jitter = 0.2 } = options;
  const base = Math.min(maxMs, initialMs * Math.pow(multiplier, Math.max(0, attempt)));
  return Math.max(0, Math.round(base * (1 - Math.min(1, Math.max(0, jitter)) * random())));
}

/**
 * The routing table from the Coordinator's published set and the Controller's runtimes. Endpoints
 * in a runtime's dead_committed or pending_removed_ranks are left out even while still published:
 * the Controller is removing them and the Coordinator's DEL may not have landed yet.
 */
export function buildRoutes(
  listed: ListInstancesResponse | undefined,
  runtimes: ReadonlyMap<bigint, InstanceFtRuntime>,
  instanceIds?: readonly bigint[],
): Map<bigint, InstanceRoute> {
  const routes = new Map<bigint, InstanceRoute>();
  const wanted = instanceIds && instanceIds.length > 0 ? new Set(instanceIds) : undefined;
  for (const published of listed?.instances ?? []) {
    const instance = published.instance;
    if (instance === undefined || (wanted && !wanted.has(instance.id))) continue;
    const runtime = runtimes.get(instance.id);
    const removing = new Set<number>([...(runtime?.deadCommitted ?? []), ...(runtime?.pendingRemovedRanks ?? [])]);
    const endpoints = published.paused
      ? []
      : instance.endpoints.filter((e) => !e.headless && !removing.has(e.id)).map(toRouteEndpoint);
    routes.set(instance.id, {
      instanceId: instance.id,
      model: instance.model,
      role: instance.role,
      paused: published.paused,
      publishedIds: instance.endpoints.map((e) => e.id).sort((a, b) => a - b),
      endpoints: endpoints.sort((a, b) => a.id - b.id),
      runtime,
    });
  }
  return routes;
}

function toRouteEndpoint(e: Endpoint): RouteEndpoint {
  return { id: e.id, ip: e.ip, businessPort: e.businessPort, url: `http://${e.ip}:${e.businessPort}` };
}

function digest(routes: ReadonlyMap<bigint, InstanceRoute>, runtimes: ReadonlyMap<bigint, InstanceFtRuntime>, synced: boolean): string {
  const parts: string[] = [String(synced)];
  for (const [id, r] of [...routes].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    parts.push(`r${id}:${r.model}:${r.paused}:${r.publishedIds.join(",")}:${r.endpoints.map((e) => `${e.id}@${e.url}`).join(",")}`);
  }
  for (const [id, rt] of [...runtimes].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    parts.push(
      `s${id}:${rt.phase}:${rt.generation}:${rt.requestId}:${rt.deadCommitted.join(",")}:${rt.pendingRemovedRanks.join(",")}:` +
        `${rt.aliveDpRanks.join(",")}:${rt.servingPublished}:${rt.canServe}:${rt.lastError ?? ""}`,
    );
  }
  return parts.join("|");
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/** Keeps a gateway's routing table in sync from ListInstances + WatchFaultToleranceStatus. */
export class RoutingTableSync {
  private readonly coordinator: Client<typeof Coordinator>;
  private readonly controller: Client<typeof Controller>;
  private readonly instanceIds?: readonly bigint[];
  private readonly callTimeoutMs: number;
  private readonly resyncIntervalMs: number;
  private readonly backoff: BackoffOptions;
  private readonly onError?: (error: ConnectError, source: SyncSource) => void;

  private readonly closing = new AbortController();
  private readonly listeners = new Set<(snapshot: RoutingSnapshot) => void>();
  private listed?: ListInstancesResponse;
  private readonly runtimeMap = new Map<bigint, InstanceFtRuntime>();
  private controllerAnswered = false;
  private current: RoutingSnapshot = { revision: 0n, routes: new Map(), runtimes: new Map(), synced: false, version: 0 };
  private lastDigest = "";
  private started = false;
  private watchTask?: Promise<void>;
  private watchAbort?: AbortController;
  private watchConnected = false;
  private listing?: Promise<void>;
  private listAgain = false;
  private timer?: ReturnType<typeof setInterval>;

  readonly stats: RoutingSyncStats = {
    watchConnects: 0, watchMessages: 0, watchErrors: 0, listCalls: 0, listErrors: 0, statusCalls: 0, statusErrors: 0,
  };

  constructor(options: RoutingTableSyncOptions) {
    this.coordinator = createClient(Coordinator, options.coordinator);
    this.controller = createClient(Controller, options.controller);
    this.instanceIds = options.instanceIds;
    this.callTimeoutMs = options.callTimeoutMs ?? 3000;
    this.resyncIntervalMs = options.resyncIntervalMs ?? 5000;
    this.backoff = options.backoff ?? {};
    this.onError = options.onError;
  }

  /** The routing table now. */
  get snapshot(): RoutingSnapshot {
    return this.current;
  }

  /** Routable endpoints of one instance (empty when unknown, paused or not serving). */
  endpoints(instanceId: bigint): readonly RouteEndpoint[] {
    return this.current.routes.get(instanceId)?.endpoints ?? [];
  }

  /** Routable endpoints of every instance serving `model`. */
  endpointsForModel(model: string): RouteEndpoint[] {
    return [...this.current.routes.values()].filter((r) => r.model === model).flatMap((r) => r.endpoints);
  }

  /** Calls `listener` on every change; returns the unsubscribe function. */
  subscribe(listener: (snapshot: RoutingSnapshot) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Starts syncing; resolves with the first complete snapshot (both services answered). Rejects with
   * DEADLINE_EXCEEDED (naming the last error) when that takes longer than `timeoutMs`, and stops.
   */
  async start(options: WaitOptions = {}): Promise<RoutingSnapshot> {
    if (this.started) throw new ConnectError("RoutingTableSync already started", Code.FailedPrecondition);
    this.started = true;
    this.watchTask = this.watchLoop();
    this.requestList();
    void this.refreshStatus();
    this.timer = setInterval(() => this.resync(), this.resyncIntervalMs);
    this.timer.unref?.();
    try {
      return await this.waitFor((s) => s.synced, { timeoutMs: 10_000, ...options });
    } catch (err) {
      await this.close();
      throw err;
    }
  }

  /**
   * Resolves with the first snapshot for which `predicate` holds (checked now and on every change).
   * Rejects with DEADLINE_EXCEEDED after `timeoutMs`, with the signal's reason when aborted, and with
   * CANCELED when the sync is closed.
   */
  waitFor(predicate: (snapshot: RoutingSnapshot) => boolean, options: WaitOptions = {}): Promise<RoutingSnapshot> {
    const { timeoutMs = 30_000, signal } = options;
    return new Promise((resolve, reject) => {
      if (predicate(this.current)) return resolve(this.current);
      const cleanup = (): void => {
        clearTimeout(timer);
        unsubscribe();
        signal?.removeEventListener("abort", onAbort);
        this.closing.signal.removeEventListener("abort", onClose);
      };
      const onAbort = (): void => {
        cleanup();
        reject(ConnectError.from(signal?.reason ?? new Error("aborted"), Code.Canceled));
      };
      const onClose = (): void => {
        cleanup();
        reject(new ConnectError("RoutingTableSync closed", Code.Canceled));
      };
      const timer = setTimeout(() => {
        cleanup();
        const last = this.stats.lastError ? `; last error: ${this.stats.lastError.message}` : "";
        reject(new ConnectError(`routing table condition not reached within ${timeoutMs} ms${last}`, Code.DeadlineExceeded));
      }, timeoutMs);
      const unsubscribe = this.subscribe((s) => {
        let ok = false;
        try {
          ok = predicate(s);
        } catch (err) {
          cleanup();
          reject(err);
          return;
        }
        if (ok) {
          cleanup();
          resolve(s);
        }
      });
      if (signal?.aborted) return onAbort();
      if (this.closing.signal.aborted) return onClose();
      signal?.addEventListener("abort", onAbort, { once: true });
      this.closing.signal.addEventListener("abort", onClose, { once: true });
    });
  }

  /** Stops the stream, the timer and every retry; resolves once the watch loop has ended. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.closing.abort();
    await this.watchTask;
    await this.listing;
    this.listeners.clear();
  }

  // ---- internals ------------------------------------------------------------------------------

  private report(error: unknown, source: SyncSource): void {
    if (this.closing.signal.aborted) return;
    const err = ConnectError.from(error);
    this.stats.lastError = err;
    if (source === "watch") this.stats.watchErrors++;
    else if (source === "list") this.stats.listErrors++;
    else this.stats.statusErrors++;
    this.onError?.(err, source);
  }

  private publish(): void {
    const synced = this.listed !== undefined && this.controllerAnswered;
    const routes = buildRoutes(this.listed, this.runtimeMap, this.instanceIds);
    const key = digest(routes, this.runtimeMap, synced);
    if (key === this.lastDigest) return;
    this.lastDigest = key;
    this.current = {
      revision: this.listed?.revision ?? 0n,
      routes,
      runtimes: new Map(this.runtimeMap),
      synced,
      version: this.current.version + 1,
    };
    for (const listener of [...this.listeners]) {
      try {
        listener(this.current);
      } catch {
        // a listener's failure is its own; the table keeps syncing
      }
    }
  }

  private wanted(id: bigint): boolean {
    return !this.instanceIds || this.instanceIds.length === 0 || this.instanceIds.includes(id);
  }

  private async watchLoop(): Promise<void> {
    const closing = this.closing.signal;
    let attempt = 0;
    while (!closing.aborted) {
      const abort = new AbortController();
      this.watchAbort = abort;
      try {
        const stream = this.controller.watchFaultToleranceStatus(
          { instanceIds: [...(this.instanceIds ?? [])] },
          { signal: AbortSignal.any([closing, abort.signal]) },
        );
        this.stats.watchConnects++;
        for await (const msg of stream) {
          attempt = 0;
          this.watchConnected = true;
          this.stats.watchMessages++;
          this.controllerAnswered = true;
          if (msg.runtime && this.wanted(msg.runtime.instanceId)) this.runtimeMap.set(msg.runtime.instanceId, msg.runtime);
          this.publish();
          this.requestList();
        }
        if (!closing.aborted && !abort.signal.aborted) {
          this.report(new ConnectError("watch stream ended by the server", Code.Unavailable), "watch");
        }
      } catch (err) {
        if (!abort.signal.aborted || closing.aborted) this.report(err, "watch");
      } finally {
        this.watchConnected = false;
      }
      if (closing.aborted) break;
      await sleep(backoffDelayMs(attempt++, this.backoff), closing);
    }
  }

  /** Coalesced ListInstances: at most one in flight, one more queued; retried with backoff. */
  private requestList(): void {
    if (this.closing.signal.aborted) return;
    if (this.listing) {
      this.listAgain = true;
      return;
    }
    this.listing = (async () => {
      let attempt = 0;
      do {
        this.listAgain = false;
        try {
          this.stats.listCalls++;
          this.listed = await this.coordinator.listInstances({}, { timeoutMs: this.callTimeoutMs, signal: this.closing.signal });
          attempt = 0;
          this.publish();
        } catch (err) {
          this.report(err, "list");
          this.listAgain = true;
          await sleep(backoffDelayMs(attempt++, this.backoff), this.closing.signal);
        }
      } while (this.listAgain && !this.closing.signal.aborted);
    })().finally(() => {
      this.listing = undefined;
    });
  }

  private async refreshStatus(): Promise<void> {
    try {
      this.stats.statusCalls++;
      const resp = await this.controller.getFaultToleranceStatus(
        { instanceIds: [...(this.instanceIds ?? [])] },
        { timeoutMs: this.callTimeoutMs, signal: this.closing.signal },
      );
      this.controllerAnswered = true;
      for (const rt of resp.instances) {
        if (!this.wanted(rt.instanceId)) continue;
        const known = this.runtimeMap.get(rt.instanceId);
        // The stream is the ordered source while it is up; a unary answer may be older than it.
        if (!this.watchConnected || known === undefined || rt.generation > known.generation) this.runtimeMap.set(rt.instanceId, rt);
      }
      this.publish();
    } catch (err) {
      this.report(err, "status");
      // The Controller did not answer in time: the stream is probably dead too; reconnect it.
      const code = ConnectError.from(err).code;
      if (code === Code.Unavailable || code === Code.DeadlineExceeded) this.watchAbort?.abort();
    }
  }

  private resync(): void {
    if (this.closing.signal.aborted) return;
    this.requestList();
    void this.refreshStatus();
  }
}

/** True when the runtime serves: NORMAL or SCALED_DOWN_RUNNING and published. */
export function runtimeCanServe(rt: InstanceFtRuntime | undefined): boolean {
  return rt !== undefined && rt.canServe && (rt.phase === FtPhase.NORMAL || rt.phase === FtPhase.SCALED_DOWN_RUNNING);
}
