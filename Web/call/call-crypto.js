// Signaling payloads sealed end to end (docs/adr/0018): the link's fragment
// holds a 32-byte secret the relay never sees; HKDF-SHA256 (info
// "rally-call-signal-v1") makes an AES-256-GCM key; a sealed payload is
// base64url(nonce ‖ ciphertext ‖ tag) with the room id as associated data.
// The same construction as RallyCore's CallSignalSeal
// (Spec/call-signal.vectors.json).

export const SECRET_BYTES = 32;
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

// The secret from a link's fragment, or null when it is not one.
export function parseSecret(fragment) {
  const text = fragment.startsWith("#") ? fragment.slice(1) : fragment;
  if (text.length !== 43) return null;
  try {
    const bytes = fromBase64url(text);
    return bytes.length === SECRET_BYTES ? text : null;
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

export async function sealText(key, room, text, nonce = crypto.getRandomValues(new Uint8Array(12))) {
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
  if (bytes.length < 12 + 16) throw new Error("sealed payload too short");
  const plaintext = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv: bytes.slice(0, 12), additionalData: new TextEncoder().encode(room) },
    key,
    bytes.slice(12),
  );
  return new TextDecoder().decode(plaintext);
}
