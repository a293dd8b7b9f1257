// Signaling payloads sealed end to end (docs/adr/0018): the link's fragment
// holds a 32-byte secret the relay never sees; HKDF-SHA256 (info
// "rally-call-signal-v1") makes an AES-256-GCM key; a sealed payload is
// base64url(nonce ‖ ciphertext ‖ tag) with the room id as associated data.
// The same construction as RallyCore's CallSignalSeal
// (Spec/call-signal.vectors.json).

export const SECRET_BYTES = 32;
export const NONCE_BYTES = 12;
export const TAG_BYTES = 16;
const INFO = new TextEncoder().encode("rally-call-signal-v1");

export function base64url(bytes) {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

export function fromBase64url(text) {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw new Error("not base64url");
  const padded = text.replaceAll("-", "+").replaceAll("_", "/") + "===".slice((text.length + 3) % 4);
  const binary = atob(padded);
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

export function newSecret() {
  return base64url(crypto.getRandomValues(new Uint8Array(SECRET_BYTES)));
}

// The secret from a link's fragment, or null when it is not one: base64url
// without padding of exactly SECRET_BYTES bytes (only 43 characters decode
// to 32 bytes, so the length needs no check of its own).
export function parseSecret(fragment) {
  const text = fragment.startsWith("#") ? fragment.slice(1) : fragment;
  try {
    return fromBase64url(text).length === SECRET_BYTES ? text : null;
  } catch {
    return null;
  }
}

export async function signalKey(secret) {
  const material = await crypto.subtle.importKey("raw", fromBase64url(secret), "HKDF", false, ["deriveKey"]);
  return crypto.subtle.deriveKey(
    { name: "HKDF", hash: "SHA-256", salt: new Uint8Array(0), info: INFO },
    material,
    { name: "AES-GCM", length: 256 },
    false,
    ["encrypt", "decrypt"],
  );
}

export async function seal(key, room, payload) {
  return sealText(key, room, JSON.stringify(payload));
}

export async function sealText(key, room, text, nonce = crypto.getRandomValues(new Uint8Array(NONCE_BYTES))) {
  // AES-GCM takes other nonce lengths, but a payload is read as a 12-byte
  // nonce first: any other length would seal what never opens.
  if (nonce.length !== NONCE_BYTES) throw new Error(`a nonce is ${NONCE_BYTES} bytes, not ${nonce.length}`);
  const plaintext = new TextEncoder().encode(text);
  const sealed = new Uint8Array(
    await crypto.subtle.encrypt(
      { name: "AES-GCM", iv: nonce, additionalData: new TextEncoder().encode(room) },
      key,
      plaintext,
    ),
  );
  const combined = new Uint8Array(nonce.length + sealed.length);
  combined.set(nonce, 0);
  combined.set(sealed, nonce.length);
  return base64url(combined);
}

// Opens a sealed payload; throws when it was not sealed under this key for
// this room.
export async function open(key, room, data) {
  return JSON.parse(await openText(key, room, data));
}

export async function openText(key, room, data) {
  const bytes = fromBase64url(data);
  // The WebCrypto spec's AES-GCM takes an IV of any length, so a payload
  // too short for a 12-byte nonce (and a tag) is refused here, never
  // decrypted under whatever bytes it has.
  const nonce = bytes.slice(0, NONCE_BYTES);
  if (nonce.length !== NONCE_BYTES) throw new Error(`sealed payload too short for a ${NONCE_BYTES}-byte nonce`);
  if (bytes.length < NONCE_BYTES + TAG_BYTES) throw new Error("sealed payload too short for a nonce and a tag");
  const plaintext = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv: nonce, additionalData: new TextEncoder().encode(room) },
    key,
    bytes.slice(NONCE_BYTES),
  );
  return new TextDecoder().decode(plaintext);
}
