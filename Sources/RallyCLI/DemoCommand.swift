import ArgumentParser
import Foundation
import Logging
import RallyCore
import RallyRelay

/// Starts a relay in this process on a free port with a temporary store and
/// walks two users through the main flows, printing what happens.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run an embedded relay: encrypted messages, a group, and invites with every join outcome.")

    @Option(help: "Keep the relay's data and the users' homes in this directory instead of a temporary one.")
    var data: String?

    func run() async throws {
        let root =
            data.map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("rally-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { if data == nil { try? FileManager.default.removeItem(at: root) } }
        var quiet = Logger(label: "rally.demo")
        quiet.logLevel = .error

        let relay = try await RunningRelay.start(
            configuration: RelayConfiguration(port: 0, dataDirectory: root.appendingPathComponent("relay")),
            logger: quiet)
        say("relay      listening on \(relay.url) (SQLite in \(root.appendingPathComponent("relay").path))")
        do {
            try await walkThrough(relayURL: relay.url, root: root, logger: quiet)
            try await vaultWalkThrough(relayURL: relay.url, root: root, logger: quiet)
            try await lifecycleWalkThrough(relayURL: relay.url, root: root, logger: quiet)
        } catch {
            await relay.stop()
            throw error
        }
        await relay.stop()
        say("relay      stopped; demo complete")
    }

    private func walkThrough(relayURL: URL, root: URL, logger: Logger) async throws {
        let alice = try await RallyClient.create(
            home: root.appendingPathComponent("alice"), relayURL: relayURL, displayName: "Alice", logger: logger)
        let bob = try await RallyClient.create(
            home: root.appendingPathComponent("bob"), relayURL: relayURL, displayName: "Bob", logger: logger)
        say("alice      created identity, inbox \(alice.inboxID)")
        say("bob        created identity, inbox \(bob.inboxID)")
        await bob.disconnect()
        say("bob        goes offline")

        for text in ["Hi Bob! Only you can read this.", "Rally seals each message to your key."] {
            let sent = try await alice.sendText(text, to: bob.inboxID)
            say("alice      → bob: \"\(text)\" (stored on the relay as seq \(sent.seq ?? 0), sealed)")
        }

        say("bob        comes back online and catches up from his cursor")
        let report = try await bob.syncInbox()
        for message in report.received {
            say("bob        ← \(message.senderName): \"\(message.displayText)\" (signature verified)")
        }
        let again = try await bob.syncInbox()
        say("bob        syncs again: \(again.received.count) new (each message arrives once)")

        _ = try await bob.sendText("Got both. Hi Alice!", to: alice.inboxID)
        say("bob        → alice: \"Got both. Hi Alice!\"")
        for message in try await alice.syncInbox().received {
            say("alice      ← \(message.senderName): \"\(message.displayText)\"")
        }

        let carol = try await RallyClient.create(
            home: root.appendingPathComponent("carol"), relayURL: relayURL, displayName: "Carol", logger: logger)
        say("carol      created identity, inbox \(carol.inboxID)")
        let group = try await alice.createGroup(name: "Picnic")
        say("alice      created group \"Picnic\" (\(group.groupID)), owner, epoch \(group.state.epoch)")
        for (member, name) in [(bob, "bob"), (carol, "carol")] {
            let state = try await alice.addMember(member.inboxID, to: group.groupID).state
            say("alice      added \(name); the welcome goes to \(name) by direct message (epoch \(state.epoch))")
            _ = try await member.syncInbox()
        }
        _ = try await alice.sendGroupText("Saturday at noon?", to: group.groupID)
        say("alice      → Picnic: \"Saturday at noon?\" (one envelope on the relay for everyone)")
        for (member, name) in [(bob, "bob"), (carol, "carol")] {
            for message in try await member.syncGroup(group.groupID).messages {
                say(
                    "\(name.padding(toLength: 10, withPad: " ", startingAt: 0)) ← Picnic/\(message.senderName): \"\(message.displayText)\""
                )
            }
        }
        let after = try await alice.removeMember(carol.inboxID, from: group.groupID).state
        say("alice      removed carol: new epoch \(after.epoch) with a fresh key sealed to alice and bob only")
        _ = try await alice.sendGroupText("Just us two now.", to: group.groupID)
        let carolReport = try await carol.syncGroup(group.groupID)
        say(
            "carol      reads the group: \(carolReport.messages.count) new messages (she has no key for epoch \(after.epoch))"
        )
        for message in try await bob.syncGroup(group.groupID).messages {
            say("bob        ← Picnic/\(message.senderName): \"\(message.displayText)\"")
        }
        let members = try await bob.group(group.groupID).state.sortedMembers
        say("bob        members: \(members.map { "\($0.identity.displayName) (\($0.role))" }.joined(separator: ", "))")
        for client in [alice, bob, carol] { await client.disconnect() }
        try await inviteWalkThrough(alice: alice, picnic: group.groupID, relayURL: relayURL, root: root, logger: logger)
    }

    /// Invites: alice's client stays online (as `rally watch` does) and
    /// answers join requests by itself; one join succeeds, then one of
    /// each error type reaches its joiner.
    private func inviteWalkThrough(
        alice: RallyClient, picnic: String, relayURL: URL, root: URL, logger: Logger
    ) async throws {
        func user(_ name: String) async throws -> RallyClient {
            try await RallyClient.create(
                home: root.appendingPathComponent(name.lowercased()), relayURL: relayURL, displayName: name,
                logger: logger)
        }
        func join(_ client: RallyClient, _ link: String, now: Date = Date()) async throws {
            let name = client.identity.displayName.lowercased().padding(toLength: 10, withPad: " ", startingAt: 0)
            let attempt = try await client.startJoin(link, now: now)
            say("\(name) invite checked locally; join request sent")
            let final = try await client.waitForJoin(requestID: attempt.requestID, timeout: .seconds(30))
            switch final.phase {
            case .joined: say("\(name) joined \"\(final.invite.name)\" (\(final.groupID ?? ""))")
            case .failed:
                say("\(name) join failed [\(final.errorType?.rawValue ?? "")]: \(final.userMessage)")
            default: throw ValidationError("the demo's join did not finish: \(final.phase)")
            }
            await client.disconnect()
        }

        let single = try await alice.createInvite(in: picnic, options: InviteOptions(singleUse: true))
        say("alice      single-use invite: \(single.appLink.prefix(48))… (\(single.slug.count) characters)")
        let (reports, report) = AsyncStream<JoinRequestReport>.makeStream()
        let watcher = Task {
            try await alice.watch { event in
                if case .joinRequest(let handled) = event { report.yield(handled) }
            }
        }
        defer { watcher.cancel() }
        say("alice      stays online (like `rally watch`) and answers join requests by herself")

        try await join(try await user("Dave"), single.appLink)
        try await join(try await user("Erin"), single.webLink)

        let open = try await alice.createInvite(in: picnic)
        try await alice.revokeInvites(in: picnic)
        say("alice      revoked every outstanding invite to Picnic")
        try await join(try await user("Frank"), open.appLink)

        let hourAgo = Date().addingTimeInterval(-3600)
        let shortLived = try await alice.createInvite(
            in: picnic, options: InviteOptions(expiresIn: 600), now: hourAgo)
        say("alice      an invite that expired 50 minutes ago; Gina's clock is an hour behind")
        try await join(try await user("Gina"), shortLived.appLink, now: hourAgo.addingTimeInterval(60))

        let party = try await alice.createGroup(name: "Surprise party")
        let partyInvite = try await alice.createInvite(in: party.groupID)
        try await alice.explodeGroup(party.groupID)
        say("alice      exploded the group \"Surprise party\"")
        try await join(try await user("Hank"), partyInvite.appLink)

        let club = try await alice.createGroup(name: "Book club")
        let clubInvite = try await alice.createInvite(in: club.groupID)
        try await alice.forgetGroup(club.groupID)
        say("alice      removed the group \"Book club\" from her device")
        try await join(try await user("Ivy"), clubInvite.appLink)

        let mallory = try await user("Mallory")
        var forged = single.invite.payload
        forged.issuer = mallory.identity.publicIdentity.wireBundle
        forged.groupReference = Data(repeating: 0, count: 48)
        let forgedSlug = InviteSlug.encode(Invite.sign(forged, by: mallory.identity))
        let attempt = try await mallory.startJoin(forgedSlug)
        for await handled in reports where handled.joiner == mallory.inboxID { break }
        _ = try await mallory.syncInbox()
        let answered = try await mallory.joinAttempt(attempt.requestID)
        say(
            "mallory    forged an invite: \(answered.phase.rawValue) (\(answered.reason ?? "")); nobody is blocked for an invite someone else signed"
        )
        await mallory.disconnect()
        watcher.cancel()
        _ = await watcher.result
        await alice.disconnect()
    }

    /// The seed's nominee flow: a vault, a document, an invitation
    /// accepted through its deep link, the owner's confirmation, the
    /// nominee reading, and a revocation that leaves them out.
    private func vaultWalkThrough(relayURL: URL, root: URL, logger: Logger) async throws {
        let olga = try await RallyClient.create(
            home: root.appendingPathComponent("olga"), relayURL: relayURL, displayName: "Olga", logger: logger)
        let sam = try await RallyClient.create(
            home: root.appendingPathComponent("sam"), relayURL: relayURL, displayName: "Sam", logger: logger)
        let vault = try await olga.createVault(name: "Family Papers")
        say("olga       created vault \"Family Papers\" (its name, documents and keys never reach the relay in clear)")
        let deed = root.appendingPathComponent("deed.txt")
        try Data("The house goes to Sam.".utf8).write(to: deed)
        let added = try await olga.addDocument(to: vault.id, file: deed)
        say(
            "olga       added \(added.name) (\(added.size) bytes, sealed with a key of its own, stored as a relay blob)"
        )
        let sent = try await olga.inviteNominee(to: vault.id, invitee: sam.inboxID, name: "Sam")
        say("olga       → sam: 🔐 Vault Invitation \"Family Papers\" (pending; only the token's hash stays with Olga)")
        let invitation = try await sam.vaultInvitations()
        say(
            "sam        sees \(invitation.first?.title ?? "nothing") \"\(invitation.first?.vaultName ?? "")\" [Accept] [Decline]"
        )
        let accepted = try await sam.acceptVaultInvitation(sent.link)
        say("sam        taps Accept: \(accepted.invitation.title)")
        say(
            "sam        deep link: \(accepted.link ?? "")".replacingOccurrences(
                of: sent.link.components(separatedBy: "token=").last ?? "", with: "…"))
        let confirmed = try await olga.confirmNominee("Sam", of: vault.id)
        say("olga       confirmed Sam: \(confirmed.status.rawValue) (the vault key is sealed to Sam)")
        let copy = root.appendingPathComponent("sam-deed.txt")
        _ = try await sam.fetchDocument(added.name, from: vault.id, to: copy)
        say("sam        read \(added.name): \"\(try String(contentsOf: copy, encoding: .utf8))\"")
        _ = try await olga.revokeNominee("Sam", of: vault.id)
        say("olga       revoked Sam: the token is dead and the vault moved to a new key")
        let codicil = root.appendingPathComponent("codicil.txt")
        try Data("Codicil: the boat goes to Ann.".utf8).write(to: codicil)
        _ = try await olga.addDocument(to: vault.id, file: codicil)
        do {
            _ = try await sam.documents(in: vault.id)
            say("sam        can still read the vault (unexpected)")
        } catch {
            say("sam        cannot read codicil.txt: \(error)")
        }
        await olga.disconnect()
        await sam.disconnect()
    }

    /// The group lifecycle: a welcome message, roles in batch, block for
    /// all, approval with a support message, leave, delete.
    private func lifecycleWalkThrough(relayURL: URL, root: URL, logger: Logger) async throws {
        func user(_ name: String) async throws -> RallyClient {
            try await RallyClient.create(
                home: root.appendingPathComponent("hikers-" + name.lowercased()), relayURL: relayURL, displayName: name,
                logger: logger)
        }
        let (olive, ann, bob, cy, dan) = (
            try await user("Olive"), try await user("Ann"), try await user("Bob"), try await user("Cy"),
            try await user("Dan")
        )
        let group = try await olive.createGroup(
            name: "Hikers", description: "Sunday walks", fullName: "The Sunday Hikers")
        try await olive.setWelcomeMessage("Boots on, phones off.", in: group.groupID)
        say("olive      created \"Hikers\" (The Sunday Hikers) with a welcome message")
        for member in [ann, bob, cy] {
            _ = try await olive.addMember(member.inboxID, to: group.groupID)
            _ = try await member.syncInbox()
        }
        let welcome = try await ann.group(group.groupID).state.welcomeMessage
        say("ann        joined and sees the welcome message: \"\(welcome)\"")
        _ = try await olive.changeRoles(of: [ann.inboxID, bob.inboxID], to: .moderator, in: group.groupID)
        say("olive      made ann and bob moderators in one change")
        _ = try await ann.syncGroup(group.groupID)
        _ = try await cy.sendGroupText("buy cheap boots at …", to: group.groupID)
        try await ann.blockMembers([cy.inboxID], in: group.groupID)
        say("ann        blocked cy for all")
        _ = try await bob.syncGroup(group.groupID)
        for message in try await bob.groupMessages(in: group.groupID) {
            say("bob        ← Hikers/\(message.senderName): \(message.displayText)")
        }
        try await olive.groupAdmission.setAdmission(.approval, in: group.groupID)
        let invite = try await olive.createInvite(in: group.groupID)
        let join = try await dan.startJoin(invite.appLink)
        _ = try await olive.processJoinRequests()
        _ = try await dan.syncInbox()
        say("dan        asks to join: \(try await dan.joinAttempt(join.requestID).userMessage)")
        _ = try await dan.groupAdmission.sendSupport(
            "First time hiking, is that fine?", in: group.groupID, member: dan.inboxID)
        _ = try await ann.syncInbox()
        for line in try ann.groupAdmission.support(in: group.groupID, member: dan.inboxID) {
            say("ann        ← support/\(line.senderName): \(line.text)")
        }
        _ = try await ann.groupAdmission.sendSupport(
            "Welcome! Easy pace on Sundays.", in: group.groupID, member: dan.inboxID)
        _ = try await ann.groupAdmission.admit(dan.inboxID, role: .member, in: group.groupID)
        _ = try await dan.syncInbox()
        say("ann        admitted dan; dan: \(try await dan.joinAttempt(join.requestID).userMessage)")
        do {
            try await olive.leaveGroup(group.groupID)
        } catch {
            say("olive      tries to leave: \(error)")
        }
        _ = try await bob.syncGroup(group.groupID)
        try await bob.leaveGroup(group.groupID)
        say("bob        left: his history stays on his device; the others move to a key he never gets")
        try await olive.deleteGroup(group.groupID)
        _ = try await ann.syncGroup(group.groupID)
        say(
            "olive      deleted \"Hikers\"; ann's device now shows it as \(try await ann.group(group.groupID).status.rawValue)"
        )
        for client in [olive, ann, bob, cy, dan] { await client.disconnect() }
    }

    private func say(_ line: String) {
        Output.write(line)
    }
}
