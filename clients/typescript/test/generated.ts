/**
 * Drift check of the committed generated code: runs the recipe (`buf generate`, buf.gen.yaml) into a
 * temporary directory and compares it file by file with src/gen. Also a command:
 * `npm run check-generated` exits 1 and names every difference.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join, relative } from "node:path";
import { pathToFileURL } from "node:url";

import { PACKAGE_ROOT } from "./cluster.js";

export const GEN_DIR = join(PACKAGE_ROOT, "src", "gen");

function files(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else out.set(relative(dir, path), readFileSync(path, "utf8"));
    }
  };
  walk(dir);
  return out;
}

/** Differences between src/gen and a fresh generation (empty when none). */
export function generatedDrift(): string[] {
  const tmp = mkdtempSync(join(tmpdir(), "motor-ts-gen-"));
  try {
    const bin = join(PACKAGE_ROOT, "node_modules", ".bin");
    const run = spawnSync(join(bin, "buf"), ["generate", "--output", tmp], {
      cwd: PACKAGE_ROOT,
      env: { ...process.env, PATH: `${bin}${delimiter}${process.env.PATH ?? ""}` },
      encoding: "utf8",
      timeout: 60_000,
    });
    if (run.status !== 0) throw new Error(`buf generate failed (${run.status ?? run.signal}): ${run.stderr || run.error}`);
    const fresh = files(join(tmp, "src", "gen"));
    const committed = files(GEN_DIR);
    const drift: string[] = [];
    for (const [name, text] of fresh) {
      if (!committed.has(name)) drift.push(`missing: src/gen/${name}`);
      else if (committed.get(name) !== text) drift.push(`differs: src/gen/${name}`);
    }
    for (const name of committed.keys()) if (!fresh.has(name)) drift.push(`stale (no longer generated): src/gen/${name}`);
    return drift.sort();
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const drift = generatedDrift();
  if (drift.length) {
    console.error(`generated code is out of date (run \`npm run generate\` in clients/typescript):\n  ${drift.join("\n  ")}`);
    process.exit(1);
  }
  console.log("generated code matches protos/motor/v1 (buf generate)");
}
