/**
 * The generated client against a live local cluster (controller, coordinator with a management key,
 * NodeManagers on 127.0.0.2/.3, four reference engines of instance 1): every Coordinator RPC, the
 * Controller's GetFaultToleranceStatus / WatchFaultToleranceStatus / GetTimeline, errors, deadlines,
 * RoutingTableSync (resync, reconnect through a cut connection), one DP scale-down round watched from
 * TypeScript, and the README example. Waits are on events with deadlines, never fixed sleeps.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";

import { clone } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import {
  createControllerClient,
  createCoordinatorClient,
  createMotorTransport,
  FtPhase,
  InstanceSchema,
  managementKeyHeaders,
  nextRevision,
  RefreshEvent,
  RoutingTableSync,
  TimelineEventKind,
  type ControllerClient,
  type CoordinatorClient,
  type Instance,
  type InstanceFtRuntime,
  type RoutingSnapshot,
} from "../src/index.js";
import { ClusterFixture, PACKAGE_ROOT } from "./cluster.js";
import { closedPort, silentServer, TcpProxy } from "./net.js";

const CALL = { timeoutMs: 5000 };
const ROUND_MS = 90_000;

async function rejectsWith(call: Promise<unknown>, codes: Code[], what: string): Promise<ConnectError> {
  try {
    await call;
  } catch (e) {
    const err = ConnectError.from(e);
    assert.ok(codes.includes(err.code), `${what}: expected ${codes.map((c) => Code[c]).join("/")}, got ${Code[err.code]}: ${err.message}`);
    return err;
  }
  assert.fail(`${what}: expected ${codes.map((c) => Code[c]).join("/")}, but the call succeeded`);
}

/** Polls `condition` every 50 ms (for state that is not an event of its own); bounded by `timeoutMs`. */
async function until(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`${what} not reached within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const ids = (xs: readonly { id: number }[] | undefined): number[] => (xs ?? []).map((e) => e.id).sort((a, b) => a - b);

describe("live cluster", { timeout: 240_000 }, () => {
  let cluster: ClusterFixture;
  let coordinator: CoordinatorClient;
  let controller: ControllerClient;
  let key: string;
  let instanceId: bigint;
  let proxy: TcpProxy | undefined;
  let sync: RoutingTableSync | undefined;
  const syncErrors: string[] = [];

  before(async () => {
    cluster = await ClusterFixture.start({ timeoutMs: 120_000 });
    coordinator = createCoordinatorClient(cluster.info.coordinator);
    controller = createControllerClient(cluster.info.controller);
    key = cluster.info.management_key;
    instanceId = BigInt(cluster.info.instance_id);
  }, { timeout: 150_000 });

  after(async () => {
    await sync?.close();
    await proxy?.close();
    await cluster?.stop();
  }, { timeout: 60_000 });

  async function published(): Promise<Instance> {
    const resp = await coordinator.listInstances({}, CALL);
    const inst = resp.instances.find((p) => p.instance?.id === instanceId)?.instance;
    assert.ok(inst, `instance ${instanceId} is published`);
    return inst;
  }

  async function refresh(event: RefreshEvent, instances: Instance[]): Promise<bigint> {
    const { revision } = await coordinator.listInstances({}, CALL);
    const ack = await coordinator.refresh({ event, instances, revision: nextRevision(revision) }, { ...CALL, headers: managementKeyHeaders(key) });
    return ack.revision;
  }

  test("Coordinator.ListInstances: instance 1 published with all four ranks", async () => {
    const resp = await coordinator.listInstances({}, CALL);
    assert.ok(resp.revision > 0n, `revision ${resp.revision}`);
    const entry = resp.instances.find((p) => p.instance?.id === instanceId);
    assert.ok(entry?.instance);
    assert.equal(entry.paused, false);
    assert.equal(entry.instance.model, "motor-sim");
    assert.deepEqual(ids(entry.instance.endpoints), [0, 1, 2, 3]);
    assert.deepEqual(new Set(entry.instance.endpoints.map((e) => e.ip)), new Set(["127.0.0.2", "127.0.0.3"]));
    assert.ok(entry.instance.endpoints.every((e) => e.businessPort > 0));
  });

  test("Controller.GetFaultToleranceStatus: NORMAL, every rank alive, published, gate allowed", async () => {
    const resp = await controller.getFaultToleranceStatus({ instanceIds: [instanceId] }, CALL);
    assert.equal(resp.instances.length, 1);
    const rt = resp.instances[0]!;
    assert.equal(FtPhase[rt.phase], "NORMAL");
    assert.deepEqual(rt.originalDpRanks, [0, 1, 2, 3]);
    assert.deepEqual(rt.aliveDpRanks, [0, 1, 2, 3]);
    assert.deepEqual(rt.deadCommitted, []);
    assert.ok(rt.servingPublished && rt.canServe);
    assert.equal(rt.gate?.allowed, true);
    const all = await controller.getFaultToleranceStatus({}, CALL);
    assert.deepEqual(all.instances.map((r) => r.instanceId), [instanceId]);
  });

  test("unknown instance → NOT_FOUND (status, timeline, PAUSE); bad arguments → INVALID_ARGUMENT", async () => {
    const s = await rejectsWith(controller.getFaultToleranceStatus({ instanceIds: [4242n] }, CALL), [Code.NotFound], "status of 4242");
    assert.match(s.rawMessage, /4242/);
    await rejectsWith(controller.getTimeline({ instanceId: 4242n }, CALL), [Code.NotFound], "timeline of 4242");
    await rejectsWith(controller.getTimeline({ instanceId, limit: -1 }, CALL), [Code.InvalidArgument], "negative limit");
    const inst = await published();
    const ghost = clone(InstanceSchema, inst);
    ghost.id = 4242n;
    const p = await rejectsWith(refresh(RefreshEvent.PAUSE, [ghost]), [Code.NotFound], "PAUSE 4242");
    assert.match(p.rawMessage, /4242/);
    await rejectsWith(refresh(RefreshEvent.UNSPECIFIED, [inst]), [Code.InvalidArgument], "event UNSPECIFIED");
  });

  test("Refresh without or with a wrong management key → UNAUTHENTICATED/PERMISSION_DENIED; ListInstances stays open", async () => {
    const inst = await published();
    const { revision } = await coordinator.listInstances({}, CALL);
    const req = { event: RefreshEvent.RESUME, instances: [inst], revision: nextRevision(revision) };
    const denied = [Code.Unauthenticated, Code.PermissionDenied];
    const none = await rejectsWith(coordinator.refresh(req, CALL), denied, "no key");
    assert.match(none.rawMessage, /x-motor-key/);
    await rejectsWith(coordinator.refresh(req, { ...CALL, headers: managementKeyHeaders(key + "-wrong") }), denied, "wrong key");
    // A key on the transport (interceptor) works as well as per-call headers.
    const keyed = createCoordinatorClient(cluster.info.coordinator, { managementKey: key });
    const ack = await keyed.refresh(req, CALL);
    assert.equal(ack.revision, req.revision);
  });

  test("Refresh PAUSE/RESUME, ADD/DEL (identity checked), SET, stale revision", async () => {
    const inst = await published();
    await refresh(RefreshEvent.PAUSE, [inst]);
    let resp = await coordinator.listInstances({}, CALL);
    assert.equal(resp.instances.find((p) => p.instance?.id === instanceId)?.paused, true);
    await refresh(RefreshEvent.RESUME, [inst]);
    resp = await coordinator.listInstances({}, CALL);
    assert.equal(resp.instances.find((p) => p.instance?.id === instanceId)?.paused, false);

    // A probe instance of our own: published, refused a DEL that does not match, withdrawn.
    const probe = clone(InstanceSchema, inst);
    probe.id = 77n;
    probe.model = "ts-client-probe";
    await refresh(RefreshEvent.ADD, [probe]);
    resp = await coordinator.listInstances({}, CALL);
    assert.deepEqual(ids(resp.instances.find((p) => p.instance?.id === 77n)?.instance?.endpoints), [0, 1, 2, 3]);
    const partial = clone(InstanceSchema, probe);
    partial.endpoints = partial.endpoints.filter((e) => e.id !== 0);
    const mismatch = await rejectsWith(refresh(RefreshEvent.DEL, [partial]), [Code.FailedPrecondition], "DEL of a different view");
    assert.match(mismatch.rawMessage, /do not match/);
    await refresh(RefreshEvent.DEL, [probe]);
    resp = await coordinator.listInstances({}, CALL);
    assert.deepEqual(resp.instances.map((p) => p.instance?.id), [instanceId]);

    // SET with exactly what is published changes nothing but the revision.
    const set = await refresh(RefreshEvent.SET, [inst]);
    resp = await coordinator.listInstances({}, CALL);
    assert.equal(resp.revision, set);
    assert.deepEqual(ids(resp.instances[0]?.instance?.endpoints), [0, 1, 2, 3]);

    const stale = await rejectsWith(
      coordinator.refresh({ event: RefreshEvent.RESUME, instances: [inst], revision: resp.revision }, { ...CALL, headers: managementKeyHeaders(key) }),
      [Code.FailedPrecondition], "revision not greater");
    assert.match(stale.rawMessage, /not greater/);
  });

  test("deadlines: a quiet watch stream, a server that never answers, a sync that cannot start", async () => {
    let t0 = Date.now();
    const watch = (async () => {
      for await (const _ of controller.watchFaultToleranceStatus({ instanceIds: [instanceId] }, { timeoutMs: 400 })) {
        // the current runtime arrives first; then nothing changes until the deadline
      }
    })();
    await rejectsWith(watch, [Code.DeadlineExceeded], "watch with timeoutMs 400");
    let took = Date.now() - t0;
    assert.ok(took >= 350 && took < 5000, `watch ended after ${took} ms`);

    const silent = await silentServer();
    try {
      t0 = Date.now();
      const mute = createCoordinatorClient(silent.address);
      await rejectsWith(mute.listInstances({}, { timeoutMs: 300 }), [Code.DeadlineExceeded], "silent server");
      took = Date.now() - t0;
      assert.ok(took < 5000, `silent call ended after ${took} ms`);
      // The transport's default deadline applies when a call sets none.
      const withDefault = createCoordinatorClient(createMotorTransport(silent.address, { defaultTimeoutMs: 300 }));
      await rejectsWith(withDefault.listInstances({}), [Code.DeadlineExceeded], "transport default deadline");
    } finally {
      await silent.close();
    }

    const nowhere = await closedPort();
    const doomed = new RoutingTableSync({
      coordinator: createMotorTransport(cluster.info.coordinator),
      controller: createMotorTransport(nowhere),
      backoff: { initialMs: 20, maxMs: 100 },
      callTimeoutMs: 300,
    });
    t0 = Date.now();
    const err = await rejectsWith(doomed.start({ timeoutMs: 1000 }), [Code.DeadlineExceeded], "sync start without a controller");
    took = Date.now() - t0;
    assert.ok(took >= 950 && took < 5000, `start gave up after ${took} ms`);
    assert.match(err.rawMessage, /last error/);
    assert.ok(doomed.stats.watchConnects >= 3, `the watch was retried with backoff (${doomed.stats.watchConnects} connects)`);
    assert.equal(doomed.stats.lastError?.code, Code.Unavailable);
  });

  test("RoutingTableSync: first sync, a PAUSE seen by resync, a cut connection reconnected", async () => {
    proxy = await TcpProxy.start(cluster.info.controller);
    sync = new RoutingTableSync({
      coordinator: createMotorTransport(cluster.info.coordinator),
      controller: createMotorTransport(proxy.address),
      instanceIds: [instanceId],
      resyncIntervalMs: 500,
      callTimeoutMs: 2000,
      backoff: { initialMs: 50, maxMs: 1000 },
      onError: (e, source) => syncErrors.push(`${source}: ${Code[e.code]} ${e.rawMessage}`),
    });
    const first = await sync.start({ timeoutMs: 10_000 });
    assert.ok(first.synced);
    assert.deepEqual(ids(sync.endpoints(instanceId)), [0, 1, 2, 3]);
    assert.equal(first.routes.get(instanceId)?.runtime?.phase, FtPhase.NORMAL);
    assert.deepEqual(sync.endpointsForModel("motor-sim").map((e) => e.url).length, 4);

    // A change only the Coordinator sees (an operator's PAUSE) reaches the table by resync.
    const inst = await published();
    await refresh(RefreshEvent.PAUSE, [inst]);
    await sync.waitFor((s) => s.routes.get(instanceId)?.paused === true && s.routes.get(instanceId)?.endpoints.length === 0, { timeoutMs: 10_000 });
    await refresh(RefreshEvent.RESUME, [inst]);
    await sync.waitFor((s) => s.routes.get(instanceId)?.endpoints.length === 4, { timeoutMs: 10_000 });

    // The watch stream's connection is reset: the sync reconnects (backoff) and gets the runtime again.
    const connects = sync.stats.watchConnects;
    const messages = sync.stats.watchMessages;
    proxy.cut();
    await until(() => sync!.stats.watchConnects > connects && sync!.stats.watchMessages > messages, 15_000, "watch reconnected");
    assert.ok(syncErrors.some((e) => e.startsWith("watch:")), `the broken stream was reported: ${syncErrors.join("; ")}`);
    assert.deepEqual(ids(sync.endpoints(instanceId)), [0, 1, 2, 3]);
  });

  test("a DP scale-down round observed through the watch stream, the routing table, status and timeline", { timeout: ROUND_MS + 30_000 }, async () => {
    assert.ok(sync, "the RoutingTableSync of the previous test is running");
    const seen: InstanceFtRuntime[] = [];
    let rank1LeftAt: RoutingSnapshot | undefined;
    const unsubscribe = sync.subscribe((s) => {
      const route = s.routes.get(instanceId);
      if (!rank1LeftAt && route && !route.endpoints.some((e) => e.id === 1)) rank1LeftAt = s;
    });

    let injected = false;
    let final: InstanceFtRuntime | undefined;
    const t0 = Date.now();
    // Leaving a `for await` early does not cancel a Connect stream, and a `timeoutMs` timer would
    // run to its end: the stream gets a signal instead, aborted once the loop is done.
    const stop = new AbortController();
    const signal = AbortSignal.any([stop.signal, AbortSignal.timeout(ROUND_MS)]);
    try {
    for await (const msg of controller.watchFaultToleranceStatus({ instanceIds: [instanceId] }, { signal })) {
      const rt = msg.runtime!;
      seen.push(rt);
      if (!injected) {
        assert.equal(FtPhase[rt.phase], "NORMAL", "the stream starts with the current runtime");
        const answer = await cluster.command("inject-dead 1");
        assert.ok(answer.ok, `inject-dead 1: ${answer.error}`);
        injected = true;
        continue;
      }
      if (rt.phase === FtPhase.SCALED_DOWN_RUNNING && rt.deadCommitted.join() === "1" && rt.servingPublished) {
        final = rt;
        break;
      }
      assert.notEqual(rt.phase, FtPhase.RECONFIGURING, `the round fell back: ${rt.lastError}`);
    }
    } finally {
      stop.abort();
    }
    assert.ok(final, `SCALED_DOWN_RUNNING with dead_committed [1] within ${ROUND_MS} ms; phases seen: ${seen.map((r) => FtPhase[r.phase])}`);
    const phases = seen.map((r) => FtPhase[r.phase]);
    console.log(`watch: ${phases.join(" → ")} in ${Date.now() - t0} ms`);
    assert.ok(seen.some((r) => r.phase !== FtPhase.NORMAL && r.phase !== FtPhase.SCALED_DOWN_RUNNING),
      `an intermediate phase was streamed: ${phases}`);
    assert.deepEqual(final.aliveDpRanks, [0, 2, 3]);
    assert.deepEqual(final.originalDpRanks, [0, 1, 2, 3]);
    assert.ok(final.canServe);
    assert.ok(final.requestId);

    // The gateway's table follows: rank 1 out, the other original ids kept.
    const synced = await sync.waitFor(
      (s) => ids(s.routes.get(instanceId)?.endpoints).join() === "0,2,3" && s.routes.get(instanceId)?.publishedIds.join() === "0,2,3" &&
        s.runtimes.get(instanceId)?.phase === FtPhase.SCALED_DOWN_RUNNING,
      { timeoutMs: 15_000 });
    unsubscribe();
    assert.ok(rank1LeftAt, "rank 1 left the routing table");
    console.log(`routing table: rank 1 left at version ${rank1LeftAt.version} (Controller phase ${FtPhase[rank1LeftAt.runtimes.get(instanceId)?.phase ?? 0]}, ` +
      `Coordinator still publishing [${rank1LeftAt.routes.get(instanceId)?.publishedIds}]); now version ${synced.version}`);

    assert.deepEqual(ids((await published()).endpoints), [0, 2, 3]);
    const status = (await controller.getFaultToleranceStatus({ instanceIds: [instanceId] }, CALL)).instances[0]!;
    assert.deepEqual([FtPhase[status.phase], status.deadCommitted, status.aliveDpRanks], ["SCALED_DOWN_RUNNING", [1], [0, 2, 3]]);

    const timeline = await controller.getTimeline({ instanceId, limit: 1 }, CALL);
    assert.equal(timeline.transactions.length, 1);
    const txn = timeline.transactions[0]!;
    assert.equal(txn.requestId, final.requestId);
    assert.equal(txn.strategy, "dp_scale_down");
    assert.equal(txn.outcome, "succeeded");
    assert.ok(txn.endedAtUnixSec >= txn.startedAtUnixSec && txn.startedAtUnixSec > 0);
    const names = txn.events.map((e) => e.name);
    for (const step of ["guard", "apply", "finalize", "publish"]) assert.ok(names.includes(step), `timeline has ${step}: ${names}`);
    const applies = txn.events.filter((e) => e.name === "apply");
    assert.ok(applies.length >= 1 && applies.every((e) => e.outcome === "ok"), `applies: ${applies.map((e) => e.outcome)}`);
    // Typed facts: each apply is a CALL with the cumulative removed ranks and one 202 per survivor.
    for (const e of applies) {
      assert.equal(e.eventKind, TimelineEventKind.CALL);
      assert.deepEqual(e.ranks, [1]);
      assert.ok(e.applyResults.length > 0 && e.applyResults.every((r) => r.accepted && r.httpStatus === 202),
        `apply results: ${e.applyResults.map((r) => `${r.endpointId}:${r.httpStatus}`)}`);
    }
    assert.deepEqual(applies.flatMap((e) => e.applyResults.map((r) => r.endpointId)).sort((a, b) => a - b), [0, 2, 3]);
    const evidence = txn.events.filter((e) => e.eventKind === TimelineEventKind.EVIDENCE);
    assert.ok(evidence.some((e) => e.ranks.includes(1)), `evidence names rank 1: ${evidence.map((e) => e.ranks)}`);
    const entered = txn.events.filter((e) => e.eventKind === TimelineEventKind.PHASE).map((e) => FtPhase[e.phase]);
    assert.ok(entered.includes("SCALING_DOWN"), `phases entered: ${entered}`);
    const all = await controller.getTimeline({ instanceId }, CALL);
    assert.ok(all.transactions.length >= 1);
  });

  test("the README example runs against the cluster", { timeout: 30_000 }, async () => {
    const script = join(PACKAGE_ROOT, "dist", "examples", "quickstart.js");
    const { stdout } = await promisify(execFile)(process.execPath, [script, cluster.info.controller, cluster.info.coordinator, key], {
      env: { ...process.env, WATCH_MS: "1000" },
      timeout: 20_000,
    });
    console.log(stdout.trimEnd());
    assert.match(stdout, /^instance 1 model=motor-sim endpoints=\[0,2,3\] paused=false$/m);
    assert.match(stdout, /^watch: instance 1 phase=SCALED_DOWN_RUNNING alive=\[0,2,3\] dead_committed=\[1\]$/m);
    assert.match(stdout, /^refresh RESUME instances \[1\]: acknowledged revision \d+$/m);
  });
});
