/// A link Rally opens: an invite to join a group, or an invitation to be a
/// vault's nominee. ``DeepLinkRouter/parse(_:)`` makes one from pasted or
/// scanned text; ``url`` writes it back in its canonical form.
public enum DeepLink: Sendable, Equatable {
    /// `rally://join/<slug>` or one of the web forms of an invite. The slug
    /// decodes (``InviteSlug/decode(_:)``); its signature and expiry are
    /// checked by `RallyClient.startJoin`.
    case join(slug: String)
    /// `rally://nominee/invite?token=…&vault=…&status=…`.
    case nomineeInvite(NomineeInviteLink)

    /// The canonical link, which ``DeepLinkRouter/parse(_:)`` reads back as
    /// this value. A nominee link holds its token: treat it as a secret.
    public var url: String {
        switch self {
        case .join(let slug): "rally://join/\(slug)"
        case .nomineeInvite(let link): link.url
        }
    }
}

/// Where a nominee invitation stands, as the link that carries it says.
public enum NomineeLinkStatus: String, Sendable, CaseIterable {
    case pending, accepted, declined
}

/// `rally://nominee/invite?token=<token>&vault=<name>&status=<status>`: an
/// invitation to be a nominee of a vault.
///
/// ``url`` is the whole link, token included, and round-trips through
/// ``DeepLinkRouter/parse(_:)``. ``description`` hides the token, so
/// printing or logging a link never leaks it.
public struct NomineeInviteLink: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The longest vault name a link may carry, in UTF-8 bytes.
    public static let maxVaultNameBytes = VaultEntries.maxNameBytes

    public let token: NomineeToken
    public let vaultName: String
    public let status: NomineeLinkStatus

    /// - Throws: `.invalidVaultName` for a name no link could carry: empty,
    ///   longer than ``maxVaultNameBytes``, or with control or text-direction
    ///   characters.
    public init(
        token: NomineeToken, vaultName: String, status: NomineeLinkStatus = .pending
    )
        throws(DeepLinkError)
    {
        if let problem = Self.problem(withVaultName: vaultName) { throw .invalidVaultName(problem) }
        self.token = token
        self.vaultName = vaultName
        self.status = status
    }

    /// The link, with the vault name percent-encoded (everything but RFC
    /// 3986's unreserved characters, as UTF-8) and the status always written.
    ///
    /// The token comes last: it has a fixed length, so a link cut anywhere
    /// (a chat app's preview, a partial copy) fails to parse instead of
    /// reading as a shorter vault name or the default status.
    public var url: String {
        "rally://nominee/invite?vault=\(Self.percentEncoded(vaultName))&status=\(status.rawValue)&token=\(token.text)"
    }

    /// The link without its token.
    public var description: String {
        "rally://nominee/invite?vault=\(Self.percentEncoded(vaultName))&status=\(status.rawValue)&token=…"
    }

    public var debugDescription: String { "NomineeInviteLink(\(description))" }

    static func problem(withVaultName name: String) -> DeepLinkError.VaultNameProblem? {
        if name.isEmpty { return .empty }
        let bytes = name.utf8.count
        if bytes > maxVaultNameBytes { return .tooLong(bytes: bytes) }
        if name.unicodeScalars.contains(where: isControl) { return .controlCharacter }
        return nil
    }

    /// Controls (C0, DEL, C1), line and paragraph separators, and the marks,
    /// embeddings, overrides and isolates that reorder displayed text.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    static func percentEncoded(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count * 3)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.append(byte)
            default:
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0x0F)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Why text is not a link Rally can open. Each says what is wrong in words a
/// person can act on. Nothing from the text is echoed back longer than
/// ``maxEchoedCharacters`` Unicode scalars (controls replaced), and a
/// token's value is never echoed.
public enum DeepLinkError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong with a nominee token's text or bytes.
    public enum TokenProblem: Equatable, Sendable {
        /// The text is not ``NomineeToken/textLength`` characters long.
        case length(characters: Int)
        /// The bytes are not ``NomineeToken/byteCount`` long.
        case byteCount(Int)
        /// A character outside base64url (`A–Z a–z 0–9 - _`, no padding).
        case alphabet
        /// The last character has bits set that no 32-byte token produces.
        case nonCanonical
    }

    /// What is wrong with a vault name in a nominee link.
    public enum VaultNameProblem: Equatable, Sendable {
        case empty
        case tooLong(bytes: Int)
        case controlCharacter
    }

    /// The most an error repeats of the text it refuses.
    public static let maxEchoedCharacters = 40

    /// Nothing but whitespace.
    case empty
    /// Longer than ``DeepLinkRouter/maxLinkCharacters`` (UTF-8 bytes).
    case tooLong(Int)
    /// No `scheme:` at the start (a bare slug or token, or other text).
    case notALink
    /// A scheme other than `rally`, `https` or `http`.
    case unknownScheme(String)
    /// A `rally://` host or path, or a web path, that names no Rally link.
    case unknownLink(String)
    /// A `#…` part on a link that has none.
    case unexpectedFragment
    /// A parameter that is not `name=value` (an empty one, no `=`, no name).
    case malformedQuery(String)
    case missingParameter(String)
    case duplicateParameter(String)
    /// A parameter this link does not have. Unknown parameters are refused,
    /// never ignored: a link with one was changed or made by something else.
    case unknownParameter(String)
    /// A parameter's value has a `%` not followed by two hex digits, or
    /// decodes to bytes that are not UTF-8.
    case invalidPercentEncoding(parameter: String)
    case invalidToken(TokenProblem)
    case invalidStatus(String)
    case invalidVaultName(VaultNameProblem)
    /// An invite link whose invite cannot be extracted; the reason is one
    /// of ``InviteError``'s descriptions or says which form was expected.
    case invalidJoinLink(String)

    public var description: String {
        let forms = "rally://join/…, https://<host>/join#… or rally://nominee/invite?…"
        switch self {
        case .empty: return "the link is empty"
        case .tooLong(let bytes):
            return "the link is \(bytes) bytes long; links are at most \(DeepLinkRouter.maxLinkCharacters)"
        case .notALink: return "this is not a link: expected \(forms)"
        case .unknownScheme(let scheme): return "\"\(scheme):\" links are not Rally links: expected \(forms)"
        case .unknownLink(let what): return "\"\(what)\" is not a link Rally knows: expected \(forms)"
        case .unexpectedFragment:
            return "the link has a \"#…\" part that Rally links do not have: it was changed when copied"
        case .malformedQuery(let what): return "the link's parameters are malformed: \(what)"
        case .missingParameter(let name):
            return "the link has no \"\(name)\" parameter: it was probably cut when copied"
        case .duplicateParameter(let name): return "the link has the \"\(name)\" parameter more than once"
        case .unknownParameter(let name):
            return "the link has a parameter Rally does not know (\"\(name)\"); it was refused rather than ignored"
        case .invalidPercentEncoding(let name):
            return "the \"\(name)\" parameter has a broken %-escape or is not UTF-8 text"
        case .invalidToken(let problem):
            let why =
                switch problem {
                case .length(let characters):
                    "it has \(characters) characters, a token has \(NomineeToken.textLength): the link was probably cut when copied"
                case .byteCount(let count): "it is \(count) bytes, a token is \(NomineeToken.byteCount)"
                case .alphabet: "it has characters outside base64url: it was probably mistyped"
                case .nonCanonical: "its last character is not one a real token ends with: it was probably mistyped"
                }
            return "the nominee token is not valid: \(why)"
        case .invalidStatus(let status):
            let names = NomineeLinkStatus.allCases.map(\.rawValue).joined(separator: ", ")
            return "\"\(status)\" is not a nominee invite status: expected one of \(names)"
        case .invalidVaultName(let problem):
            return switch problem {
            case .empty: "the vault name is empty"
            case .tooLong(let bytes):
                "the vault name is \(bytes) bytes long; vault names are at most \(NomineeInviteLink.maxVaultNameBytes)"
            case .controlCharacter: "the vault name contains control or text-direction characters"
            }
        case .invalidJoinLink(let reason): return "this invite link cannot be used: \(reason)"
        }
    }

    /// `text` cut to ``maxEchoedCharacters`` scalars (with "…" when cut),
    /// controls and text-direction marks replaced by U+FFFD.
    static func echo<S: StringProtocol>(_ text: S) -> String {
        var result = String.UnicodeScalarView()
        for (index, scalar) in text.unicodeScalars.enumerated() {
            guard index < maxEchoedCharacters else {
                result.append("…")
                break
            }
            result.append(NomineeInviteLink.isControl(scalar) ? "\u{FFFD}" : scalar)
        }
        return String(result)
    }
}
