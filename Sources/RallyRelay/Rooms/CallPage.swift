import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The browser call client (Web/call/, embedded by scripts/embed-web.py):
/// one page, `call.html`, at `/call` (home) and `/call/<room>` (a call; the
/// same bytes for every room: the key is in the fragment, which browsers
/// never send),
/// `/call/assets/<file>` its modules and style. No inline script, no
/// third-party origin: the page may talk to this relay only.
enum CallPage {
    static let contentSecurityPolicy = [
        "default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
        "media-src 'self' blob: mediastream:", "img-src 'self' data:", "base-uri 'none'", "form-action 'none'",
        "frame-ancestors 'none'",
    ].joined(separator: "; ")

    static func headers(contentType: String) -> HTTPFields {
        [
            .contentType: contentType,
            .contentSecurityPolicy: contentSecurityPolicy,
            HTTPField.Name("Referrer-Policy")!: "no-referrer",
            HTTPField.Name("X-Content-Type-Options")!: "nosniff",
            HTTPField.Name("X-Frame-Options")!: "DENY",
            HTTPField.Name("Permissions-Policy")!: "camera=(self), microphone=(self), geolocation=()",
            HTTPField.Name("Cross-Origin-Opener-Policy")!: "same-origin",
            .cacheControl: "no-store",
        ]
    }

    /// For working on the page: with `RALLY_CALL_PAGE_DIR` set (to a copy
    /// of Web/call/), the relay reads the page's files from there on each
    /// request instead of the embedded copies. Only the embedded files'
    /// names are looked up, so nothing else in the directory is served.
    static let developmentDirectory = ProcessInfo.processInfo.environment["RALLY_CALL_PAGE_DIR"]

    static func response(_ name: String) -> Response {
        guard let file = CallPageAssets.files[name] else {
            return Response(status: .notFound, headers: headers(contentType: "text/plain; charset=utf-8"))
        }
        var text = file.text
        if let directory = developmentDirectory,
            let fresh = try? String(contentsOfFile: directory + "/" + name, encoding: .utf8)
        {
            text = fresh
        }
        return Response(
            status: .ok, headers: headers(contentType: file.contentType),
            body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func addRoutes(to router: Router<RelayRequestContext>) {
        // One page: its script shows home or the call by the address.
        router.get("/call") { _, _ in response("call.html") }
        router.get("/call/{room}") { _, _ in response("call.html") }
        router.get("/call/assets/{file}") { _, context in
            let name = context.parameters.get("file") ?? ""
            guard !name.hasSuffix(".html") else { return response("") }
            return response(name)
        }
    }
}
