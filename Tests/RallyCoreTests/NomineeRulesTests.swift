import Foundation
import RallyWire
import Testing

@testable import RallyCore

@Suite("NomineeRules: the owner's decision on an answer")
struct NomineeRulesTests {
    static let token = NomineeToken.random()
    static let invitee = "invitee"

    static func nominee(_ status: NomineeStatus, expiresAtMs: Int64 = 1_000) -> NomineeRules.Nominee {
        NomineeRules.Nominee(inbox: invitee, tokenHash: token.hash, status: status, expiresAtMs: expiresAtMs)
    }

    static func response(
        _ decision: WireVaultInvitationDecision, token: Data = Self.token.bytes
    )
        -> WireVaultInvitationResponse
    {
        var response = WireVaultInvitationResponse()
        response.invitationID = "i"
        response.token = token
        response.decision = decision
        return response
    }

    @Test("a pending invitation, answered in time by its invitee, moves to accepted or declined")
    func moves() {
        #expect(
            NomineeRules.answer(Self.response(.accept), from: Self.invitee, to: Self.nominee(.pending), nowMs: 1_000)
                == .moved(to: .accepted))
        #expect(
            NomineeRules.answer(Self.response(.decline), from: Self.invitee, to: Self.nominee(.pending), nowMs: 0)
                == .moved(to: .declined))
    }

    static let refusalCases:
        [(String, WireVaultInvitationResponse, String, NomineeStatus, Int64, NomineeRules.Outcome)] = [
            (
                "another identity", response(.accept), "stranger", .pending, 0,
                .refused(reason: NomineeRules.Refusal.otherIdentity, status: .pending)
            ),
            (
                "a wrong token", response(.accept, token: NomineeToken.random().bytes), invitee, .pending, 0,
                .refused(reason: NomineeRules.Refusal.wrongToken, status: .pending)
            ),
            (
                "a truncated token", response(.accept, token: token.bytes.prefix(31)), invitee, .pending, 0,
                .refused(reason: NomineeRules.Refusal.wrongToken, status: .pending)
            ),
            (
                "a replay after acceptance", response(.accept), invitee, .accepted, 0,
                .refused(reason: NomineeRules.Refusal.used, status: .accepted)
            ),
            (
                "a replay after confirmation", response(.decline), invitee, .active, 0,
                .refused(reason: NomineeRules.Refusal.used, status: .active)
            ),
            (
                "a revoked invitation", response(.accept), invitee, .revoked, 0,
                .refused(reason: NomineeRules.Refusal.revoked, status: .revoked)
            ),
            (
                "a declined invitation", response(.accept), invitee, .declined, 0,
                .refused(reason: NomineeRules.Refusal.declined, status: .declined)
            ),
            (
                "an expired invitation", response(.accept), invitee, .pending, 1_001,
                .refused(reason: NomineeRules.Refusal.expired, status: .expired)
            ),
            (
                "no decision", response(.unspecified), invitee, .pending, 0,
                .refused(reason: NomineeRules.Refusal.noDecision, status: .pending)
            ),
            (
                // A stranger with the right token cannot even learn it expired.
                "a stranger after expiry", response(.accept), "stranger", .pending, 5_000,
                .refused(reason: NomineeRules.Refusal.otherIdentity, status: .pending)
            ),
        ]

    @Test("each refusal names its reason and moves nothing", arguments: 0..<refusalCases.count)
    func refused(_ index: Int) {
        let (what, response, sender, status, now, expected) = Self.refusalCases[index]
        let outcome = NomineeRules.answer(response, from: sender, to: Self.nominee(status), nowMs: now)
        #expect(outcome == expected, "\(what)")
    }

    @Test("the invitation's title follows its status, in the seed's words")
    func titles() {
        #expect(NomineeStatus.pending.invitationTitle == "🔐 Vault Invitation")
        #expect(NomineeStatus.accepted.invitationTitle == "✅ Vault Access Accepted")
        #expect(NomineeStatus.active.invitationTitle == "✅ Vault Access Accepted")
    }
}
