import Foundation
import RallyCrypto
import RallyWire

/// A nominee's status (ADR 0015): pending → accepted → active, or
/// declined, revoked, expired.
public enum NomineeStatus: String, Sendable, Codable, CaseIterable {
    case pending, accepted, active, declined, revoked, expired

    init?(_ wire: WireNomineeStatus) {
        switch wire {
        case .pending: self = .pending
        case .accepted: self = .accepted
        case .active: self = .active
        case .declined: self = .declined
        case .revoked: self = .revoked
        case .expired: self = .expired
        case .unspecified, .UNRECOGNIZED: return nil
        }
    }

    var wire: WireNomineeStatus {
        switch self {
        case .pending: .pending
        case .accepted: .accepted
        case .active: .active
        case .declined: .declined
        case .revoked: .revoked
        case .expired: .expired
        }
    }

    /// How the invitation's message reads with this status (the seed's
    /// "🔐 Vault Invitation" and "✅ Vault Access Accepted").
    public var invitationTitle: String {
        switch self {
        case .pending: "🔐 Vault Invitation"
        case .accepted, .active: "✅ Vault Access Accepted"
        case .declined: "Vault Invitation Declined"
        case .revoked: "Vault Invitation Revoked"
        case .expired: "Vault Invitation Expired"
        }
    }

    /// No answer changes it any more.
    var isFinal: Bool { self == .declined || self == .revoked || self == .expired }
}

/// The owner's rules for a nominee's answer: pure, so every refusal the
/// issue names is decided in one place and tested without a relay.
enum NomineeRules {
    /// What the owner does with one answer.
    enum Outcome: Equatable {
        /// The answer is taken: the nominee's status becomes this.
        case moved(to: NomineeStatus)
        /// The answer is refused; the status stays (or, for an invitation
        /// whose time ran out, becomes expired) and the sender is told why.
        case refused(reason: String, status: NomineeStatus)
    }

    struct Nominee: Equatable {
        var inbox: String
        var tokenHash: Data
        var status: NomineeStatus
        var expiresAtMs: Int64
    }

    static func answer(
        _ response: WireVaultInvitationResponse, from sender: String, to nominee: Nominee, nowMs: Int64
    ) -> Outcome {
        // Checked in this order: a wrong token says nothing about the
        // invitation; a stranger learns only that it is not theirs.
        guard constantTimeEqual(NomineeToken.hash(of: response.token), nominee.tokenHash) else {
            return .refused(reason: Refusal.wrongToken, status: nominee.status)
        }
        guard sender == nominee.inbox else {
            return .refused(reason: Refusal.otherIdentity, status: nominee.status)
        }
        switch nominee.status {
        case .revoked: return .refused(reason: Refusal.revoked, status: .revoked)
        case .expired: return .refused(reason: Refusal.expired, status: .expired)
        case .declined: return .refused(reason: Refusal.declined, status: .declined)
        case .accepted, .active: return .refused(reason: Refusal.used, status: nominee.status)
        case .pending:
            guard nowMs <= nominee.expiresAtMs else { return .refused(reason: Refusal.expired, status: .expired) }
            switch response.decision {
            case .accept: return .moved(to: .accepted)
            case .decline: return .moved(to: .declined)
            case .unspecified, .UNRECOGNIZED: return .refused(reason: Refusal.noDecision, status: .pending)
            }
        }
    }

    /// The texts a refused nominee sees.
    enum Refusal {
        static let wrongToken = "This is not the invitation's token; the link may be damaged."
        static let otherIdentity =
            "This invitation was sent to someone else; a vault invitation works only for the person it was sent to."
        static let revoked = "The owner revoked this invitation."
        static let expired = "This invitation expired. Ask the owner for a new one."
        static let declined = "This invitation was declined."
        static let used = "This invitation was already used."
        static let noDecision = "The answer says neither accept nor decline."
    }

    static func constantTimeEqual(_ a: Data, _ b: Data) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }
}

extension NomineeToken {
    /// The hash of a token's bytes, whatever their length (a response may
    /// carry anything).
    static func hash(of bytes: Data) -> Data {
        (try? NomineeToken(bytes: bytes).hash) ?? Data()
    }
}
