import assert from "node:assert/strict";
import { test } from "node:test";

import { generatedDrift } from "./generated.js";

test("committed src/gen equals a fresh `buf generate` of protos/motor/v1", { timeout: 60_000 }, () => {
  const drift = generatedDrift();
  assert.deepEqual(drift, [], `run \`npm run generate\` in clients/typescript:\n  ${drift.join("\n  ")}`);
});
