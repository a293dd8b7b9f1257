import Foundation
import HTTPTypes
import RallyWire

/// What `https://<relay>/join/<slug>` shows in a browser: the invite cannot
/// be used from a web page (joining needs the joiner's keys), so the page
/// hands the slug to the app (`rally://join/<slug>`) or to the CLI. The
/// relay does not decode the invite; it only checks the slug is base64url
/// of a sane length before echoing it.
enum JoinPage {
    enum Outcome: Equatable {
        case page(String)
        case badSlug(String)
    }

    /// The slug is a bearer credential for asking to join: never sent on
    /// as a referrer, never cached, and nothing on the page runs.
    static let headers: HTTPFields = [
        .contentType: "text/html; charset=utf-8",
        HTTPField.Name("Referrer-Policy")!: "no-referrer",
        .cacheControl: "no-store",
        .contentSecurityPolicy: "default-src 'none'; style-src 'unsafe-inline'",
        HTTPField.Name("X-Content-Type-Options")!: "nosniff",
    ]

    static func render(slug: String, host: String) -> Outcome {
        guard !slug.isEmpty else { return .badSlug("the link has no invite in it") }
        guard slug.utf8.count <= WireLimits.maxInviteSlugCharacters else {
            return .badSlug("the invite is longer than \(WireLimits.maxInviteSlugCharacters) characters")
        }
        guard slug.utf8.allSatisfy(isBase64URL) else {
            return .badSlug("the invite has characters outside base64url: it was probably cut or mistyped")
        }
        // Only base64url characters remain, so the slug needs no escaping.
        let webLink = "https://\(escape(host))/join/\(slug)"
        return .page(
            """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Join with Rally</title>
            <style>body{font-family:system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem;line-height:1.5}
            code{word-break:break-all;background:#f2f2f2;padding:.1rem .3rem}</style></head>
            <body><h1>You were invited to a conversation</h1>
            <p><a href="rally://join/\(slug)">Open the invite in Rally</a></p>
            <p>From a terminal: <code>rally join \(webLink)</code></p>
            <p>The invite is checked and the request sent end-to-end encrypted by your app; this relay cannot read it.</p>
            </body></html>
            """)
    }

    private static func isBase64URL(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default: false
        }
    }

    private static func escape(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
