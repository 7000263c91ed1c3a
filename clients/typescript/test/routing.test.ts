/** RoutingTableSync's pure parts: the backoff and the table built from both services' answers. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { create } from "@bufbuild/protobuf";

import {
  backoffDelayMs,
  buildRoutes,
  FtPhase,
  InstanceFtRuntimeSchema,
  ListInstancesResponseSchema,
  type InstanceFtRuntime,
} from "../src/index.js";

test("backoff grows by the multiplier, is capped, and jitter only takes off", () => {
  const none = (): number => 0;
  assert.deepEqual([0, 1, 2, 3, 10].map((a) => backoffDelayMs(a, { initialMs: 100, maxMs: 1000 }, none)), [100, 200, 400, 800, 1000]);
  const full = (): number => 1;
  assert.equal(backoffDelayMs(2, { initialMs: 100, jitter: 0.5 }, full), 200);
  for (let i = 0; i < 100; i++) {
    const d = backoffDelayMs(3, { initialMs: 100, maxMs: 5000, jitter: 0.2 });
    assert.ok(d >= 640 && d <= 800, `delay ${d}`);
  }
});

const listed = create(ListInstancesResponseSchema, {
  revision: 7n,
  instances: [
    {
      instance: {
        id: 1n, model: "m",
        endpoints: [0, 1, 2, 3].map((id) => ({ id, ip: `127.0.0.${2 + (id >> 1)}`, businessPort: 9000 + id })),
      },
    },
    { instance: { id: 2n, model: "m", endpoints: [{ id: 0, ip: "10.0.0.1", businessPort: 8000 }] }, paused: true },
  ],
});

test("published endpoints are routable; paused instances are not", () => {
  const routes = buildRoutes(listed, new Map());
  assert.deepEqual(routes.get(1n)?.endpoints.map((e) => e.id), [0, 1, 2, 3]);
  assert.equal(routes.get(1n)?.endpoints[3]?.url, "http://127.0.0.3:9003");
  assert.deepEqual(routes.get(2n)?.endpoints, []);
  assert.deepEqual(routes.get(2n)?.publishedIds, [0]);
});

test("ranks being removed leave the table before the Coordinator's DEL lands", () => {
  const rt: InstanceFtRuntime = create(InstanceFtRuntimeSchema, {
    instanceId: 1n, phase: FtPhase.SCALING_DOWN, originalDpRanks: [0, 1, 2, 3], deadCommitted: [0], pendingRemovedRanks: [1],
  });
  const routes = buildRoutes(listed, new Map([[1n, rt]]));
  assert.deepEqual(routes.get(1n)?.endpoints.map((e) => e.id), [2, 3]);
  assert.deepEqual(routes.get(1n)?.publishedIds, [0, 1, 2, 3]);
  assert.equal(routes.get(1n)?.runtime?.phase, FtPhase.SCALING_DOWN);
});

test("instanceIds filters the table", () => {
  assert.deepEqual([...buildRoutes(listed, new Map(), [2n]).keys()], [2n]);
  assert.deepEqual([...buildRoutes(undefined, new Map()).keys()], []);
});
