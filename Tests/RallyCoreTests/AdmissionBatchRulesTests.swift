import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// The rules of one commit that admits several joiners (`AddMembers`):
/// each entry holds as its single form would on the state the entries
/// before it leave, and one entry that fails refuses the whole commit.
@Suite("Admission batch rules")
struct AdmissionBatchRulesTests {
    typealias T = GroupTest
    typealias W = InviteGroupWorld

    static func entry(
        _ joiner: PublicIdentity, role: GroupRole = .member, inviteID: Data, tag: Data, maxUses: UInt32,
        requestID: Data
    ) -> WireAddMember {
        guard
            case .addMember(let add) = W.admit(
                joiner, as: role, inviteID: inviteID, tag: tag, maxUses: maxUses, requestID: requestID)
        else { preconditionFailure("W.admit builds an AddMember") }
        return add
    }

    static func pending(_ joiner: PublicIdentity, inviteID: Data, tag: Data, requestID: Data) -> WireAddPending {
        var pending = WireAddPending()
        let add = entry(joiner, inviteID: inviteID, tag: tag, maxUses: 0, requestID: requestID)
        pending.member = add.member
        pending.role = add.role
        pending.viaInvite = add.viaInvite
        return pending
    }

    static func batch(_ members: [WireAddMember], pending: [WireAddPending] = []) -> WireGroupCommit.OneOf_Action {
        var batch = WireAddMembers()
        batch.members = members
        batch.pending = pending
        return .addMembers(batch)
    }

    /// Joiners who are not members of the world's group.
    static func joiners(_ count: Int) -> [Identity] { (0..<count).map { T.identity("joiner \($0)") } }

    @Test func aBatchAdmitsEveryJoinerInOneEpochAndCountsEachUse() throws {
        let w = try W()
        let people = Self.joiners(5)
        let waiting = T.identity("waits")
        let action = Self.batch(
            people.enumerated().map { index, joiner in
                Self.entry(
                    joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0,
                    requestID: W.id(0xB0 + UInt8(index)))
            },
            pending: [Self.pending(waiting.publicIdentity, inviteID: W.id(2), tag: w.tag, requestID: W.id(0xC0))])
        var state = w.state
        let outcome = try state.apply(w.commit(action, by: w.admin), signedBy: w.admin)
        guard case .applied(let effects) = outcome else {
            Issue.record("expected the batch to apply, got \(outcome)")
            return
        }
        #expect(state.epoch == w.state.epoch + 1)
        #expect(state.members.count == w.state.members.count + people.count)
        for joiner in people {
            #expect(
                state.members[joiner.inboxID]
                    == GroupMember(identity: joiner.publicIdentity, role: .member, addedBy: w.admin.inboxID))
            #expect(effects.contains(.memberAdded(joiner.inboxID, .member)))
        }
        #expect(state.pending[waiting.inboxID]?.joinRequestID == W.id(0xC0))
        #expect(effects.contains(.pendingAdded(waiting.inboxID)))
        #expect(state.inviteUses == [W.id(1): 5, W.id(2): 1])
        #expect(state.admittedJoinRequests.count == 6)
    }

    @Test func aSingleUseInviteNamedTwiceInABatchRefusesTheCommit() throws {
        let w = try W()
        let people = Self.joiners(2)
        let action = Self.batch(
            people.enumerated().map { index, joiner in
                Self.entry(
                    joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 1,
                    requestID: W.id(0xB0 + UInt8(index)))
            })
        var state = w.state
        #expect(try state.apply(w.commit(action, by: w.admin), signedBy: w.admin) == .rejected(.inviteUsedUp))
        #expect(state == w.state)
    }

    @Test(arguments: [1, 3, 4])
    func aUseLimitHoldsInsideABatch(_ maxUses: UInt32) throws {
        let w = try W()
        let people = Self.joiners(4)
        func action(_ count: Int) -> WireGroupCommit.OneOf_Action {
            Self.batch(
                people.prefix(count).enumerated().map { index, joiner in
                    Self.entry(
                        joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: maxUses,
                        requestID: W.id(0xB0 + UInt8(index)))
                })
        }
        // Exactly the limit applies; one more than it is refused whole.
        let applied = try w.applying(action(Int(maxUses)), by: w.admin)
        #expect(applied.inviteUses[W.id(1)] == maxUses)
        if maxUses < 4 {
            var state = w.state
            #expect(
                try state.apply(w.commit(action(Int(maxUses) + 1), by: w.admin), signedBy: w.admin)
                    == .rejected(.inviteUsedUp))
            #expect(state == w.state)
        }
    }

    @Test func theSameJoinerOrRequestTwiceInABatchRefusesTheCommit() throws {
        let w = try W()
        let jo = w.joiner.publicIdentity
        let twiceJoiner = Self.batch([
            Self.entry(jo, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xB1)),
            Self.entry(jo, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xB2)),
        ])
        let twiceRequest = Self.batch([
            Self.entry(jo, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xB1)),
            Self.entry(w.joiner2.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xB1)),
        ])
        let addedThenPending = Self.batch(
            [Self.entry(jo, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xB1))],
            pending: [Self.pending(jo, inviteID: W.id(1), tag: w.tag, requestID: W.id(0xB2))])
        let cases: [(WireGroupCommit.OneOf_Action, GroupRejection)] = [
            (twiceJoiner, .alreadyMember(w.joiner.inboxID)),
            (twiceRequest, .joinRequestAlreadyAdmitted),
            (addedThenPending, .alreadyMember(w.joiner.inboxID)),
        ]
        for (action, rejection) in cases {
            var state = w.state
            #expect(try state.apply(w.commit(action, by: w.admin), signedBy: w.admin) == .rejected(rejection))
            #expect(state == w.state)
        }
    }

    @Test func anEmptyAnOversizedOrAModeratorsBatchIsRefused() throws {
        let w = try W()
        let jo = Self.entry(w.joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xB1))
        let oversized = Self.batch(
            (0...GroupRules.maxAdmissionBatch).map { index in
                var add = jo
                add.viaInvite.joinRequestID = Data(repeating: UInt8(index % 256), count: 15) + [UInt8(index / 256)]
                return add
            })
        let cases: [(WireGroupCommit.OneOf_Action, Identity, GroupRejection)] = [
            (Self.batch([]), w.admin, .invalidTarget("the commit names no joiner")),
            (
                oversized, w.admin,
                .invalidTarget("a commit admits at most \(GroupRules.maxAdmissionBatch) joiners")
            ),
            (Self.batch([jo]), w.moderator, .insufficientRole(needed: .admin, actual: .moderator)),
        ]
        for (action, author, rejection) in cases {
            var state = w.state
            #expect(try state.apply(w.commit(action, by: author), signedBy: author) == .rejected(rejection))
            #expect(state == w.state)
        }
    }

    @Test func aBatchUnderARetiredTagOrForABannedInboxIsRefused() throws {
        let w = try W()
        let banned = try w.removing(w.member.inboxID, ban: true, by: w.admin)
        let action = Self.batch([
            Self.entry(w.joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xB1)),
            Self.entry(w.member.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xB2)),
        ])
        var state = banned
        #expect(
            try state.apply(w.commit(action, by: w.admin, on: banned), signedBy: w.admin)
                == .rejected(.banned(w.member.inboxID)))
        let rotated = try w.applying(W.rotate(w.newTag), by: w.admin)
        let old = Self.batch([
            Self.entry(w.joiner.publicIdentity, inviteID: W.id(1), tag: w.tag, maxUses: 0, requestID: W.id(0xB1))
        ])
        state = rotated
        #expect(
            try state.apply(w.commit(old, by: w.admin, on: rotated), signedBy: w.admin) == .rejected(.inviteRevoked))
    }
}
