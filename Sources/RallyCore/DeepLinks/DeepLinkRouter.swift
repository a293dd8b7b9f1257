import Foundation

/// Reads every link Rally opens, for the app's URL handler and `rally open`.
///
/// Accepted:
/// - `rally://join/<slug>`, `https://<host>/join#<slug>` and
///   `https://<host>/join/<slug>` (and `http://` for a local relay): the
///   slug is extracted by ``InviteLink/slug(from:)``, the same code
///   `RallyClient.startJoin` uses, so an invite link is accepted here
///   exactly when `rally join` accepts it (web links keep its tolerance of
///   a query such as `?utm_source=qr`). The slug must also be base64url
///   within ``InviteSlug/maxCharacters`` and decode
///   (``InviteSlug/decode(_:)``), so a link cut anywhere is refused rather
///   than read as a shorter invite; the signature and expiry are left to
///   `startJoin`. A bare slug is not a link and is refused.
/// - `rally://nominee/invite?token=<token>&vault=<name>&status=<status>`
///   in any parameter order. `token` and `vault` are required, `status`
///   defaults to `pending`. Values are percent-decoded (`+` is a plus, not a
///   space); names are matched exactly, without decoding. A parameter that
///   is unknown, repeated, or not `name=value` is refused, not ignored,
///   and so is a `#` part.
///
/// Case: the scheme (`RALLY://`, `HTTPS://`) and the `rally://` host
/// (`JOIN`, `Nominee`) are case-insensitive, as RFC 3986 has them; paths,
/// parameter names, slugs, tokens and status values are exact.
///
/// Only whitespace and line breaks around the text are ignored.
public enum DeepLinkRouter {
    /// The longest text ``parse(_:)`` reads, in UTF-8 bytes (whitespace
    /// around the link included). An invite link is at most
    /// ``InviteSlug/maxCharacters`` plus its prefix; a nominee link, at most
    /// about 900 bytes.
    public static let maxLinkCharacters = 8192

    /// - Throws: the ``DeepLinkError`` that says what is wrong, never any
    ///   other error.
    public static func parse(_ text: String) throws(DeepLinkError) -> DeepLink {
        let length = text.utf8.count
        guard length <= maxLinkCharacters else { throw .tooLong(length) }
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw .empty }
        let bytes = Array(trimmed.utf8)
        guard let colon = bytes.firstIndex(of: ascii(":")), isScheme(bytes[..<colon]) else { throw .notALink }
        let scheme = String(decoding: bytes[..<colon], as: UTF8.self).lowercased()
        guard ["rally", "http", "https"].contains(scheme) else {
            throw .unknownScheme(DeepLinkError.echo(String(decoding: bytes[..<colon], as: UTF8.self)))
        }
        let rest = bytes[(colon + 1)...]
        guard rest.starts(with: [ascii("/"), ascii("/")]) else {
            throw .unknownLink(DeepLinkError.echo(String(decoding: rest, as: UTF8.self)))
        }
        let afterSlashes = rest.dropFirst(2)
        if scheme == "rally" { return try rallyLink(afterSlashes) }
        return try webJoinLink(scheme: scheme, afterSlashes)
    }

    // MARK: rally://

    private static func rallyLink(_ link: ArraySlice<UInt8>) throws(DeepLinkError) -> DeepLink {
        let authorityEnd = link.firstIndex { $0 == ascii("/") || $0 == ascii("?") || $0 == ascii("#") } ?? link.endIndex
        let host = String(decoding: link[..<authorityEnd], as: UTF8.self).lowercased()
        let remainder = link[authorityEnd...]
        switch host {
        case "join":
            return .join(slug: try joinSlug("rally://join" + String(decoding: remainder, as: UTF8.self), web: false))
        case "nominee":
            return .nomineeInvite(try nomineeInvite(remainder))
        default:
            let pathEnd = link.firstIndex { $0 == ascii("?") || $0 == ascii("#") } ?? link.endIndex
            throw .unknownLink(DeepLinkError.echo(String(decoding: link[..<pathEnd], as: UTF8.self)))
        }
    }

    private static func nomineeInvite(_ remainder: ArraySlice<UInt8>) throws(DeepLinkError) -> NomineeInviteLink {
        guard !remainder.contains(ascii("#")) else { throw .unexpectedFragment }
        let queryStart = remainder.firstIndex(of: ascii("?"))
        let path = remainder[..<(queryStart ?? remainder.endIndex)]
        guard path.elementsEqual("/invite".utf8) else {
            throw .unknownLink(DeepLinkError.echo("nominee" + String(decoding: path, as: UTF8.self)))
        }
        var values: [String: ArraySlice<UInt8>] = [:]
        if let queryStart {
            for pair in remainder[(queryStart + 1)...].split(separator: ascii("&"), omittingEmptySubsequences: false) {
                guard !pair.isEmpty else { throw .malformedQuery("an empty parameter (\"&&\", or \"&\" at an end)") }
                guard let equals = pair.firstIndex(of: ascii("=")) else {
                    throw .malformedQuery("a parameter without \"=\"")
                }
                guard equals > pair.startIndex else { throw .malformedQuery("a parameter without a name") }
                let name = String(decoding: pair[..<equals], as: UTF8.self)
                guard ["token", "vault", "status"].contains(name) else {
                    throw .unknownParameter(DeepLinkError.echo(name))
                }
                guard values[name] == nil else { throw .duplicateParameter(name) }
                values[name] = pair[(equals + 1)...]
            }
        }
        guard let tokenValue = values["token"] else { throw .missingParameter("token") }
        guard let vaultValue = values["vault"] else { throw .missingParameter("vault") }
        let token = try NomineeToken(text: try percentDecoded(tokenValue, parameter: "token"))
        let vault = try percentDecoded(vaultValue, parameter: "vault")
        var status = NomineeLinkStatus.pending
        if let statusValue = values["status"] {
            let text = try percentDecoded(statusValue, parameter: "status")
            guard let known = NomineeLinkStatus(rawValue: text) else {
                throw .invalidStatus(DeepLinkError.echo(text))
            }
            status = known
        }
        return try NomineeInviteLink(token: token, vaultName: vault, status: status)
    }

    // MARK: Invite links

    private static func webJoinLink(scheme: String, _ link: ArraySlice<UInt8>) throws(DeepLinkError) -> DeepLink {
        let authorityEnd = link.firstIndex { $0 == ascii("/") || $0 == ascii("?") || $0 == ascii("#") } ?? link.endIndex
        let pathEnd = link[authorityEnd...].firstIndex { $0 == ascii("?") || $0 == ascii("#") } ?? link.endIndex
        let path = link[authorityEnd..<pathEnd]
        guard path.elementsEqual("/join".utf8) || path.starts(with: "/join/".utf8) else {
            throw .unknownLink(DeepLinkError.echo(String(decoding: link[..<pathEnd], as: UTF8.self)))
        }
        return .join(slug: try joinSlug(scheme + "://" + String(decoding: link, as: UTF8.self), web: true))
    }

    /// The slug by ``InviteLink/slug(from:)``, its errors said for a link,
    /// then held to the slug's alphabet and length and decoded (so a cut
    /// or damaged invite is refused here; its signature and expiry are
    /// `startJoin`'s to check).
    private static func joinSlug(_ link: String, web: Bool) throws(DeepLinkError) -> String {
        let slug: String
        do {
            slug = try InviteLink.slug(from: link)
        } catch .notAnInviteLink {
            throw .invalidJoinLink(
                web
                    ? "expected https://<host>/join#<invite> or https://<host>/join/<invite>"
                    : "expected rally://join/<invite> with nothing after the invite")
        } catch {
            throw .invalidJoinLink(error.description)
        }
        guard slug.utf8.count <= InviteSlug.maxCharacters else {
            throw .invalidJoinLink(
                InviteError.tooLong(characters: slug.utf8.count, limit: InviteSlug.maxCharacters).description)
        }
        guard slug.utf8.allSatisfy(isBase64URL) else { throw .invalidJoinLink(InviteError.invalidEncoding.description) }
        do {
            _ = try InviteSlug.decode(slug)
        } catch {
            throw .invalidJoinLink(error.description)
        }
        return slug
    }

    // MARK: Bytes

    private static func ascii(_ character: Unicode.Scalar) -> UInt8 { UInt8(character.value) }

    /// RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
    private static func isScheme(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard let first = bytes.first, isLetter(first) else { return false }
        return bytes.dropFirst().allSatisfy {
            isLetter($0) || isDigit($0) || $0 == ascii("+") || $0 == ascii("-") || $0 == ascii(".")
        }
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (ascii("A")...ascii("Z")).contains(byte) || (ascii("a")...ascii("z")).contains(byte)
    }

    private static func isDigit(_ byte: UInt8) -> Bool { (ascii("0")...ascii("9")).contains(byte) }

    private static func isBase64URL(_ byte: UInt8) -> Bool {
        isLetter(byte) || isDigit(byte) || byte == ascii("-") || byte == ascii("_")
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case ascii("0")...ascii("9"): byte - ascii("0")
        case ascii("A")...ascii("F"): byte - ascii("A") + 10
        case ascii("a")...ascii("f"): byte - ascii("a") + 10
        default: nil
        }
    }

    /// `%XX` (two hex digits) becomes its byte, everything else stays; the
    /// result must be UTF-8.
    private static func percentDecoded(_ value: ArraySlice<UInt8>, parameter: String) throws(DeepLinkError) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(value.count)
        var index = value.startIndex
        while index < value.endIndex {
            let byte = value[index]
            guard byte == ascii("%") else {
                bytes.append(byte)
                index += 1
                continue
            }
            guard index + 2 < value.endIndex, let high = hexValue(value[index + 1]),
                let low = hexValue(value[index + 2])
            else { throw .invalidPercentEncoding(parameter: parameter) }
            bytes.append(high << 4 | low)
            index += 3
        }
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.utf8.elementsEqual(bytes) else { throw .invalidPercentEncoding(parameter: parameter) }
        return text
    }
}
