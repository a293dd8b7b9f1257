// Replays Spec/call-signal.vectors.json against the browser's signal seal;
// Tests/RallyCoreTests/CallVectorTests.swift replays the same file against
// RallyCrypto's CallSignalSeal. Run: node --test Tests/Browser/
import { test } from "node:test";
import assert from "node:assert/strict";
import { loadSpec, assertWellFormedFile } from "./spec-file.mjs";
import {
  SECRET_BYTES,
  NONCE_BYTES,
  TAG_BYTES,
  base64url,
  fromBase64url,
  newSecret,
  parseSecret,
  signalKey,
  sealText,
  openText,
} from "../../Web/call/call-crypto.js";

// Node 18 (Debian bookworm's nodejs) has WebCrypto but not as a global;
// browsers and Node 19+ do.
globalThis.crypto ??= (await import("node:crypto")).webcrypto;

const file = loadSpec("call-signal.vectors.json");
const sealing = file.vectors.filter((vector) => !("opens" in vector));
const negative = file.vectors.filter((vector) => "opens" in vector);

const BASE64URL = /^[A-Za-z0-9_-]*$/;
const ROOM = /^[0-9a-f]{32}$/;

test("the vector file is well formed", () => {
  assertWellFormedFile(file, ["description", "format", "vectors"]);
  assert.ok(sealing.length > 0 && negative.length > 0);
  for (const vector of sealing) {
    // Keys outside the format fail, so a typo cannot silently drop an expectation.
    assert.deepEqual(Object.keys(vector).sort(), ["name", "nonce", "plaintext", "room", "sealed", "secret"], vector.name);
    assert.equal(fromBase64url(vector.secret).length, SECRET_BYTES, vector.name);
    assert.equal(fromBase64url(vector.nonce).length, 12, vector.name);
    assert.match(vector.room, ROOM, vector.name);
    assert.match(vector.sealed, BASE64URL, vector.name);
    assert.equal(typeof vector.plaintext, "string", vector.name);
  }
  for (const vector of negative) {
    assert.deepEqual(Object.keys(vector).sort(), ["name", "opens", "room", "sealed", "secret"], vector.name);
    assert.equal(vector.opens, false, vector.name);
    assert.equal(fromBase64url(vector.secret).length, SECRET_BYTES, vector.name);
    assert.match(vector.room, ROOM, vector.name);
  }
  // What the vectors are meant to cover.
  assert.ok(sealing.some((vector) => /[^\x00-\x7f]/.test(vector.plaintext)), "a non-ASCII plaintext");
  assert.ok(sealing.some((vector) => vector.plaintext === ""), "an empty plaintext");
  assert.ok(sealing.some((vector) => vector.plaintext.includes("\\r\\n")), "an SDP in JSON");
});

for (const vector of sealing) {
  test(`seals and opens: ${vector.name}`, async () => {
    const key = await signalKey(vector.secret);
    const nonce = fromBase64url(vector.nonce);
    assert.equal(await sealText(key, vector.room, vector.plaintext, nonce), vector.sealed);
    assert.equal(await openText(key, vector.room, vector.sealed), vector.plaintext);
    // The payload begins with its nonce.
    assert.deepEqual(fromBase64url(vector.sealed).slice(0, 12), nonce);
  });
}

for (const vector of negative) {
  test(`does not open: ${vector.name}`, async () => {
    // Outside the rejects check, so a bad key fails the test rather than passing it.
    const key = await signalKey(vector.secret);
    await assert.rejects(openText(key, vector.room, vector.sealed));
  });
}

test("a random nonce seals differently each time, and both open", async () => {
  const key = await signalKey(sealing[0].secret);
  const room = sealing[0].room;
  const a = await sealText(key, room, "same text");
  const b = await sealText(key, room, "same text");
  assert.notEqual(a, b);
  assert.equal(await openText(key, room, a), "same text");
  assert.equal(await openText(key, room, b), "same text");
});

test("open refuses a payload too short for a 12-byte nonce and a tag, before decrypting", async () => {
  assert.equal(NONCE_BYTES, 12);
  assert.equal(TAG_BYTES, 16);
  const vector = sealing.find((v) => v.plaintext === "");
  const key = await signalKey(vector.secret);
  const whole = fromBase64url(vector.sealed);
  assert.equal(whole.length, NONCE_BYTES + TAG_BYTES);
  // Every shorter prefix: 0…11 bytes cannot hold the nonce, 12…27 the tag.
  // The refusal is the length check's, not a decryption under a shorter
  // nonce (the WebCrypto spec's AES-GCM takes an IV of any length).
  for (let length = 0; length < whole.length; length += 1) {
    const message = length < NONCE_BYTES ? /too short for a 12-byte nonce/ : /too short for a nonce and a tag/;
    await assert.rejects(openText(key, vector.room, base64url(whole.slice(0, length))), message, `${length} bytes`);
  }
  assert.equal(await openText(key, vector.room, vector.sealed), "");
});

test("a payload sealed under a nonce of another length never opens, and sealText refuses one", async () => {
  const vector = sealing[0];
  const key = await signalKey(vector.secret);
  for (const length of [0, 1, 8, 11, 13, 16]) {
    await assert.rejects(sealText(key, vector.room, "text", new Uint8Array(length)), /a nonce is 12 bytes/, `${length}`);
  }
  // Sealed by hand under a 16-byte nonce (the WebCrypto spec takes any
  // length; Node's refuses fewer than 12 bytes): read as a 12-byte nonce
  // and the rest, it does not open.
  const nonce = new Uint8Array(16).fill(7);
  const sealed = new Uint8Array(
    await crypto.subtle.encrypt(
      { name: "AES-GCM", iv: nonce, additionalData: new TextEncoder().encode(vector.room) },
      key,
      new TextEncoder().encode("hello, call"),
    ),
  );
  const payload = new Uint8Array(nonce.length + sealed.length);
  payload.set(nonce, 0);
  payload.set(sealed, nonce.length);
  assert.ok(payload.length >= NONCE_BYTES + TAG_BYTES);
  await assert.rejects(openText(key, vector.room, base64url(payload)));
});

test("base64url round-trips every byte value without padding", () => {
  const bytes = Uint8Array.from({ length: 256 }, (_, index) => index);
  for (let length = 0; length <= 34; length += 1) {
    const text = base64url(bytes.slice(256 - length));
    assert.match(text, BASE64URL);
    assert.deepEqual(fromBase64url(text), bytes.slice(256 - length));
  }
  assert.throws(() => fromBase64url("AA=="));
  assert.throws(() => fromBase64url("a+b/"));
});

test("parseSecret accepts a link's secret, with or without the #", () => {
  const secret = sealing[0].secret;
  assert.equal(parseSecret(`#${secret}`), secret);
  assert.equal(parseSecret(secret), secret);
  for (let round = 0; round < 20; round += 1) {
    const fresh = newSecret();
    assert.equal(parseSecret(`#${fresh}`), fresh);
    assert.equal(fromBase64url(fresh).length, SECRET_BYTES);
  }
});

test("parseSecret refuses hostile fragments", () => {
  const secret = sealing[0].secret;
  const hostile = {
    empty: "",
    "only the #": "#",
    "too short (42 characters)": `#${secret.slice(0, 42)}`,
    "too short (31 bytes)": `#${base64url(new Uint8Array(31))}`,
    "too long (44 characters)": `#${secret}A`,
    "too long (33 bytes)": `#${base64url(new Uint8Array(33))}`,
    "padding after the secret": `#${secret}=`,
    "padding inside 43 characters": `#${secret.slice(0, 42)}=`,
    "standard base64 '+'": `#${secret.slice(0, 42)}+`,
    "standard base64 '/'": `#/${secret.slice(1)}`,
    "a dot": `#${secret.slice(0, 21)}.${secret.slice(22)}`,
    "a space": `#${secret.slice(0, 21)} ${secret.slice(22)}`,
    "a trailing newline": `#${secret}\n`,
    "a percent-encoded character": `#${secret.slice(0, 40)}%41`,
    "a non-ASCII letter": `#${secret.slice(0, 42)}é`,
    // Two UTF-16 code units: 43 in all, but not base64url.
    "an emoji filling the length": `#${secret.slice(0, 41)}🔑`,
    "a second #": `##${secret}`,
    "a query-like suffix": `#${secret.slice(0, 40)}?a=`,
  };
  for (const [name, fragment] of Object.entries(hostile)) {
    assert.equal(parseSecret(fragment), null, name);
  }
});
