import Foundation
public import RallyWire

/// `rally.dev/vault_invitation:1.0`: the interactive invitation an owner
/// sends a nominee ("🔐 Vault Invitation", Accept / Decline).
public struct VaultInvitationCodec: ContentCodec {
    public static let contentType = ContentTypeID(authority: "rally.dev", type: "vault_invitation", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    public init() {}

    public func encode(_ value: WireVaultInvitation) throws(ContentError) -> WireEncodedContent {
        NomineeContent.encode(FrameCodec.encode(value), type: contentType, fallback: fallback(for: value))
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> WireVaultInvitation {
        try ContentError.decoding(contentType) { () throws(FrameDecodingError) in
            try FrameCodec.decode(WireVaultInvitation.self, from: content.content, limit: WireLimits.maxPayloadBytes)
        }
    }

    public func fallback(for value: WireVaultInvitation) -> String? {
        "🔐 Vault Invitation: \"\(value.vaultName)\". Open it in Rally to accept or decline."
    }

    public func shouldPush(_ value: WireVaultInvitation) -> Bool { true }

    public func summary(of value: WireVaultInvitation) -> String {
        "🔐 Vault Invitation: \"\(value.vaultName)\" (see `rally nominee invitations`)"
    }
}

/// `rally.dev/vault_invitation_response:1.0`: a nominee's Accept or
/// Decline, with the token.
public struct VaultInvitationResponseCodec: ContentCodec {
    public static let contentType = ContentTypeID(
        authority: "rally.dev", type: "vault_invitation_response", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    public init() {}

    public func encode(_ value: WireVaultInvitationResponse) throws(ContentError) -> WireEncodedContent {
        NomineeContent.encode(FrameCodec.encode(value), type: contentType, fallback: fallback(for: value))
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> WireVaultInvitationResponse {
        try ContentError.decoding(contentType) { () throws(FrameDecodingError) in
            try FrameCodec.decode(
                WireVaultInvitationResponse.self, from: content.content, limit: WireLimits.maxPayloadBytes)
        }
    }

    public func fallback(for value: WireVaultInvitationResponse) -> String? {
        value.decision == .accept ? "✅ Vault Access Accepted" : "Vault invitation declined"
    }

    public func shouldPush(_ value: WireVaultInvitationResponse) -> Bool { true }

    public func summary(of value: WireVaultInvitationResponse) -> String { fallback(for: value) ?? "" }
}

/// `rally.dev/vault_access:1.0`: the owner's answer — the invitation's
/// status, why an answer was refused, and the vault key once confirmed.
public struct VaultAccessCodec: ContentCodec {
    public static let contentType = ContentTypeID(authority: "rally.dev", type: "vault_access", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    public init() {}

    public func encode(_ value: WireVaultAccessUpdate) throws(ContentError) -> WireEncodedContent {
        NomineeContent.encode(FrameCodec.encode(value), type: contentType, fallback: fallback(for: value))
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> WireVaultAccessUpdate {
        try ContentError.decoding(contentType) { () throws(FrameDecodingError) in
            try FrameCodec.decode(WireVaultAccessUpdate.self, from: content.content, limit: WireLimits.maxPayloadBytes)
        }
    }

    public func fallback(for value: WireVaultAccessUpdate) -> String? {
        NomineeStatus(value.status).map { "Vault access: \($0.rawValue)" } ?? "Vault access update"
    }

    public func shouldPush(_ value: WireVaultAccessUpdate) -> Bool { true }

    public func summary(of value: WireVaultAccessUpdate) -> String { fallback(for: value) ?? "" }
}

enum NomineeContent {
    static func encode(_ bytes: Data, type: ContentTypeID, fallback: String?) -> WireEncodedContent {
        var content = WireEncodedContent()
        content.type = type.wire
        content.content = bytes
        if let fallback { content.fallback = fallback }
        content.shouldPush = true
        return content
    }
}

/// `rally.dev/vault_emergency_request:1.0`: a nominee tells the owner they
/// asked for emergency access, and when the relay releases it unless the
/// owner rejects.
public struct VaultEmergencyRequestCodec: ContentCodec {
    public static let contentType = ContentTypeID(
        authority: "rally.dev", type: "vault_emergency_request", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    public init() {}

    public func encode(_ value: WireVaultEmergencyRequest) throws(ContentError) -> WireEncodedContent {
        NomineeContent.encode(FrameCodec.encode(value), type: contentType, fallback: fallback(for: value))
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> WireVaultEmergencyRequest {
        try ContentError.decoding(contentType) { () throws(FrameDecodingError) in
            try FrameCodec.decode(
                WireVaultEmergencyRequest.self, from: content.content, limit: WireLimits.maxPayloadBytes)
        }
    }

    public func fallback(for value: WireVaultEmergencyRequest) -> String? {
        let releases = ISO8601DateFormatter().string(from: Date(milliseconds: value.releasesAtMs))
        return
            "🆘 Emergency access requested to vault \"\(value.vaultName)\": it is granted at \(releases) unless you reject it (rally nominee emergency reject)"
    }

    public func shouldPush(_ value: WireVaultEmergencyRequest) -> Bool { true }

    public func summary(of value: WireVaultEmergencyRequest) -> String { fallback(for: value) ?? "" }
}
