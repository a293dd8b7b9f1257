public import Foundation
import RallyCrypto
public import RallyWire

/// Why an invite link or slug could not be used. Each is final for that
/// link: the joiner needs a new invite.
public enum InviteError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    case tooLong(characters: Int, limit: Int)
    case notAnInviteLink(String)
    case invalidEncoding
    case truncated
    case unsupportedVersion(UInt8)
    case unsupportedCompression(UInt8)
    case decompressionBomb(limit: Int)
    case corruptCompression
    case malformed(String)
    case invalidSignature
    case expired(Date)

    public var description: String {
        switch self {
        case .empty: "the invite is empty"
        case .tooLong(let characters, let limit):
            "the invite is \(characters) characters long; invites are at most \(limit)"
        case .notAnInviteLink(let text): "\"\(text.prefix(80))\" is not a Rally invite link"
        case .invalidEncoding: "the invite has characters outside base64url: it was probably cut or mistyped"
        case .truncated: "the invite is incomplete: it was probably cut when copied"
        case .unsupportedVersion(let version):
            "the invite was made by a newer version of Rally (format \(version)); update to join"
        case .unsupportedCompression(let kind): "the invite uses an unknown compression (\(kind))"
        case .decompressionBomb(let limit): "the invite expands beyond \(limit) bytes and was refused"
        case .corruptCompression: "the invite is damaged (its compressed data is corrupt)"
        case .malformed(let what): "the invite is damaged (\(what))"
        case .invalidSignature: "the invite's signature is not valid: it was altered or forged"
        case .expired(let date):
            "this invite expired on \(ISO8601DateFormatter().string(from: date)); ask for a new one"
        }
    }
}

/// The text form of a signed invite: URL-safe base64 (no padding) of one
/// header byte and the serialized `SignedInvite`, deflated when that is
/// shorter. Hard limits apply before any parsing or inflating.
public enum InviteSlug {
    /// Format version in the header's high nibble.
    public static let version: UInt8 = 1
    public static let maxCharacters = WireLimits.maxInviteSlugCharacters
    /// Largest signed invite after inflating; a real one is well under 2 KiB.
    public static let maxInflatedBytes = 8 * 1024

    enum Compression: UInt8 {
        case none = 0
        case deflate = 1
    }

    public static func encode(_ invite: WireSignedInvite) -> String {
        let raw = FrameCodec.encode(invite)
        let packed = Deflate.compress(raw, format: .raw)
        var bytes = Data()
        if !packed.isEmpty, packed.count < raw.count {
            bytes.append(version << 4 | Compression.deflate.rawValue)
            bytes.append(packed)
        } else {
            bytes.append(version << 4 | Compression.none.rawValue)
            bytes.append(raw)
        }
        return bytes.base64URLEncoded()
    }

    /// Decodes a slug into a signed invite; does not check the signature
    /// (see `Invite.verify`).
    public static func decode(_ slug: String) throws(InviteError) -> WireSignedInvite {
        guard !slug.isEmpty else { throw .empty }
        guard slug.utf8.count <= maxCharacters else {
            throw .tooLong(characters: slug.utf8.count, limit: maxCharacters)
        }
        guard let bytes = Data(base64URLEncoded: slug) else { throw .invalidEncoding }
        guard let header = bytes.first, bytes.count > 1 else { throw .truncated }
        guard header >> 4 == version else { throw .unsupportedVersion(header >> 4) }
        let body = bytes.dropFirst()
        let raw: Data
        switch Compression(rawValue: header & 0x0F) {
        case .none?:
            raw = Data(body)
        case .deflate?:
            do {
                raw = try Deflate.decompress(Data(body), format: .raw, limit: maxInflatedBytes)
            } catch .exceedsLimit(let limit) {
                throw .decompressionBomb(limit: limit)
            } catch .truncated {
                throw .truncated
            } catch {
                throw .corruptCompression
            }
        case nil:
            throw .unsupportedCompression(header & 0x0F)
        }
        do {
            let invite = try FrameCodec.decode(WireSignedInvite.self, from: raw, limit: maxInflatedBytes)
            guard !invite.payload.isEmpty, !invite.signature.isEmpty else { throw InviteError.truncated }
            return invite
        } catch let error as InviteError {
            throw error
        } catch {
            throw .malformed("not a signed invite")
        }
    }
}

/// Invite links: `rally://join/<slug>`, `https://<host>/join#<slug>` (the
/// slug in the fragment, which browsers never send to the relay), the older
/// `https://<host>/join/<slug>`, or the bare slug.
public enum InviteLink {
    /// The app link, and the web link on the relay's own origin (where the
    /// relay serves a page that hands the invite on): `https://<host>` for
    /// an https or wss relay, `http://` for a plain one, with its port.
    public static func links(for slug: String, relayURL: URL) -> (app: String, web: String) {
        var components = URLComponents()
        let scheme = relayURL.scheme?.lowercased()
        components.scheme = scheme == "http" || scheme == "ws" ? "http" : "https"
        components.host = relayURL.host.flatMap { $0.isEmpty ? nil : $0 } ?? "localhost"
        components.port = relayURL.port
        let origin = components.string ?? "https://localhost"
        return ("rally://join/\(slug)", "\(origin)/join#\(slug)")
    }

    /// Extracts the slug from a link or returns the text if it is a bare
    /// slug. Whitespace around it (from copy and paste) is ignored.
    public static func slug(from text: String) throws(InviteError) -> String {
        let slash = UInt8(ascii: "/")
        let question = UInt8(ascii: "?")
        let hash = UInt8(ascii: "#")
        // Pasted text often has no surrounding whitespace: skip the
        // Foundation trim (a string search) when the ends are plain.
        let plainEnds =
            text.utf8.first.map { $0 > 0x20 && $0 < 0x7F } == true
            && text.utf8.last.map { $0 > 0x20 && $0 < 0x7F } == true
        let trimmed = plainEnds ? text : text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw .empty }
        guard trimmed.utf8.count <= InviteSlug.maxCharacters + 512 else {
            throw .tooLong(characters: trimmed.utf8.count, limit: InviteSlug.maxCharacters)
        }
        if trimmed.hasPrefix("rally://join/") {
            let slug = String(trimmed.dropFirst("rally://join/".count))
            guard !slug.isEmpty, !slug.utf8.contains(where: { $0 == slash || $0 == question || $0 == hash }) else {
                throw .notAnInviteLink(trimmed)
            }
            return slug
        }
        if trimmed.hasPrefix("https://") || trimmed.hasPrefix("http://") {
            guard let url = URLComponents(string: trimmed) else { throw .notAnInviteLink(trimmed) }
            if url.path == "/join" {
                guard let slug = url.fragment, !slug.isEmpty,
                    !slug.utf8.contains(where: { $0 == slash || $0 == question || $0 == hash })
                else { throw .notAnInviteLink(trimmed) }
                return slug
            }
            guard url.path.hasPrefix("/join/") else { throw .notAnInviteLink(trimmed) }
            let slug = String(url.path.dropFirst("/join/".count))
            guard !slug.isEmpty, !slug.utf8.contains(slash) else { throw .notAnInviteLink(trimmed) }
            return slug
        }
        // A bare slug: no "/" (and so no "://").
        guard !trimmed.utf8.contains(slash) else { throw .notAnInviteLink(trimmed) }
        return trimmed
    }
}
