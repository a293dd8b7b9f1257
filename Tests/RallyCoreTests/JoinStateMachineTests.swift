import Foundation
import RallyCore
import RallyCrypto
import RallyWire
import Testing

@Suite("JoinStateMachine")
struct JoinStateMachineTests {
    typealias Machine = JoinStateMachine
    typealias State = JoinStateMachine.State
    typealias Event = JoinStateMachine.Event

    static let inviter = InboxID(signingPublicKey: Data(repeating: 1, count: 32))
    static let stranger = InboxID(signingPublicKey: Data(repeating: 2, count: 32))
    static let tag = "00112233445566778899aabbccddeeff"
    static let otherTag = "ffeeddccbbaa99887766554433221100"
    static let summary = Machine.InviteSummary(tag: tag, inviterInbox: inviter, name: "Saturday climbing")
    static let expiredAt = Fixtures.date(ms: 1_767_000_000_000)
    static let sentAt = Fixtures.date(ms: 1_767_780_000_000)

    static func joinError(
        _ type: JoinErrorType = .conversationExpired, tag: String = tag, reason: String? = "gone"
    )
        -> InviteJoinError
    {
        InviteJoinError(errorType: type, inviteTag: tag, timestamp: sentAt, reason: reason)
    }

    // MARK: The table

    static let states: [(name: String, state: State)] = [
        ("uninitialized", .uninitialized),
        ("validating", .validating),
        ("validated", .validated(summary)),
        ("joining", .joining(summary)),
        ("awaitingApproval", .awaitingApproval(summary)),
        ("joined", .joined(groupID: "g-1", existing: false)),
        ("joinedExisting", .joined(groupID: "g-1", existing: true)),
        ("failedInvalid", .joinFailed(.invalidInvite(.expired(expiredAt)))),
        ("failedRejected", .joinFailed(.rejected(.singleUseConsumed, reason: nil))),
        ("cancelled", .cancelled),
    ]

    static let events: [(name: String, event: Event)] = [
        ("validate", .validate),
        ("validationSucceeded", .validationSucceeded(summary)),
        ("validationFailed", .validationFailed(.invalidSignature)),
        ("requestSent", .requestSent),
        ("approvalPending", .approvalPending(tag: tag, from: inviter)),
        ("approvalPendingOtherTag", .approvalPending(tag: otherTag, from: inviter)),
        ("approvalPendingStranger", .approvalPending(tag: tag, from: stranger)),
        ("welcome", .welcomeReceived(tag: tag, groupID: "g-2", from: inviter)),
        ("welcomeFromAnotherAdmin", .welcomeReceived(tag: tag, groupID: "g-2", from: stranger)),
        ("welcomeOtherTag", .welcomeReceived(tag: otherTag, groupID: "g-2", from: inviter)),
        ("alreadyMember", .alreadyMember(groupID: "g-3")),
        ("error", .errorReceived(joinError(), from: inviter)),
        ("errorOtherTag", .errorReceived(joinError(tag: otherTag), from: inviter)),
        ("errorStranger", .errorReceived(joinError(), from: stranger)),
        ("errorOtherTagStranger", .errorReceived(joinError(tag: otherTag), from: stranger)),
        ("cancel", .cancel),
        ("reset", .reset),
    ]

    enum Expected: Equatable {
        case moves(to: State)
        case ignored(Machine.Ignored)
    }

    static let rejected = State.joinFailed(.rejected(.conversationExpired, reason: "gone"))

    /// Every transition that changes the state. Events not listed for a
    /// state are ignored: `.alreadyFinal` in a final state, otherwise
    /// `.notApplicable`.
    static let transitions: [String: [String: Expected]] = [
        "uninitialized": [
            "validate": .moves(to: .validating)
        ],
        "validating": [
            "validationSucceeded": .moves(to: .validated(summary)),
            "validationFailed": .moves(to: .joinFailed(.invalidInvite(.invalidSignature))),
            "cancel": .moves(to: .cancelled),
        ],
        "validated": [
            "requestSent": .moves(to: .joining(summary)),
            "alreadyMember": .moves(to: .joined(groupID: "g-3", existing: true)),
            "error": .moves(to: rejected),
            "errorOtherTag": .ignored(.otherInviteTag),
            "errorStranger": .ignored(.notFromInviter),
            "errorOtherTagStranger": .ignored(.otherInviteTag),
            "cancel": .moves(to: .cancelled),
        ],
        "joining": [
            "approvalPending": .moves(to: .awaitingApproval(summary)),
            "approvalPendingOtherTag": .ignored(.otherInviteTag),
            "approvalPendingStranger": .ignored(.notFromInviter),
            "welcome": .moves(to: .joined(groupID: "g-2", existing: false)),
            // Any admin may admit; the welcome itself is checked when accepted.
            "welcomeFromAnotherAdmin": .moves(to: .joined(groupID: "g-2", existing: false)),
            "welcomeOtherTag": .ignored(.otherInviteTag),
            "alreadyMember": .moves(to: .joined(groupID: "g-3", existing: true)),
            "error": .moves(to: rejected),
            "errorOtherTag": .ignored(.otherInviteTag),
            "errorStranger": .ignored(.notFromInviter),
            "errorOtherTagStranger": .ignored(.otherInviteTag),
            "cancel": .moves(to: .cancelled),
        ],
        "awaitingApproval": [
            "welcome": .moves(to: .joined(groupID: "g-2", existing: false)),
            "welcomeFromAnotherAdmin": .moves(to: .joined(groupID: "g-2", existing: false)),
            "welcomeOtherTag": .ignored(.otherInviteTag),
            "error": .moves(to: rejected),
            "errorOtherTag": .ignored(.otherInviteTag),
            "errorStranger": .ignored(.notFromInviter),
            "errorOtherTagStranger": .ignored(.otherInviteTag),
            "cancel": .moves(to: .cancelled),
        ],
        // A failed validation or a cancel can be retried with the same
        // link; a rejection by the inviter cannot (ask for a new invite).
        "failedInvalid": ["validate": .moves(to: .validating)],
        "cancelled": ["validate": .moves(to: .validating)],
    ]

    static func expected(state: String, event: String, isFinal: Bool) -> Expected {
        if event == "reset" { return .moves(to: .uninitialized) }
        if let listed = transitions[state]?[event] { return listed }
        return .ignored(isFinal ? .alreadyFinal : .notApplicable)
    }

    @Test func everyStateEventPair() {
        var pairs = 0
        for (stateName, state) in Self.states {
            for (eventName, event) in Self.events {
                var machine = Machine(state: state)
                let ignored = machine.apply(event)
                switch Self.expected(state: stateName, event: eventName, isFinal: state.isFinal) {
                case .moves(let next):
                    #expect(ignored == nil, "\(stateName) + \(eventName)")
                    #expect(machine.state == next, "\(stateName) + \(eventName)")
                case .ignored(let reason):
                    #expect(ignored == reason, "\(stateName) + \(eventName)")
                    #expect(machine.state == state, "\(stateName) + \(eventName) must not change the state")
                }
                pairs += 1
            }
        }
        #expect(pairs == 170)
        // The table only names states and events that exist.
        let stateNames = Set(Self.states.map(\.name))
        let eventNames = Set(Self.events.map(\.name))
        for (state, row) in Self.transitions {
            #expect(stateNames.contains(state))
            #expect(Set(row.keys).isSubset(of: eventNames), "\(state)")
        }
    }

    /// Fails to compile when a state or event is added, so the table above
    /// is revisited.
    @Test func tableCoversEveryCase() {
        func kind(_ state: State) -> String {
            switch state {
            case .uninitialized: "uninitialized"
            case .validating: "validating"
            case .validated: "validated"
            case .joining: "joining"
            case .awaitingApproval: "awaitingApproval"
            case .joined: "joined"
            case .joinFailed: "joinFailed"
            case .cancelled: "cancelled"
            }
        }
        func kind(_ event: Event) -> String {
            switch event {
            case .validate: "validate"
            case .validationSucceeded: "validationSucceeded"
            case .validationFailed: "validationFailed"
            case .requestSent: "requestSent"
            case .approvalPending: "approvalPending"
            case .welcomeReceived: "welcomeReceived"
            case .alreadyMember: "alreadyMember"
            case .errorReceived: "errorReceived"
            case .cancel: "cancel"
            case .reset: "reset"
            }
        }
        #expect(Set(Self.states.map { kind($0.state) }).count == 8)
        #expect(Set(Self.events.map { kind($0.event) }).count == 10)
    }

    @Test func finalStates() {
        let finals = Self.states.filter { $0.state.isFinal }.map(\.name)
        #expect(finals == ["joined", "joinedExisting", "failedInvalid", "failedRejected", "cancelled"])
        #expect(Machine().state == .uninitialized)
    }

    // MARK: Scenarios

    @Test func happyPath() {
        var machine = Machine()
        #expect(machine.apply(.validate) == nil)
        #expect(machine.state == .validating)
        #expect(machine.apply(.validationSucceeded(Self.summary)) == nil)
        #expect(machine.state == .validated(Self.summary))
        #expect(machine.apply(.requestSent) == nil)
        #expect(machine.state == .joining(Self.summary))
        #expect(machine.apply(.welcomeReceived(tag: Self.tag, groupID: "g-9", from: Self.inviter)) == nil)
        #expect(machine.state == .joined(groupID: "g-9", existing: false))
        #expect(machine.state.isFinal)
    }

    @Test func approvalThenWelcome() {
        var machine = Machine(state: .joining(Self.summary))
        #expect(machine.apply(.approvalPending(tag: Self.tag, from: Self.inviter)) == nil)
        #expect(machine.state == .awaitingApproval(Self.summary))
        #expect(!machine.state.isFinal)
        // A repeated notice changes nothing.
        #expect(machine.apply(.approvalPending(tag: Self.tag, from: Self.inviter)) == .notApplicable)
        #expect(machine.apply(.welcomeReceived(tag: Self.tag, groupID: "g-9", from: Self.stranger)) == nil)
        #expect(machine.state == .joined(groupID: "g-9", existing: false))
    }

    @Test func validationFailureIsAnInvalidInvite() {
        var machine = Machine(state: .validating)
        #expect(machine.apply(.validationFailed(.expired(Self.expiredAt))) == nil)
        #expect(machine.state == .joinFailed(.invalidInvite(.expired(Self.expiredAt))))
    }

    @Test func errorsForAnotherInviteOrFromSomeoneElseAreDropped() {
        var machine = Machine(state: .joining(Self.summary))
        #expect(
            machine.apply(.errorReceived(Self.joinError(tag: Self.otherTag), from: Self.inviter)) == .otherInviteTag)
        #expect(machine.state == .joining(Self.summary))
        #expect(machine.apply(.errorReceived(Self.joinError(), from: Self.stranger)) == .notFromInviter)
        #expect(machine.state == .joining(Self.summary))
        // Tags are compared exactly.
        let shouted = Self.joinError(tag: Self.tag.uppercased())
        #expect(machine.apply(.errorReceived(shouted, from: Self.inviter)) == .otherInviteTag)
        #expect(machine.apply(.errorReceived(Self.joinError(.inviteRevoked, reason: nil), from: Self.inviter)) == nil)
        #expect(machine.state == .joinFailed(.rejected(.inviteRevoked, reason: nil)))
    }

    @Test func errorAfterCancellationOrJoiningIsDropped() {
        var machine = Machine(state: .awaitingApproval(Self.summary))
        #expect(machine.apply(.cancel) == nil)
        #expect(machine.state == .cancelled)
        #expect(machine.apply(.errorReceived(Self.joinError(), from: Self.inviter)) == .alreadyFinal)
        #expect(machine.state == .cancelled)

        var joined = Machine(state: .joining(Self.summary))
        joined.apply(.welcomeReceived(tag: Self.tag, groupID: "g-1", from: Self.inviter))
        #expect(joined.apply(.errorReceived(Self.joinError(), from: Self.inviter)) == .alreadyFinal)
        #expect(joined.state == .joined(groupID: "g-1", existing: false))
        // A second error after a first one is dropped too.
        var failed = Machine(state: .joining(Self.summary))
        failed.apply(.errorReceived(Self.joinError(.singleUseConsumed), from: Self.inviter))
        #expect(failed.apply(.errorReceived(Self.joinError(.genericFailure), from: Self.inviter)) == .alreadyFinal)
        #expect(failed.state == .joinFailed(.rejected(.singleUseConsumed, reason: "gone")))
    }

    @Test func welcomeForAnotherInviteIsIgnored() {
        for state in [State.joining(Self.summary), .awaitingApproval(Self.summary)] {
            var machine = Machine(state: state)
            #expect(
                machine.apply(.welcomeReceived(tag: Self.otherTag, groupID: "g-x", from: Self.inviter))
                    == .otherInviteTag)
            #expect(machine.state == state)
        }
    }

    @Test func alreadyMemberJoinsTheExistingGroup() {
        for state in [State.validated(Self.summary), .joining(Self.summary)] {
            var machine = Machine(state: state)
            #expect(machine.apply(.alreadyMember(groupID: "g-old")) == nil)
            #expect(machine.state == .joined(groupID: "g-old", existing: true))
        }
    }

    @Test func cancelFromEachNonFinalState() {
        for (name, state) in Self.states where !state.isFinal {
            var machine = Machine(state: state)
            let ignored = machine.apply(.cancel)
            if state == .uninitialized {
                #expect(ignored == .notApplicable)
                #expect(machine.state == .uninitialized)
            } else {
                #expect(ignored == nil, "\(name)")
                #expect(machine.state == .cancelled, "\(name)")
            }
        }
    }

    @Test func resetFromEveryState() {
        for (name, state) in Self.states {
            var machine = Machine(state: state)
            #expect(machine.apply(.reset) == nil, "\(name)")
            #expect(machine.state == .uninitialized, "\(name)")
            #expect(machine.apply(.validate) == nil, "\(name)")
            #expect(machine.state == .validating, "\(name)")
        }
    }

    @Test func revalidateAfterFailureOrCancel() {
        for state in [State.joinFailed(.invalidInvite(.truncated)), .cancelled] {
            var machine = Machine(state: state)
            #expect(machine.apply(.validate) == nil)
            #expect(machine.apply(.validationSucceeded(Self.summary)) == nil)
            #expect(machine.state == .validated(Self.summary))
        }
        // No retry after the inviter said no: only a reset (a new invite).
        var rejected = Machine(state: .joinFailed(.rejected(.conversationExpired, reason: nil)))
        #expect(rejected.apply(.validate) == .alreadyFinal)
        #expect(rejected.state == .joinFailed(.rejected(.conversationExpired, reason: nil)))
    }

    @Test func userMessages() {
        let expired = InviteError.expired(Self.expiredAt)
        #expect(Machine.JoinFailure.invalidInvite(expired).userMessage == expired.description)
        #expect(
            Machine.JoinFailure.invalidInvite(.invalidSignature).userMessage == InviteError.invalidSignature.description
        )
        let guidance = " Ask the person who invited you for a new invite."
        let expected: [JoinErrorType: String] = [
            .conversationExpired: "This conversation is no longer available." + guidance,
            .conversationNotFound: "This conversation is no longer available." + guidance,
            .inviteRevoked: "This invite is no longer valid." + guidance,
            .singleUseConsumed: "This invite was already used by someone else." + guidance,
            .genericFailure: "Failed to join conversation." + guidance,
            .requestRejected: "A moderator of the group declined your request to join.",
            .invitationRemoved: "This invitation was withdrawn." + guidance,
            .groupFull: "This group is full.",
        ]
        for type in JoinErrorType.allCases {
            #expect(Machine.JoinFailure.rejected(type, reason: "internal detail").userMessage == expected[type])
        }
    }

    /// From a real signed invite to a typed error decoded off the wire.
    @Test func endToEndWithARealInviteAndAWireError() throws {
        let invite = try Invite.verify(try InviteFixtures.signedInvite(), now: InviteFixtures.now)
        let summary = Machine.InviteSummary(
            tag: invite.tagText, inviterInbox: invite.issuer.inboxID, name: invite.payload.name)
        var machine = Machine()
        machine.apply(.validate)
        machine.apply(.validationSucceeded(summary))
        machine.apply(.requestSent)
        #expect(machine.state == .joining(summary))

        // A newer inviter client answers with a type this one does not know.
        let json = """
            {"errorType":"member_limit_reached","inviteTag":"\(invite.tagText)",\
            "timestamp":"2026-01-07T10:05:00.000Z","reason":"full"}
            """
        var content = WireEncodedContent()
        content.type = InviteJoinErrorCodec.contentType.wire
        content.content = Data(json.utf8)
        let error = try InviteJoinErrorCodec().decode(content)
        #expect(machine.apply(.errorReceived(error, from: invite.issuer.inboxID)) == nil)
        #expect(machine.state == .joinFailed(.rejected(.genericFailure, reason: "full")))
        guard case .joinFailed(let failure) = machine.state else { return }
        #expect(failure.userMessage == "Failed to join conversation. Ask the person who invited you for a new invite.")
    }

    @Test func inviteSummaryIsCodable() throws {
        let data = try JSONEncoder().encode(Self.summary)
        #expect(try JSONDecoder().decode(Machine.InviteSummary.self, from: data) == Self.summary)
    }
}
