// The shared vector files in Spec/, read as the browser tests need them,
// and the checks every one of them passes (a helper module: node --test
// runs only the *.test.mjs files).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

/** Spec/<name>, parsed. */
export function loadSpec(name) {
  return JSON.parse(readFileSync(new URL(`../../Spec/${name}`, import.meta.url), "utf8"));
}

/** The top level has exactly `rootKeys`, a description, a format and
 * uniquely named vectors. */
export function assertWellFormedFile(file, rootKeys) {
  assert.deepEqual(Object.keys(file).sort(), [...rootKeys].sort());
  assert.ok(file.description.length > 0 && file.format.length > 0);
  assert.ok(file.vectors.length > 0);
  const names = file.vectors.map((vector) => vector.name);
  assert.equal(new Set(names).size, names.length, "vector names are unique");
}
