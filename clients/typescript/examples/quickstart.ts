import { Code, ConnectError } from "@connectrpc/connect";
import { createControllerClient, createCoordinatorClient, FtPhase, managementKeyHeaders, nextRevision, RefreshEvent } from "../src/index.js";

const [controllerAddress, coordinatorAddress, key = process.env.MOTOR_MANAGEMENT_KEY ?? ""] = process.argv.slice(2);
const coordinator = createCoordinatorClient(coordinatorAddress);
const controller = createControllerClient(controllerAddress);

// 1. What the Coordinator routes to.
const listed = await coordinator.listInstances({}, { timeoutMs: 3000 });
for (const { instance, paused } of listed.instances)
  console.log(`instance ${instance?.id} model=${instance?.model} endpoints=[${instance?.endpoints.map((e) => e.id)}] paused=${paused}`);

// 2. The Controller's status stream: the current runtime first, then every change, until the deadline.
try {
  for await (const { runtime: rt } of controller.watchFaultToleranceStatus({}, { timeoutMs: Number(process.env.WATCH_MS ?? 5000) }))
    console.log(`watch: instance ${rt?.instanceId} phase=${FtPhase[rt?.phase ?? 0]} alive=[${rt?.aliveDpRanks}] dead_committed=[${rt?.deadCommitted}]`);
} catch (err) {
  if (ConnectError.from(err).code !== Code.DeadlineExceeded) throw err;
}

// 3. A Refresh with the management key: RESUME the published instances (a no-op unless paused).
const instances = listed.instances.flatMap((p) => (p.instance ? [p.instance] : []));
const ack = await coordinator.refresh({ event: RefreshEvent.RESUME, instances, revision: nextRevision(listed.revision) },
  { headers: managementKeyHeaders(key), timeoutMs: 3000 });
console.log(`refresh RESUME instances [${instances.map((i) => i.id)}]: acknowledged revision ${ack.revision}`);
