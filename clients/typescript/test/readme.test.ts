import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { PACKAGE_ROOT } from "./cluster.js";

test("README's example is examples/quickstart.ts (which the cluster test runs)", () => {
  const readme = readFileSync(join(PACKAGE_ROOT, "README.md"), "utf8");
  const example = readFileSync(join(PACKAGE_ROOT, "examples", "quickstart.ts"), "utf8");
  const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.equal(block, example.replace('from "../src/index.js"', 'from "@motor-ft/client"'));
});
