import Foundation

/// Every signature covers a domain prefix, so a signature made for one
/// purpose can never be replayed as another.
public enum SigningDomain: String, Sendable, CaseIterable {
    case relayAuth = "rally-auth-v1"
    case httpAuth = "rally-http-auth-v1"
    case keyBundle = "rally-keybundle-v1"
    case message = "rally-message-v1"
    case topicAccess = "rally-topic-access-v1"

    public func bytes(_ payload: Data) -> Data {
        var data = Data(rawValue.utf8)
        data.append(payload)
        return data
    }
}
