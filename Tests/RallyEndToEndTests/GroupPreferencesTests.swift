import Foundation
import RallyCrypto
import RallyTestSupport
import RallyTesting
import RallyWire
import Testing

@testable import RallyCore

/// Group preferences through a real relay: enforced by every member's
/// client at each message's position in the log.
@Suite("Group preferences through a real relay", .timeLimit(.minutes(3)))
struct GroupPreferencesTests {
    /// Olive owns "Hikers"; Max is a moderator and Ann a member, all on one
    /// manual clock.
    struct Trio {
        let world: GroupWorld
        let clock: ManualClock
        let owner: RallyClient
        let moderator: RallyClient
        let member: RallyClient
        let groupID: String

        static func start() async throws -> Trio {
            let world = try await GroupWorld.start()
            let clock = ManualClock()
            func user(_ name: String) async throws -> RallyClient {
                try await RallyClient.create(
                    home: world.homes.path(name), relayURL: world.relay.url, displayName: name,
                    logger: TestLogger.quiet, clock: clock.clientClock)
            }
            let owner = try await user("olive")
            let moderator = try await user("max")
            let member = try await user("ann")
            let group = try await owner.createGroup(name: "Hikers")
            _ = try await owner.addMember(moderator.inboxID, role: .moderator, to: group.groupID)
            _ = try await owner.addMember(member.inboxID, to: group.groupID)
            for client in [moderator, member] { try await catchUp(client, group.groupID) }
            return Trio(
                world: world, clock: clock, owner: owner, moderator: moderator, member: member,
                groupID: group.groupID)
        }

        var all: [RallyClient] { [owner, moderator, member] }
        func stop(_ others: [RallyClient] = []) async { await world.stop(all + others) }
    }

    static func reaction(to messageID: String) throws -> WireEncodedContent {
        try ReactionCodec().encode(Reaction(messageID: messageID, emoji: "👍"))
    }

    @Test(
        "reactions off (or above a member's role): the client refuses, and a client that sends one anyway is rejected by every member"
    )
    func reactionsAtTheirPosition() async throws {
        let t = try await Trio.start()
        let hello = try await t.owner.sendGroupText("Sunday at nine", to: t.groupID)
        // On by default: a reaction is a message like any other.
        _ = try await t.member.sendGroupReaction("👍", to: hello.id, in: t.groupID)
        try await catchUp(t.moderator, t.groupID)
        #expect(try await t.moderator.groupMessages(in: t.groupID).map(\.displayText).last == "reacted 👍")

        // Moderators and above only.
        _ = try await t.owner.setGroupPreferences(
            [.reactions: GroupPreference(enabled: true, minimumRole: .moderator)], in: t.groupID)
        try await catchUp(t.member, t.groupID)
        await #expect {
            try await t.member.sendGroupReaction("🎉", to: hello.id, in: t.groupID)
        } throws: { error in
            guard case RallyClientError.group(.notAllowedByPreference(.reactions, _)) = error else { return false }
            return "\(error)".contains("reactions need the role moderator or above")
        }
        _ = try await t.moderator.sendGroupReaction("🎉", to: hello.id, in: t.groupID)

        // Off: a client that ignores the preference publishes anyway; every
        // member rejects it at its place in the log.
        _ = try await t.owner.setGroupPreferences([.reactions: GroupPreference(enabled: false)], in: t.groupID)
        try await catchUp(t.moderator, t.groupID)
        await #expect(throws: RallyClientError.self) {
            try await t.moderator.sendGroupReaction("❌", to: hello.id, in: t.groupID)
        }
        // (Its own client does not take it back either: it never comes back
        // from the log as a message.)
        await #expect(throws: RallyClientError.self) {
            try await t.moderator.groupService.send(
                Self.reaction(to: hello.id), to: t.groupID, enforcingPreferences: false)
        }
        for client in [t.owner, t.member] {
            let report = try await catchUp(client, t.groupID)
            #expect(report.rejections.map(\.reason) == [.notAllowedByPreference(.reactions, t.moderator.inboxID)])
        }
        for client in t.all {
            let shown = try await client.groupMessages(in: t.groupID).map(\.displayText)
            #expect(shown.filter { $0.hasPrefix("reacted") } == ["reacted 👍", "reacted 🎉"], "\(shown)")
        }
        await t.stop()
    }

    @Test("timed messages disappear from every member's client when their time is up; earlier messages stay")
    func timedMessages() async throws {
        let t = try await Trio.start()
        _ = try await t.owner.sendGroupText("before", to: t.groupID)
        _ = try await t.owner.setGroupPreferences(
            [.timedMessages: GroupPreference(enabled: true, ttlSeconds: 60)], in: t.groupID)
        try await catchUp(t.member, t.groupID)
        _ = try await t.member.sendGroupText("this vanishes", to: t.groupID)
        for client in t.all { try await catchUp(client, t.groupID) }
        for client in t.all {
            #expect(try await client.groupMessages(in: t.groupID).map(\.displayText) == ["before", "this vanishes"])
        }
        t.clock.advance(by: .seconds(59))
        #expect(try await t.owner.groupMessages(in: t.groupID).count == 2)
        t.clock.advance(by: .seconds(2))
        for client in t.all {
            #expect(try await client.groupMessages(in: t.groupID).map(\.displayText) == ["before"])
        }
        // Turned off again: new messages stay.
        _ = try await t.owner.setGroupPreferences([.timedMessages: GroupPreference(enabled: false)], in: t.groupID)
        _ = try await t.owner.sendGroupText("after", to: t.groupID)
        t.clock.advance(by: .seconds(3600))
        #expect(try await t.owner.groupMessages(in: t.groupID).map(\.displayText) == ["before", "after"])
        await t.stop()
    }

    @Test(
        "history: visible, a newcomer gets the recent messages in its welcome; hidden, it gets none and no key to anything before it joined"
    )
    func history() async throws {
        let t = try await Trio.start()
        _ = try await t.owner.sendGroupText("route: north ridge", to: t.groupID)
        _ = try await t.member.sendGroupText("bring water", to: t.groupID)
        try await catchUp(t.owner, t.groupID)
        let dan = try await t.world.user("dan")
        _ = try await t.owner.addMember(dan.inboxID, to: t.groupID)
        try await catchUp(dan, t.groupID)
        #expect(try await dan.groupMessages(in: t.groupID).map(\.displayText) == ["route: north ridge", "bring water"])

        _ = try await t.owner.setGroupPreferences([.history: GroupPreference(enabled: false)], in: t.groupID)
        _ = try await t.owner.sendGroupText("secret plan", to: t.groupID)
        let before = try await t.owner.group(t.groupID).state.epoch
        let eve = try await t.world.user("eve")
        _ = try await t.owner.addMember(eve.inboxID, to: t.groupID)
        try await catchUp(eve, t.groupID)
        #expect(try await eve.groupMessages(in: t.groupID).isEmpty)
        // Eve holds the key of the epoch she was admitted in and none before.
        for epoch in 0...before { #expect(try eve.store.epochKey(group: t.groupID, epoch: epoch) == nil) }
        #expect(try eve.store.epochKey(group: t.groupID, epoch: before + 1) != nil)
        _ = try await t.owner.sendGroupText("welcome eve", to: t.groupID)
        try await catchUp(eve, t.groupID)
        #expect(try await eve.groupMessages(in: t.groupID).map(\.displayText) == ["welcome eve"])
        await t.stop([dan, eve])
    }

    @Test(
        "deleting a message: removed on every member's client with full deletion on, shown as deleted with it off; only its author or a moderator"
    )
    func messageDeletion() async throws {
        let t = try await Trio.start()
        let first = try await t.member.sendGroupText("oops, wrong group", to: t.groupID)
        let second = try await t.member.sendGroupText("also wrong", to: t.groupID)
        let owners = try await t.owner.sendGroupText("the owner's", to: t.groupID)
        for client in t.all { try await catchUp(client, t.groupID) }
        // Off by default: shown as deleted everywhere.
        try await t.member.deleteGroupMessage(first.id, in: t.groupID)
        // A member cannot delete someone else's.
        try await t.member.deleteGroupMessage(owners.id, in: t.groupID)
        for client in t.all {
            try await catchUp(client, t.groupID)
            #expect(
                try await client.groupMessages(in: t.groupID).map(\.displayText) == [
                    GroupService.deletedText, "also wrong", "the owner's",
                ])
        }
        // On: a moderator removes another member's message for everyone.
        _ = try await t.owner.setGroupPreferences([.fullDeletion: GroupPreference(enabled: true)], in: t.groupID)
        try await catchUp(t.moderator, t.groupID)
        try await t.moderator.deleteGroupMessage(second.id, in: t.groupID)
        for client in t.all {
            try await catchUp(client, t.groupID)
            #expect(
                try await client.groupMessages(in: t.groupID).map(\.displayText) == [
                    GroupService.deletedText, "the owner's",
                ])
        }
        await t.stop()
    }

    @Test(
        "direct messages between members: allowed by default; off, the sender's client refuses and a recipient drops one"
    )
    func directMessagesBetweenMembers() async throws {
        let t = try await Trio.start()
        _ = try await t.member.sendDirectToMember("see you there?", to: t.moderator.inboxID, in: t.groupID)
        _ = try await t.moderator.syncInbox()
        #expect(
            try t.moderator.store.messages(conversation: t.member.inboxID.rawValue).map(\.displayText) == [
                "see you there?"
            ])
        _ = try await t.owner.setGroupPreferences(
            [.directMessages: GroupPreference(enabled: true, minimumRole: .moderator)], in: t.groupID)
        await #expect {
            try await t.member.sendDirectToMember("psst", to: t.moderator.inboxID, in: t.groupID)
        } throws: { error in
            guard case RallyClientError.group(.notAllowedByPreference(.directMessages, _)) = error else { return false }
            return true
        }
        // A client that ignores the preference sends anyway: dropped.
        try await catchUp(t.moderator, t.groupID)
        _ = try await t.member.directMessages.send(
            GroupDirectMessage(groupID: t.groupID, text: "psst anyway"), codec: GroupDirectCodec(),
            to: t.moderator.inboxID, messageID: nil, keepCopy: false)
        _ = try await t.moderator.syncInbox()
        #expect(
            try t.moderator.store.messages(conversation: t.member.inboxID.rawValue).map(\.displayText) == [
                "see you there?"
            ])
        // The moderator may still write to the member.
        _ = try await t.moderator.sendDirectToMember("all good", to: t.member.inboxID, in: t.groupID)
        _ = try await t.member.syncInbox()
        #expect(
            try t.member.store.messages(conversation: t.moderator.inboxID.rawValue).map(\.displayText).contains(
                "all good"))
        await t.stop()
    }

    @Test(
        "voice, files and reports follow their preference by content type: off or above the sender's role, refused by its client and rejected by every member"
    )
    func contentTypesFollowTheirPreference() async throws {
        let t = try await Trio.start()
        func content(_ type: String) -> WireEncodedContent {
            var content = WireEncodedContent()
            content.type = ContentTypeID(authority: "rally.dev", type: type, major: 1, minor: 0).wire
            content.content = Data("opaque \(type) bytes".utf8)
            content.fallback = "a \(type)"
            return content
        }
        _ = try await t.owner.setGroupPreferences(
            [
                .voice: GroupPreference(enabled: false),
                .files: GroupPreference(enabled: true, minimumRole: .moderator),
                .reports: GroupPreference(enabled: false),
            ], in: t.groupID)
        for client in t.all { try await catchUp(client, t.groupID) }
        for (type, key) in [("voice", GroupPreferences.Key.voice), ("file", .files), ("report", .reports)] {
            await #expect {
                try await t.member.groupService.send(content(type), to: t.groupID)
            } throws: { error in
                guard case RallyClientError.group(.notAllowedByPreference(let refused, _)) = error else { return false }
                return refused == key
            }
            // Sent anyway: every member rejects it at its position.
            await #expect(throws: RallyClientError.self) {
                try await t.member.groupService.send(content(type), to: t.groupID, enforcingPreferences: false)
            }
            let report = try await catchUp(t.owner, t.groupID)
            #expect(report.rejections.map(\.reason) == [.notAllowedByPreference(key, t.member.inboxID)])
        }
        // A moderator may send a file.
        _ = try await t.moderator.groupService.send(content("file"), to: t.groupID)
        try await catchUp(t.owner, t.groupID)
        #expect(try await t.owner.groupMessages(in: t.groupID).map(\.displayText) == ["a file"])
        await t.stop()
    }
}
