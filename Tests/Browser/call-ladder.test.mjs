// Replays Spec/call-ladder.vectors.json against the browser's call ladder;
// Tests/RallyCoreTests/CallVectorTests.swift replays the same file against
// RallyCore's CallLadder. Run: node --test Tests/Browser/
import { test } from "node:test";
import assert from "node:assert/strict";
import { loadSpec, assertWellFormedFile } from "./spec-file.mjs";
import { CallLadder, RUNGS, BACKOFF_BASE_MS, BACKOFF_CAP_MS, ceilingMs } from "../../Web/call/call-ladder.js";

const file = loadSpec("call-ladder.vectors.json");

test("the vector file is well formed", () => {
  assertWellFormedFile(file, ["constants", "description", "format", "vectors"]);
  for (const vector of file.vectors) {
    // Keys outside the format fail, so a typo cannot silently drop an expectation.
    for (const key of Object.keys(vector)) {
      assert.ok(["name", "note", "steps"].includes(key), `${vector.name}: key ${key}`);
    }
    assert.ok(vector.steps.length > 0, `${vector.name} has no steps`);
    for (const step of vector.steps) {
      if (step.op === "recovered") {
        assert.deepEqual(Object.keys(step), ["op"], vector.name);
        continue;
      }
      assert.equal(step.op, "next", vector.name);
      assert.deepEqual(Object.keys(step).sort(), ["expect", "op", "unit"], vector.name);
      assert.equal(typeof step.unit, "number", vector.name);
      assert.deepEqual(Object.keys(step.expect).sort(), ["attempt", "delay_ms", "rung"], vector.name);
      // Integers, so every implementation can compare exactly.
      assert.ok(Number.isInteger(step.expect.delay_ms), `${vector.name}: delay_ms ${step.expect.delay_ms}`);
      assert.ok(file.constants.rungs.includes(step.expect.rung), `${vector.name}: rung ${step.expect.rung}`);
    }
  }
});

test("the file's constants are the module's", () => {
  assert.deepEqual(file.constants, { base_ms: BACKOFF_BASE_MS, cap_ms: BACKOFF_CAP_MS, rungs: RUNGS });
  assert.equal(ceilingMs(1), BACKOFF_BASE_MS);
});

for (const vector of file.vectors) {
  test(vector.name, () => {
    const ladder = new CallLadder();
    vector.steps.forEach((step, index) => {
      if (step.op === "recovered") {
        assert.equal(ladder.recovered(), undefined);
        return;
      }
      const where = `step ${index} (next, unit ${step.unit})`;
      assert.deepStrictEqual(ladder.next(step.unit), step.expect, where);
    });
  });
}
