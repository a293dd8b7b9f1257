import Crypto
public import Foundation

/// The call's signaling key and its sealing (docs/adr/0018): HKDF-SHA256
/// of the link's secret (empty salt, info `rally-call-signal-v1`) gives an
/// AES-256-GCM key; a sealed payload is base64url(nonce ‖ ciphertext ‖ tag)
/// with the room id as associated data, so a payload sealed for one room
/// does not open in another. The browser client does the same with
/// WebCrypto (Spec/call-signal.vectors.json).
public struct CallSignalSeal: Sendable {
    public static let info = Data("rally-call-signal-v1".utf8)
    public let room: String
    private let key: SymmetricKey

    public init(secret: Data, room: String) {
        self.room = room
        key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: secret), salt: Data(), info: Self.info, outputByteCount: 32)
    }

    public func seal(text: String, nonce: Data? = nil) -> String {
        let gcmNonce = nonce.flatMap { try? AES.GCM.Nonce(data: $0) } ?? AES.GCM.Nonce()
        // Sealing with a valid key and a 12-byte nonce cannot fail.
        let box = try! AES.GCM.seal(Data(text.utf8), using: key, nonce: gcmNonce, authenticating: Data(room.utf8))
        return box.combined!.base64URLEncoded()
    }

    /// Opens a sealed payload; nil when it was not sealed under this key
    /// for this room, or was altered.
    public func open(text data: String) -> String? {
        guard let bytes = Data(base64URLEncoded: data), bytes.count >= 28,
            let box = try? AES.GCM.SealedBox(combined: bytes),
            let plain = try? AES.GCM.open(box, using: key, authenticating: Data(room.utf8))
        else { return nil }
        return String(decoding: plain, as: UTF8.self)
    }
}
