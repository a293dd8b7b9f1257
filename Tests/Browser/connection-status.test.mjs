// Replays Spec/connection-status.vectors.json against the browser's
// connection-status machine, as Tests/RallyCoreTests/
// ConnectionStatusMachineTests.swift does against RallyCore's: both must
// match every expectation exactly. Run: node --test Tests/Browser/
import { test } from "node:test";
import assert from "node:assert/strict";
import { loadSpec, assertWellFormedFile } from "./spec-file.mjs";
import {
  ConnectionStatusMachine,
  INDICATOR_DELAY_MS,
  RETRYING_AFTER_MS,
  RECONNECTING_TEXT,
  LONGER_THAN_USUAL_TEXT,
} from "../../Web/call/connection-status.js";

const file = loadSpec("connection-status.vectors.json");

const EVENTS = ["degraded", "recovered", "timer_fired", "user_left", "gone"];
const REASONS = ["transport_error", "missed_pings", "network_change"];
const STATUSES = ["idle", "connected", "recovering", "retrying"];
const EXPECT_KEYS = ["effects", "indicator_visible", "shows_leave", "status", "sub_text", "text"];

test("the vector file is well formed", () => {
  assertWellFormedFile(file, ["constants", "description", "format", "vectors"]);
  for (const vector of file.vectors) {
    // Keys outside the format fail, so a typo cannot silently drop an expectation.
    for (const key of Object.keys(vector)) {
      assert.ok(["name", "note", "initial_state", "steps"].includes(key), `${vector.name}: key ${key}`);
    }
    // Recovering needs a degraded event to start its clock.
    if ("initial_state" in vector) {
      assert.ok(["idle", "connected", "retrying"].includes(vector.initial_state), vector.name);
    }
    assert.ok(vector.steps.length > 0, `${vector.name} has no steps`);
    let last = -Infinity;
    for (const step of vector.steps) {
      for (const key of Object.keys(step)) {
        assert.ok(["at_ms", "event", "reason", "expect"].includes(key), `${vector.name}: key ${key}`);
      }
      assert.ok(Number.isInteger(step.at_ms) && step.at_ms >= last, `${vector.name}: time runs backwards`);
      last = step.at_ms;
      assert.ok(EVENTS.includes(step.event), `${vector.name}: event ${step.event}`);
      if ("reason" in step) {
        assert.equal(step.event, "degraded", `${vector.name}: a reason on ${step.event}`);
        assert.ok(REASONS.includes(step.reason), `${vector.name}: reason ${step.reason}`);
      }
      assert.deepEqual(Object.keys(step.expect).sort(), EXPECT_KEYS, vector.name);
      assert.ok(STATUSES.includes(step.expect.status), `${vector.name}: status ${step.expect.status}`);
    }
  }
  // Every event, reason and status appears somewhere.
  const steps = file.vectors.flatMap((vector) => vector.steps);
  assert.deepEqual(new Set(steps.map((step) => step.event)), new Set(EVENTS));
  assert.deepEqual(new Set(steps.filter((step) => step.reason).map((step) => step.reason)), new Set(REASONS));
  assert.deepEqual(new Set(steps.map((step) => step.expect.status)), new Set(STATUSES));
});

test("the file's constants are the module's", () => {
  assert.deepEqual(file.constants, {
    indicator_delay_ms: INDICATOR_DELAY_MS,
    retrying_after_ms: RETRYING_AFTER_MS,
    reconnecting_text: RECONNECTING_TEXT,
    longer_than_usual_text: LONGER_THAN_USUAL_TEXT,
  });
});

for (const vector of file.vectors) {
  test(vector.name, () => {
    // As the Swift test: a missing initial_state is idle.
    const machine = new ConnectionStatusMachine(vector.initial_state ?? "idle");
    vector.steps.forEach((step, index) => {
      const where = `step ${index} (${step.event} at ${step.at_ms} ms)`;
      // An absent reason stays undefined, so the module's default applies, as in Swift.
      const effects = machine.handle(step.event, step.at_ms, step.reason);
      const { effects: expectedEffects, ...expectedPresentation } = step.expect;
      assert.deepStrictEqual(machine.presentation(), expectedPresentation, where);
      assert.equal(machine.status, step.expect.status, where);
      assert.deepStrictEqual(effects, expectedEffects, where);
    });
  });
}
