import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import RallyWire

/// The browser call client (Web/call/, embedded by scripts/embed-web.py):
/// `/call` is the home page, `/call/<room>` the call page (the same bytes
/// for every room: the key is in the fragment, which browsers never send),
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
        router.get("/call") { _, _ in response("home.html") }
        router.get("/call/{room}") { _, context in
            guard let room = context.parameters.get("room"), RoomWireLimits.isRoomID(room) else {
                return response("home.html")
            }
            return response("room.html")
        }
        router.get("/call/assets/{file}") { _, context in
            let name = context.parameters.get("file") ?? ""
            guard !name.hasSuffix(".html") else { return response("") }
            return response(name)
        }
    }
}
