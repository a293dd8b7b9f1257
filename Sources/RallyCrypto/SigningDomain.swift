public import Foundation

/// Every signature covers a domain prefix, so a signature made for one
/// purpose can never be replayed as another.
public enum SigningDomain: String, Sendable, CaseIterable {
    case relayAuth = "rally-auth-v2"
    case httpAuth = "rally-http-auth-v2"
    case keyBundle = "rally-keybundle-v1"
    case message = "rally-message-v1"
    case topicAccess = "rally-topic-access-v1"
    case vaultEntry = "rally-vault-entry-v1"

    public func bytes(_ payload: Data) -> Data {
        var data = Data(rawValue.utf8)
        data.append(payload)
        return data
    }
}

/// Length-prefixed concatenation (4-byte big-endian length before each
/// part), so no two lists of fields sign the same bytes.
public func lengthPrefixed(_ parts: [Data]) -> Data {
    var data = Data()
    for part in parts {
        var length = UInt32(clamping: part.count).bigEndian
        data.append(Data(bytes: &length, count: 4))
        data.append(part)
    }
    return data
}

/// The origin a relay is reached at, as signatures bind it: lowercase
/// `http://host:port` or `https://host[:port]` (443 left out). WebSocket
/// URLs map to their HTTP scheme (ws to http, wss to https).
public enum RelayOrigin {
    public static func of(_ url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else {
            return nil
        }
        let secure: Bool
        switch scheme {
        case "http", "ws": secure = false
        case "https", "wss": secure = true
        default: return nil
        }
        let hostPart = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        if secure {
            let port = url.port ?? 443
            return port == 443 ? "https://\(hostPart)" : "https://\(hostPart):\(port)"
        }
        return "http://\(hostPart):\(url.port ?? 80)"
    }

    public static func of(_ text: String) -> String? {
        URL(string: text).flatMap(of)
    }
}
