import Crypto
import Foundation
import HTTPTypes
import RallyWire

/// What `https://<relay>/join#<slug>` shows in a browser. The invite is in
/// the URL fragment, which browsers never send: the relay serves one static
/// page and never sees the slug. A small inline script (allowed by its CSP
/// hash, nothing else runs) reads the fragment, checks it is base64url of a
/// sane length and offers the app link (`rally://join/<slug>`) and the CLI
/// command. The old form `/join/<slug>` gets the same static page (the
/// script falls back to the path); the relay does not echo or log the slug.
enum JoinPage {
    /// The whole script; its SHA-256 is the only script the CSP allows.
    static let script = """
        (function () {
          var max = \(WireLimits.maxInviteSlugCharacters);
          var slug = location.hash.length > 1 ? location.hash.slice(1) : "";
          if (!slug && location.pathname.indexOf("/join/") === 0) { slug = location.pathname.slice(6); }
          var ok = slug.length > 0 && slug.length <= max && /^[A-Za-z0-9_-]+$/.test(slug);
          document.getElementById(ok ? "invite" : "bad").hidden = false;
          if (!ok) { return; }
          document.getElementById("app").href = "rally://join/" + slug;
          document.getElementById("cli").textContent =
            "rally join " + location.origin + "/join#" + slug;
        })();
        """

    static let scriptHash: String = {
        "sha256-" + Data(SHA256.hash(data: Data(script.utf8))).base64EncodedString()
    }()

    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'unsafe-inline'; script-src '\(scriptHash)'; frame-ancestors 'none'; "
        + "base-uri 'none'; form-action 'none'"

    /// The slug is a bearer credential for asking to join: never sent on
    /// as a referrer, never cached, never framed.
    static let headers: HTTPFields = [
        .contentType: "text/html; charset=utf-8",
        HTTPField.Name("Referrer-Policy")!: "no-referrer",
        .cacheControl: "no-store",
        .contentSecurityPolicy: contentSecurityPolicy,
        HTTPField.Name("X-Content-Type-Options")!: "nosniff",
        HTTPField.Name("X-Frame-Options")!: "DENY",
    ]

    /// The page: the same bytes for every invite.
    static let html = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Join with Rally</title>
        <style>body{font-family:system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem;line-height:1.5}
        code{word-break:break-all;background:#f2f2f2;padding:.1rem .3rem}</style></head>
        <body><h1>You were invited to a conversation</h1>
        <div id="invite" hidden>
        <p><a id="app" href="rally://join/">Open the invite in Rally</a></p>
        <p>From a terminal: <code id="cli"></code></p>
        </div>
        <p id="bad" hidden>This is not a Rally invite link: the part after <code>#</code> is missing, too long, \
        or has characters outside base64url. It was probably cut or mistyped.</p>
        <p>What this relay can see: that someone opened a join page, from which IP address, and when. \
        The invite itself is after the <code>#</code> of the link, which your browser does not send, \
        so the relay never receives it. Your app checks the invite and sends the request to join \
        end-to-end encrypted.</p>
        <noscript><p>Without JavaScript this page cannot read the invite: copy the whole link \
        and run <code>rally join &lt;link&gt;</code>.</p></noscript>
        <script>\(script)</script>
        </body></html>
        """
}
