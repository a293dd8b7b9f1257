import Crypto
import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

/// Generates a plausible, hostile group log from a seed: mostly real
/// actions by random actors (with and without the role, removed members,
/// strangers), races of two commits on the same epoch, re-published
/// duplicates, commits on a forked history, and entries that do not open
/// or do not verify. Every commit is sealed as `RallyClient` seals it:
/// under the commit key of the epoch it builds on, with that epoch's
/// transcript and epoch link.
struct GroupLogGenerator {
    typealias T = GroupTest

    var rng: SeededGenerator
    let pool: [Identity]
    /// Every fresh key the generator sealed, by commitment: what a member
    /// the key was sealed to opens.
    private(set) var freshKeys: [Data: SymmetricKey] = [:]
    let firstKey: SymmetricKey
    /// The generator's own reading of the log, to build commits that are
    /// mostly valid: a reader holding every key.
    private(set) var reader: GroupReducer
    /// The transcript and epoch link of every epoch the reader reached.
    private var transcripts: [UInt64: Data] = [:]
    private var links: [UInt64: Data] = [:]
    private(set) var log: [Data] = []
    /// Entries the reader applied: replaying one must be a duplicate.
    private var appliedPayloads: [Data] = []

    var model: GroupState { reader.state }

    init(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let size = 5 + Int(seed % 4)
        pool = try (0..<size).map { try T.identity("P\($0)", using: &rng) }
        firstKey = SymmetricKey(data: rng.bytes(32))
        reader = GroupReducer(firstKey: firstKey)
        self.rng = rng
        transcripts[0] = reader.state.transcript
        links[0] = Data()
    }

    mutating func generate(steps: Int) throws -> [Data] {
        if rng.chance(50) { try append(makeCommit(forcing: .leave)) }  // before the create: notCreated
        try append(
            seal(
                T.signed(T.commit(T.create("Seed group"), by: pool[0], on: model, id: rng.bytes(16)), by: pool[0]),
                epoch: 0))
        for _ in 0..<steps {
            let roll = Int.random(in: 0..<100, using: &rng)
            switch roll {
            case 0..<4 where !appliedPayloads.isEmpty:
                try append(pick(appliedPayloads))
            case 0..<8 where !log.isEmpty:
                try append(log[Int.random(in: 0..<log.count, using: &rng)])
            case 8..<13:
                try append(garbage())
            case 13..<35:
                // Two authors build on the same epoch; the log orders them.
                let first = try makeCommit()
                let second = try makeCommit()
                try append(first)
                try append(second)
            default:
                try append(makeCommit())
            }
        }
        // The owner (or someone without the right) deletes the group at the
        // end; nothing is applied after it.
        try append(makeCommit(forcing: .delete))
        try append(makeCommit(forcing: .welcome))
        return log
    }

    private mutating func append(_ payload: Data) throws {
        log.append(payload)
        if reader.feed(payload, seq: UInt64(log.count), freshKeys: freshKeys).isApplied {
            appliedPayloads.append(payload)
        }
        transcripts[model.epoch] = model.transcript
        links[model.epoch] = reader.record.epochLink
    }

    /// Seals `signed` as a member at `epoch` does; an epoch the group has
    /// not reached gets a key, transcript and link nobody holds.
    private mutating func seal(_ signed: WireSignedGroupCommit, epoch: UInt64) throws -> Data {
        let key = reader.keys[epoch] ?? SymmetricKey(data: rng.bytes(32))
        let sealed = try T.sealed(
            signed, epoch: epoch, epochKey: key, transcript: transcripts[epoch] ?? rng.bytes(32),
            epochLink: links[epoch] ?? rng.bytes(32))
        return T.entryPayload(sealed)
    }

    private mutating func pick<E>(_ items: [E]) -> E { items[Int.random(in: 0..<items.count, using: &rng)] }

    private var members: [GroupMember] { model.sortedMembers }

    private mutating func randomRole() -> WireGroupRole {
        rng.chance(5) ? (rng.chance(50) ? .unspecified : .UNRECOGNIZED(7)) : pick(GroupRole.allCases).wire
    }

    enum Kind: CaseIterable {
        case add, remove, removeMany, changeRole, changeRoles, block, welcome, leave, updateProfile, rekey, create
        case empty
        case setUpInvites, setAdmission, setLink, deleteLink, addPending, admitPending, rejectPending
        case inviteMember, withdrawInvitation, delete
    }

    private mutating func kind() -> Kind {
        let roll = Int.random(in: 0..<130, using: &rng)
        switch roll {
        case 0..<28: return .add
        case 28..<35: return .remove
        case 35..<41: return .removeMany
        case 41..<52: return .changeRole
        case 52..<58: return .changeRoles
        case 58..<64: return .block
        case 64..<68: return .welcome
        case 68..<73: return .leave
        case 73..<79: return .updateProfile
        case 79..<96: return .rekey
        case 96..<98: return .create
        case 98..<99: return .empty
        case 99..<101: return .setUpInvites
        case 101..<103: return .setAdmission
        case 103..<105: return .setLink
        case 105..<106: return .deleteLink
        case 106..<113: return .addPending
        case 113..<116: return .admitPending
        case 116..<122: return .rejectPending
        case 122..<125: return .inviteMember
        case 125..<127: return .withdrawInvitation
        default: return .welcome
        }
    }

    /// An invite identity the generator made (the rules check only its
    /// public keys).
    private mutating func inviteIdentity() throws -> Identity {
        try T.identity("Invites \(rng.next() % 1000)", using: &rng)
    }

    /// A link as an admin signs it: its own tag, to the group's join inbox.
    private mutating func link(by author: Identity) -> WireSetGroupLink {
        var payload = WireInvitePayload()
        payload.inviteTag = rng.chance(10) ? model.inviteTag : rng.bytes(16)
        payload.issuer = author.publicIdentity.wireBundle
        payload.joinInboxID = (model.inviteIdentity?.inboxID ?? pick(pool).inboxID).rawValue
        payload.name = "Seed group"
        var set = WireSetGroupLink()
        // A change of an existing link keeps its invite, now and then.
        if let existing = model.groupLink, rng.chance(50) {
            set.signedInvite = FrameCodec.encode(existing.invite.signed)
        } else {
            set.signedInvite = FrameCodec.encode(Invite.sign(payload, by: author))
        }
        set.role = randomRole()
        set.admission = rng.chance(50) ? .approval : .auto
        return set
    }

    /// Some members, usually others than the author; now and then a
    /// stranger, the author or a name twice, which every member refuses.
    private mutating func someTargets(_ others: [GroupMember]) -> [InboxID] {
        var targets = Array(
            Set(
                (0..<Int.random(in: 1...3, using: &rng)).compactMap { _ in
                    others.isEmpty ? nil : pick(others).inboxID
                }))
        if targets.isEmpty || rng.chance(5) { targets.append(pick(pool).inboxID) }
        if rng.chance(3), let first = targets.first { targets.append(first) }
        return targets
    }

    private mutating func makeCommit(forcing forced: Kind? = nil) throws -> Data {
        let state = model
        var kind = forced ?? kind()
        // Lifecycle commits come mostly from managers, so that enough of
        // them apply to matter.
        let lifecycle: Set<Kind> = [
            .removeMany, .changeRoles, .block, .welcome, .setUpInvites, .setAdmission, .setLink, .deleteLink,
            .addPending, .admitPending, .rejectPending, .inviteMember, .withdrawInvitation, .delete,
        ]
        var author: Identity
        if !members.isEmpty, rng.chance(78) {
            // Half the time someone who holds a managing role, if anyone does.
            let managers = members.filter { $0.role >= .admin }
            let inbox = pick(rng.chance(lifecycle.contains(kind) ? 85 : 50) && !managers.isEmpty ? managers : members)
                .inboxID
            author = pool.first { $0.inboxID == inbox } ?? pick(pool)
        } else {
            author = pick(pool)
        }
        if rng.chance(2) {
            // Same signing key, another name: the group knows other keys.
            author = try Identity(
                signingKeyBytes: author.signingKey.rawRepresentation,
                agreementKeyBytes: author.agreementKey.rawRepresentation, displayName: author.displayName + "'",
                createdAt: T.created)
        }
        var epoch = state.epoch
        let epochRoll = Int.random(in: 0..<100, using: &rng)
        if epochRoll < 6, epoch > 0 {
            epoch -= UInt64.random(in: 1...min(epoch, 3), using: &rng)
        } else if epochRoll < 10 {
            epoch += 1
        }
        // A stale author builds on the transcript it had; a few build on a
        // history nobody else was shown.
        let parent = rng.chance(3) ? rng.bytes(32) : transcripts[epoch] ?? rng.bytes(32)
        let memberIdentities = members.map(\.identity)
        let others = members.filter { $0.inboxID != author.inboxID }
        var commit = T.commit(nil, by: author, epoch: epoch, id: rng.bytes(16), parentTranscript: parent)
        var freshKeys = self.freshKeys

        /// Seals a fresh key, usually to exactly `remaining`.
        func attachKey(_ remaining: [PublicIdentity], target: PublicIdentity?, rng: inout SeededGenerator) throws {
            let roll = Int.random(in: 0..<100, using: &rng)
            let fresh: GroupFreshKey
            switch roll {
            case 0..<82: fresh = try T.attachFreshKey(to: &commit, for: remaining)
            case 82..<88:
                fresh = try T.attachFreshKey(to: &commit, for: remaining + [target ?? pool[0].publicIdentity])
            case 88..<94: fresh = try T.attachFreshKey(to: &commit, for: Array(remaining.dropLast()))
            default: return
            }
            freshKeys[fresh.commitment] = fresh.key
        }

        if kind == .leave, state.members.count == 1, state.members[author.inboxID] != nil, !rng.chance(1) {
            kind = .add  // keep the group alive most of the time
        }
        switch kind {
        case .add:
            let outsiders = pool.filter { state.members[$0.inboxID] == nil }
            let target = !outsiders.isEmpty && rng.chance(85) ? pick(outsiders) : pick(pool)
            commit.action = T.add(target.publicIdentity.wireBundle, wireRole: randomRole())
        case .remove:
            let target = !others.isEmpty && rng.chance(88) ? pick(others).identity : pick(pool).publicIdentity
            commit.action = T.remove(target.inboxID)
            try attachKey(memberIdentities.filter { $0.inboxID != target.inboxID }, target: target, rng: &rng)
        case .removeMany:
            let targets = someTargets(others)
            commit.action = T.removeMembers(targets, ban: rng.chance(30), withMessages: rng.chance(75))
            try attachKey(memberIdentities.filter { !targets.contains($0.inboxID) }, target: nil, rng: &rng)
        case .changeRole:
            let target = !others.isEmpty && rng.chance(90) ? pick(others).inboxID : pick(pool).inboxID
            commit.action = T.changeRole(target, wireRole: randomRole())
        case .changeRoles:
            commit.action = T.changeRoles(someTargets(others), wireRole: randomRole())
        case .block:
            commit.action = T.block(someTargets(others), rng.chance(70))
        case .welcome:
            commit.action = T.welcome(
                rng.chance(5) ? String(repeating: "w", count: 3000) : "Welcome \(rng.next() % 100)")
        case .leave:
            commit.action = T.leave
        case .updateProfile:
            commit.action = T.updateProfile(rng.chance(5) ? "" : "Group \(rng.next() % 1000)")
        case .rekey:
            commit.action = T.rekey
            try attachKey(memberIdentities, target: nil, rng: &rng)
        case .create:
            commit.action = T.create("Again")
        case .empty:
            break
        case .setUpInvites:
            let invites = try inviteIdentity()
            var setUp = WireSetUpInvites()
            setUp.inviteIdentity = invites.publicIdentity.wireBundle
            setUp.inviteTag = rng.bytes(16)
            let admins = members.filter { $0.role >= .admin }.map(\.identity)
            setUp.sealedSeeds = try EpochKeys.seal(
                SymmetricKey(data: rng.bytes(32)), to: admins.isEmpty ? [pool[0].publicIdentity] : admins,
                groupID: state.groupID, epoch: state.epoch + 1, info: EpochKeys.inviteSeedInfo)
            commit.action = .setUpInvites(setUp)
        case .setAdmission:
            var set = WireSetAdmission()
            set.admission = rng.chance(50) ? .approval : .auto
            commit.action = .setAdmission(set)
        case .setLink:
            commit.action = .setGroupLink(link(by: author))
        case .deleteLink:
            commit.action = .deleteGroupLink(WireDeleteGroupLink())
        case .addPending:
            let outsiders = pool.filter { state.members[$0.inboxID] == nil && state.pending[$0.inboxID] == nil }
            var add = WireAddPending()
            add.member = (!outsiders.isEmpty && rng.chance(85) ? pick(outsiders) : pick(pool)).publicIdentity.wireBundle
            add.role = randomRole()
            add.viaInvite.inviteTag =
                rng.chance(20)
                ? (state.groupLink?.tag ?? rng.bytes(16)) : rng.chance(90) ? state.inviteTag : rng.bytes(16)
            add.viaInvite.inviteID = rng.bytes(16)
            add.viaInvite.joinRequestID = rng.bytes(16)
            commit.action = .addPending(add)
        case .admitPending:
            var admit = WireAdmitPending()
            let waiting = state.pending.values.sorted { $0.inboxID < $1.inboxID }
            admit.inboxID = (!waiting.isEmpty && rng.chance(85) ? pick(waiting).inboxID : pick(pool).inboxID).rawValue
            admit.role = randomRole()
            commit.action = .admitPending(admit)
        case .rejectPending:
            var reject = WireRejectPending()
            let waiting = state.pending.values.sorted { $0.inboxID < $1.inboxID }
            reject.inboxID = (!waiting.isEmpty && rng.chance(85) ? pick(waiting).inboxID : pick(pool).inboxID).rawValue
            commit.action = .rejectPending(reject)
        case .inviteMember:
            let outsiders = pool.filter { state.members[$0.inboxID] == nil && state.invited[$0.inboxID] == nil }
            var invite = WireInviteMember()
            invite.member =
                (!outsiders.isEmpty && rng.chance(85) ? pick(outsiders) : pick(pool)).publicIdentity.wireBundle
            invite.role = randomRole()
            commit.action = .inviteMember(invite)
        case .withdrawInvitation:
            var withdraw = WireWithdrawInvitation()
            let invitees = state.invited.values.sorted { $0.inboxID < $1.inboxID }
            withdraw.inboxID =
                (!invitees.isEmpty && rng.chance(85) ? pick(invitees).inboxID : pick(pool).inboxID).rawValue
            withdraw.declined = rng.chance(50)
            commit.action = .withdrawInvitation(withdraw)
        case .delete:
            commit.action = .deleteGroup(WireDeleteGroup())
        }
        self.freshKeys = freshKeys
        var sealedEpoch = epoch
        if epoch > 0, epoch <= state.epoch, rng.chance(4) {
            // A member who still holds an older key seals under it: members
            // who joined since cannot open the entry, so nobody may apply it.
            sealedEpoch -= UInt64.random(in: 1...epoch, using: &rng)
        }
        return try seal(T.signed(commit, by: author), epoch: sealedEpoch)
    }

    /// Entries no member can open or verify.
    private mutating func garbage() throws -> Data {
        let author = pick(pool)
        let commit = T.commit(T.leave, by: author, on: model, id: rng.bytes(16))
        let epoch = model.epoch
        switch Int.random(in: 0..<6, using: &rng) {
        case 0:
            var signed = WireSignedGroupCommit()
            signed.commit = rng.bytes(Int.random(in: 0..<80, using: &rng))
            signed.signature = rng.bytes(64)
            return try seal(signed, epoch: epoch)
        case 1:
            // Names one author, signed by another.
            return try seal(T.signed(commit, by: pick(pool.filter { $0.inboxID != author.inboxID })), epoch: epoch)
        case 2:
            return try seal(WireSignedGroupCommit(), epoch: epoch)
        case 3:
            var short = commit
            short.commitID = rng.bytes(15)
            return try seal(T.signed(short, by: author), epoch: epoch)
        case 4:
            // A sealed box that is not one.
            var sealed = WireSealedGroupCommit()
            sealed.epoch = epoch
            sealed.sealedBox = rng.bytes(Int.random(in: 0..<120, using: &rng))
            return T.entryPayload(sealed)
        default:
            // A valid commit sealed under a key no member holds.
            return T.entryPayload(
                try T.sealed(T.signed(commit, by: author), epoch: epoch, epochKey: SymmetricKey(data: rng.bytes(32))))
        }
    }
}

/// One reading of a log entry, comparable across readers.
enum GroupRead: Equatable, CustomStringConvertible {
    case outcome(GroupOutcome)
    case rejected(GroupEntryRejection)
    case diverged

    var isApplied: Bool { if case .outcome(.applied) = self { true } else { false } }

    var description: String {
        switch self {
        case .outcome(let outcome): "\(outcome)"
        case .rejected(let reason): "rejected: \(reason)"
        case .diverged: "diverged"
        }
    }
}

/// One member's reading of the log, through the real `GroupLogProcessor`:
/// it opens each sealed commit with the keys it holds, derives the next
/// key itself, and takes a fresh key from the commitments it was given
/// (as a member the key is sealed to opens it).
struct GroupReducer {
    static let reader = GroupTest.identity("Reader")

    var record: GroupRecord
    private(set) var keys: [UInt64: SymmetricKey]
    private(set) var appliedCount: Int

    var state: GroupState {
        get { record.state }
        set { record.state = newValue }
    }

    /// A reader from the group's start, holding its first key.
    init(firstKey: SymmetricKey) {
        self.init(state: GroupState(groupID: GroupTest.groupID), keys: [0: firstKey])
    }

    /// A reader that starts from `state` (a welcome's snapshot) with `keys`.
    init(state: GroupState, keys: [UInt64: SymmetricKey]) {
        record = GroupRecord(groupID: state.groupID, topicID: GroupTest.topicID, state: state, status: .active)
        self.keys = keys
        appliedCount = Int(state.epoch)
    }

    mutating func feed(_ payload: Data, seq: UInt64, freshKeys: [Data: SymmetricKey]) -> GroupRead {
        let keys = self.keys
        let processor = GroupLogProcessor(identity: Self.reader, codecs: .standard)
        let result: GroupLogProcessor.Result
        do {
            result = try processor.process(
                GroupTest.envelope(payload, seq: seq), record: record, key: { keys[$0] },
                receivedAt: Date(timeIntervalSince1970: 1_700_000_100))
        } catch {
            return .rejected(.malformed("key lookup threw \(error)"))
        }
        record = result.record
        if let (epoch, key) = result.newKey { self.keys[epoch] = key }
        switch result.event {
        case .commit(_, _, _, let outcome):
            if case .applied(let effects) = outcome {
                appliedCount += 1
                for case .epochAdvanced(let epoch, _, let fresh?) in effects where self.keys[epoch] == nil {
                    self.keys[epoch] = freshKeys[fresh.commitment]
                }
            }
            return .outcome(outcome)
        case .rejected(_, let reason):
            return .rejected(reason)
        case .diverged:
            return .diverged
        case .message:
            return .rejected(.malformed("a message in a commit-only log"))
        case .deletedOnRelay:
            return .rejected(.malformed("the processor never reports a relay's answer"))
        }
    }
}

@Suite("Group convergence")
struct GroupConvergenceTests {
    static let seeds: [UInt64] = [1, 2, 3, 7, 42, 1337, 0xC0FFEE, 0xDEAD_BEEF]
    static let steps = 300

    struct Trace {
        var states: [GroupState] = []
        var reads: [GroupRead] = []
        /// The keys the reference reader held after each entry.
        var keys: [[UInt64: SymmetricKey]] = []
    }

    /// The reference: every entry once, from an empty state, with the
    /// invariants and the outcome bookkeeping checked at every step.
    func fromScratch(_ generator: GroupLogGenerator, _ log: [Data]) throws -> Trace {
        var reducer = GroupReducer(firstKey: generator.firstKey)
        var trace = Trace()
        for (index, payload) in log.enumerated() {
            let before = reducer.state
            let read = reducer.feed(payload, seq: UInt64(index + 1), freshKeys: generator.freshKeys)
            switch read {
            case .outcome(.applied):
                #expect(reducer.state.epoch == before.epoch + 1, "entry \(index)")
                #expect(reducer.keys[reducer.state.epoch] != nil, "entry \(index): no key for the new epoch")
            case .outcome(.rejected), .outcome(.duplicate), .rejected, .diverged:
                #expect(reducer.state == before, "entry \(index) was not applied but changed the state")
            }
            #expect(read != .diverged, "entry \(index): an honest reader diverged")
            let problems = GroupTest.invariantViolations(reducer.state, appliedCount: reducer.appliedCount)
            #expect(problems.isEmpty, "entry \(index): \(problems)")
            if reducer.state.isCreated {
                #expect(try GroupTest.restored(reducer.state) == reducer.state, "snapshot round trip at entry \(index)")
            }
            trace.states.append(reducer.state)
            trace.reads.append(read)
            trace.keys.append(reducer.keys)
        }
        return trace
    }

    /// The case name without its payload.
    static func kind(of rejection: GroupRejection) -> String {
        String("\(Mirror(reflecting: rejection).children.first?.label ?? "\(rejection)")")
    }

    /// A read without the random parts (fresh keys) of its outcome.
    static func decision(_ read: GroupRead) -> String {
        switch read {
        case .outcome(.applied(let effects)): "applied \(effects.count)"
        case .outcome(.rejected(let rejection)): "rejected \(rejection)"
        default: "\(read)"
        }
    }

    /// The epoch an entry is sealed under.
    static func sealedEpoch(_ payload: Data) -> UInt64? {
        guard
            let entry = try? FrameCodec.decode(
                WireGroupLogEntry.self, from: payload, limit: WireLimits.maxPayloadBytes),
            case .sealedCommit(let sealed)? = entry.entry
        else { return nil }
        return sealed.epoch
    }

    @Test(arguments: seeds)
    func everyWayOfReadingTheLogConverges(seed: UInt64) async throws {
        try await offThePool {
            var generator = try GroupLogGenerator(seed: seed)
            let log = try generator.generate(steps: Self.steps)
            let reference = try fromScratch(generator, log)
            let final = try #require(reference.states.last)
            #expect(final == generator.model)

            // The log really exercises what it is meant to.
            let reads = reference.reads
            let applied = reads.filter(\.isApplied).count
            let duplicates = reads.filter { $0 == .outcome(.duplicate) }.count
            var unreadable = 0
            var unverifiable = 0
            var rejectionKinds = Set<String>()
            var stale = 0
            var forked = 0
            for read in reads {
                switch read {
                case .outcome(.rejected(let rejection)):
                    rejectionKinds.insert(Self.kind(of: rejection))
                    if case .staleEpoch = rejection { stale += 1 }
                    if rejection == .forkedHistory { forked += 1 }
                case .rejected(.undecryptable), .rejected(.noKeyForEpoch): unreadable += 1
                case .rejected(.badSignature), .rejected(.malformed): unverifiable += 1
                default: break
                }
            }
            let removals = reads.filter {
                if case .outcome(.applied(let effects)) = $0 {
                    effects.contains { if case .memberRemoved = $0 { true } else { false } }
                } else {
                    false
                }
            }.count
            func appliedCount(_ matches: (GroupEffect) -> Bool) -> Int {
                reads.filter {
                    if case .outcome(.applied(let effects)) = $0 { effects.contains(where: matches) } else { false }
                }
                .count
            }
            // The lifecycle commits are in it too (batch roles and removals,
            // blocks, welcome messages).
            let blocks = appliedCount { if case .blockedForAll = $0 { true } else { false } }
            let deletions = appliedCount { if case .messagesDeleted = $0 { true } else { false } }
            let welcomes = appliedCount { $0 == .welcomeChanged }
            #expect(blocks >= 1, "blocks \(blocks)")
            #expect(deletions >= 1, "deletions \(deletions)")
            #expect(welcomes >= 1, "welcomes \(welcomes)")
            #expect(applied >= 30, "only \(applied) applied commits")
            #expect(stale >= 5, "only \(stale) stale commits")
            #expect(forked >= 1, "no commit on a forked history")
            #expect(duplicates >= 5, "only \(duplicates) duplicates")
            #expect(unverifiable >= 3, "only \(unverifiable) unverifiable entries")
            #expect(unreadable >= 3, "only \(unreadable) entries no key opens")
            #expect(removals >= 1, "no applied removal")
            #expect(rejectionKinds.count >= 10, "rejections: \(rejectionKinds.sorted())")

            var rng = SeededGenerator(seed: seed ^ 0x5EED)

            // (b) Newcomers: a welcome's snapshot at a cut point and the key of
            // that epoch only, then the rest. Entries sealed under an earlier
            // epoch do not open for them; those must be entries nobody applied.
            let created = reference.states.indices.filter { reference.states[$0].isCreated }
            let cuts = [created.first!, created.last!] + (0..<6).map { _ in created.randomElement(using: &rng)! }
            for cut in cuts {
                let epoch = reference.states[cut].epoch
                let key = try #require(reference.keys[cut][epoch])
                var newcomer = GroupReducer(state: try GroupTest.restored(reference.states[cut]), keys: [epoch: key])
                #expect(newcomer.state == reference.states[cut], "snapshot at entry \(cut)")
                var firstDivergence: Int?
                for index in log.indices.dropFirst(cut + 1) {
                    let read = newcomer.feed(log[index], seq: UInt64(index + 1), freshKeys: generator.freshKeys)
                    let expected = reference.reads[index]
                    let sealedBeforeWelcome = Self.sealedEpoch(log[index]).map { $0 < epoch } ?? false
                    let readsAlike =
                        read == expected
                        || (sealedBeforeWelcome && read == .rejected(.noKeyForEpoch(Self.sealedEpoch(log[index])!))
                            && !expected.isApplied)
                    if firstDivergence == nil, newcomer.state != reference.states[index] || !readsAlike {
                        firstDivergence = index
                    }
                }
                #expect(firstDivergence == nil, "newcomer from entry \(cut) diverged at entry \(firstDivergence ?? -1)")
                #expect(newcomer.state == final, "newcomer from entry \(cut)")
            }

            // (c) Every entry delivered twice in a row (a retried fetch).
            var retried = GroupReducer(firstKey: generator.firstKey)
            for (index, payload) in log.enumerated() {
                let first = retried.feed(payload, seq: UInt64(index + 1), freshKeys: generator.freshKeys)
                let second = retried.feed(payload, seq: UInt64(index + 1), freshKeys: generator.freshKeys)
                #expect(first == reference.reads[index], "entry \(index), first delivery")
                if first.isApplied {
                    #expect(second == .outcome(.duplicate), "entry \(index), redelivered")
                } else {
                    #expect(second == first, "entry \(index), redelivered")
                }
            }
            #expect(retried.state == final)

            // (d) A client that persists the state as a snapshot after every
            // entry and reloads it for the next (as the local store does).
            var persisted = GroupReducer(firstKey: generator.firstKey)
            for (index, payload) in log.enumerated() {
                _ = persisted.feed(payload, seq: UInt64(index + 1), freshKeys: generator.freshKeys)
                let bytes = FrameCodec.encode(persisted.state.snapshot)
                let snapshot = try WireGroupSnapshot(serializedBytes: bytes)
                persisted.state =
                    snapshot.epoch == 0 ? GroupState(groupID: snapshot.groupID) : try GroupState(snapshot: snapshot)
            }
            #expect(persisted.state == final)
        }
    }

    /// Across the seeds the logs apply every kind of lifecycle commit at
    /// least once, so the convergence checks above cover them all.
    @Test func theLogsApplyEveryLifecycleKind() async throws {
        try await offThePool {
            var seen = Set<String>()
            for seed in Self.seeds {
                var generator = try GroupLogGenerator(seed: seed)
                let log = try generator.generate(steps: Self.steps)
                var reducer = GroupReducer(firstKey: generator.firstKey)
                for (index, payload) in log.enumerated() {
                    guard
                        case .outcome(.applied(let effects)) = reducer.feed(
                            payload, seq: UInt64(index + 1), freshKeys: generator.freshKeys)
                    else { continue }
                    for effect in effects {
                        switch effect {
                        case .deleted: seen.insert("delete")
                        case .groupLinkChanged: seen.insert("link")
                        case .admissionChanged: seen.insert("admission")
                        case .pendingAdded: seen.insert("pending")
                        case .pendingRejected: seen.insert("reject pending")
                        case .invited: seen.insert("invite")
                        case .invitationWithdrawn: seen.insert("withdraw invitation")
                        case .invitesSetUp: seen.insert("invites")
                        case .blockedForAll: seen.insert("block")
                        case .messagesDeleted: seen.insert("remove with messages")
                        default: break
                        }
                    }
                    if reducer.state.groupLink == nil, effects.contains(.groupLinkChanged) {
                        seen.insert("delete link")
                    }
                    if effects.contains(where: { if case .pendingAdmitted = $0 { true } else { false } }) {
                        seen.insert("admit pending")
                    }
                }
            }
            let expected: Set<String> = [
                "delete", "link", "delete link", "admission", "pending", "reject pending", "admit pending", "invite",
                "withdraw invitation", "invites", "block", "remove with messages",
            ]
            #expect(expected.subtracting(seen).isEmpty, "never applied: \(expected.subtracting(seen).sorted())")
        }
    }

    /// The newcomer check has teeth: a snapshot that forgot which commits
    /// were applied lets a re-published commit from before the cut apply
    /// (or be judged) differently. The reader keeps every key it had up
    /// to the cut (a device restored from a bad snapshot), so it opens
    /// those re-published commits.
    @Test func aSnapshotWithoutAppliedCommitIDsWouldDiverge() async throws {
        try await offThePool {
            var generator = try GroupLogGenerator(seed: 42)
            let log = try generator.generate(steps: Self.steps)
            let reference = try fromScratch(generator, log)
            var divergedCuts = 0
            for cut in reference.states.indices where reference.states[cut].isCreated {
                var snapshot = reference.states[cut].snapshot
                snapshot.appliedCommitIds = []
                var newcomer = GroupReducer(state: try GroupState(snapshot: snapshot), keys: reference.keys[cut])
                for index in log.indices.dropFirst(cut + 1) {
                    let read = newcomer.feed(log[index], seq: UInt64(index + 1), freshKeys: generator.freshKeys)
                    if read != reference.reads[index] {
                        divergedCuts += 1
                        break
                    }
                }
            }
            #expect(divergedCuts > 0)
        }
    }

    /// The newcomer check has teeth for sealing too: a reader that applied
    /// a commit sealed under an older epoch than the one it names would
    /// part from a newcomer who cannot open it. The generator logs such
    /// commits; every reader must reject them.
    @Test(arguments: seeds.prefix(4))
    func commitsSealedUnderAnOlderEpochAreAppliedByNobody(seed: UInt64) async throws {
        try await offThePool {
            var generator = try GroupLogGenerator(seed: seed)
            let log = try generator.generate(steps: Self.steps)
            let reference = try fromScratch(generator, log)
            var misSealed = 0
            for (index, payload) in log.enumerated() {
                guard let sealedEpoch = Self.sealedEpoch(payload), let key = reference.keys[index][sealedEpoch],
                    let entry = try? FrameCodec.decode(
                        WireGroupLogEntry.self, from: payload, limit: WireLimits.maxPayloadBytes),
                    case .sealedCommit(let sealed)? = entry.entry,
                    let signed = try? CommitSealing.open(
                        sealed, commitKey: CommitSealing.commitKey(epochKey: key), groupID: GroupTest.groupID),
                    let verified = try? VerifiedGroupCommit.verify(signed), verified.commit.epoch != sealedEpoch
                else { continue }
                misSealed += 1
                #expect(!reference.reads[index].isApplied, "entry \(index) applied under epoch \(sealedEpoch)'s key")
            }
            #expect(misSealed >= 3, "only \(misSealed) commits sealed under another epoch")
        }
    }

    @Test(arguments: seeds.prefix(3))
    func theSameSeedGeneratesTheSameDecisions(seed: UInt64) async throws {
        try await offThePool {
            var one = try GroupLogGenerator(seed: seed)
            var two = try GroupLogGenerator(seed: seed)
            let firstLog = try one.generate(steps: 60)
            let secondLog = try two.generate(steps: 60)
            let first = try fromScratch(one, firstLog)
            let second = try fromScratch(two, secondLog)
            // Fresh keys are random, so compare what was decided, not the keys.
            #expect(first.reads.map(Self.decision) == second.reads.map(Self.decision))
            // So are the transcripts: they hash commits that carry fresh keys.
            func withoutTranscript(_ state: GroupState?) -> WireGroupSnapshot? {
                guard var snapshot = state?.snapshot else { return nil }
                snapshot.transcript = Data()
                return snapshot
            }
            #expect(withoutTranscript(first.states.last) == withoutTranscript(second.states.last))
        }
    }
}
