import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

/// Generates a plausible, hostile group log from a seed: mostly real
/// actions by random actors (with and without the role, removed members,
/// strangers), races of two commits on the same epoch, re-published
/// duplicates, and entries that do not verify.
struct GroupLogGenerator {
    typealias T = GroupTest

    var rng: SeededGenerator
    let pool: [Identity]
    /// The generator's own reading of the log, to build commits that are
    /// mostly valid.
    private(set) var model = GroupState(groupID: GroupTest.groupID)
    private(set) var log: [WireSignedGroupCommit] = []

    init(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let size = 5 + Int(seed % 4)
        pool = try (0..<size).map { try T.identity("P\($0)", using: &rng) }
        self.rng = rng
    }

    mutating func generate(steps: Int) throws -> [WireSignedGroupCommit] {
        if rng.chance(50) { try append(makeCommit(forcing: .leave)) }  // before the create: notCreated
        try append(T.signed(T.commit(T.create("Seed group"), by: pool[0], epoch: 0, id: rng.bytes(16)), by: pool[0]))
        for _ in 0..<steps {
            let roll = Int.random(in: 0..<100, using: &rng)
            switch roll {
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
        return log
    }

    private mutating func append(_ signed: WireSignedGroupCommit) throws {
        log.append(signed)
        if let verified = try? VerifiedGroupCommit.verify(signed) { _ = model.apply(verified) }
    }

    private mutating func pick<E>(_ items: [E]) -> E { items[Int.random(in: 0..<items.count, using: &rng)] }

    private var members: [GroupMember] { model.sortedMembers }

    private mutating func randomRole() -> WireGroupRole {
        rng.chance(5) ? (rng.chance(50) ? .unspecified : .UNRECOGNIZED(7)) : pick(GroupRole.allCases).wire
    }

    enum Kind: CaseIterable { case add, remove, changeRole, leave, updateProfile, rekey, create, empty }

    private mutating func kind() -> Kind {
        let roll = Int.random(in: 0..<100, using: &rng)
        switch roll {
        case 0..<32: return .add
        case 32..<44: return .remove
        case 44..<62: return .changeRole
        case 62..<68: return .leave
        case 68..<76: return .updateProfile
        case 76..<96: return .rekey
        case 96..<98: return .create
        default: return .empty
        }
    }

    private mutating func makeCommit(forcing forced: Kind? = nil) throws -> WireSignedGroupCommit {
        let state = model
        var author: Identity
        if !members.isEmpty, rng.chance(78) {
            // Half the time someone who holds a managing role, if anyone does.
            let managers = members.filter { $0.role >= .admin }
            let inbox = pick(rng.chance(50) && !managers.isEmpty ? managers : members).inboxID
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
        let memberIdentities = members.map(\.identity)
        let others = members.filter { $0.inboxID != author.inboxID }
        var commit = T.commit(nil, by: author, epoch: epoch, id: rng.bytes(16))

        /// Seals a fresh key, usually to exactly `remaining`.
        func attachKey(_ remaining: [PublicIdentity], target: PublicIdentity?, rng: inout SeededGenerator) throws {
            let roll = Int.random(in: 0..<100, using: &rng)
            switch roll {
            case 0..<82: try T.attachFreshKey(to: &commit, for: remaining)
            case 82..<88: try T.attachFreshKey(to: &commit, for: remaining + [target ?? pool[0].publicIdentity])
            case 88..<94: try T.attachFreshKey(to: &commit, for: Array(remaining.dropLast()))
            default: break
            }
        }

        var kind = forced ?? kind()
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
        case .changeRole:
            let target = !others.isEmpty && rng.chance(90) ? pick(others).inboxID : pick(pool).inboxID
            commit.action = T.changeRole(target, wireRole: randomRole())
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
        }
        return T.signed(commit, by: author)
    }

    /// Entries no member can verify.
    private mutating func garbage() throws -> WireSignedGroupCommit {
        let author = pick(pool)
        let commit = T.commit(T.leave, by: author, epoch: model.epoch, id: rng.bytes(16))
        switch Int.random(in: 0..<4, using: &rng) {
        case 0:
            var signed = WireSignedGroupCommit()
            signed.commit = rng.bytes(Int.random(in: 0..<80, using: &rng))
            signed.signature = rng.bytes(64)
            return signed
        case 1:
            // Names one author, signed by another.
            return T.signed(commit, by: pick(pool.filter { $0.inboxID != author.inboxID }))
        case 2:
            return WireSignedGroupCommit()
        default:
            var short = commit
            short.commitID = rng.bytes(15)
            return T.signed(short, by: author)
        }
    }
}

/// One member's reading of the log.
struct GroupReducer {
    var state: GroupState
    private(set) var appliedCount: Int

    init(state: GroupState) {
        self.state = state
        appliedCount = Int(state.epoch)
    }

    /// nil when the entry does not verify (every member drops it).
    mutating func feed(_ signed: WireSignedGroupCommit) -> GroupOutcome? {
        guard let verified = try? VerifiedGroupCommit.verify(signed) else { return nil }
        let outcome = state.apply(verified)
        if case .applied = outcome { appliedCount += 1 }
        return outcome
    }
}

@Suite("Group convergence")
struct GroupConvergenceTests {
    static let seeds: [UInt64] = [1, 2, 3, 7, 42, 1337, 0xC0FFEE, 0xDEAD_BEEF]
    static let steps = 300

    struct Trace {
        var states: [GroupState] = []
        var outcomes: [GroupOutcome?] = []
    }

    /// The reference: every entry once, from an empty state, with the
    /// invariants and the outcome bookkeeping checked at every step.
    func fromScratch(_ log: [WireSignedGroupCommit]) throws -> Trace {
        var reducer = GroupReducer(state: GroupState(groupID: GroupTest.groupID))
        var trace = Trace()
        for (index, signed) in log.enumerated() {
            let before = reducer.state
            let outcome = reducer.feed(signed)
            switch outcome {
            case .applied?:
                #expect(reducer.state.epoch == before.epoch + 1, "entry \(index)")
                #expect(reducer.state.lastCommitID == (try VerifiedGroupCommit.verify(signed)).commit.commitID)
            case .rejected?, .duplicate?, nil:
                #expect(reducer.state == before, "entry \(index) was not applied but changed the state")
            }
            let problems = GroupTest.invariantViolations(reducer.state, appliedCount: reducer.appliedCount)
            #expect(problems.isEmpty, "entry \(index): \(problems)")
            if reducer.state.isCreated {
                #expect(try GroupTest.restored(reducer.state) == reducer.state, "snapshot round trip at entry \(index)")
            }
            trace.states.append(reducer.state)
            trace.outcomes.append(outcome)
        }
        return trace
    }

    /// The case name without its payload.
    static func kind(of rejection: GroupRejection) -> String {
        String("\(Mirror(reflecting: rejection).children.first?.label ?? "\(rejection)")")
    }

    @Test(arguments: seeds)
    func everyWayOfReadingTheLogConverges(seed: UInt64) throws {
        var generator = try GroupLogGenerator(seed: seed)
        let log = try generator.generate(steps: Self.steps)
        let reference = try fromScratch(log)
        let final = try #require(reference.states.last)
        #expect(final == generator.model)

        // The log really exercises what it is meant to.
        let outcomes = reference.outcomes
        let applied = outcomes.filter { if case .applied? = $0 { true } else { false } }.count
        let duplicates = outcomes.filter { $0 == .duplicate }.count
        let unverifiable = outcomes.filter { $0 == nil }.count
        var rejectionKinds = Set<String>()
        var stale = 0
        for case .rejected(let rejection)? in outcomes {
            rejectionKinds.insert(Self.kind(of: rejection))
            if case .staleEpoch = rejection { stale += 1 }
        }
        let removals = outcomes.filter {
            if case .applied(let effects)? = $0 {
                effects.contains { if case .memberRemoved = $0 { true } else { false } }
            } else {
                false
            }
        }.count
        #expect(applied >= 30, "only \(applied) applied commits")
        #expect(stale >= 5, "only \(stale) stale commits")
        #expect(duplicates >= 5, "only \(duplicates) duplicates")
        #expect(unverifiable >= 5, "only \(unverifiable) unverifiable entries")
        #expect(removals >= 1, "no applied removal")
        #expect(rejectionKinds.count >= 10, "rejections: \(rejectionKinds.sorted())")

        var rng = SeededGenerator(seed: seed ^ 0x5EED)

        // (b) Newcomers: a welcome's snapshot at a cut point, then the rest.
        let created = reference.states.indices.filter { reference.states[$0].isCreated }
        let cuts = [created.first!, created.last!] + (0..<6).map { _ in created.randomElement(using: &rng)! }
        for cut in cuts {
            var newcomer = GroupReducer(state: try GroupTest.restored(reference.states[cut]))
            #expect(newcomer.state == reference.states[cut], "snapshot at entry \(cut)")
            var firstDivergence: Int?
            for index in log.indices.dropFirst(cut + 1) {
                let outcome = newcomer.feed(log[index])
                if firstDivergence == nil,
                    newcomer.state != reference.states[index] || outcome != reference.outcomes[index]
                {
                    firstDivergence = index
                }
            }
            #expect(firstDivergence == nil, "newcomer from entry \(cut) diverged at entry \(firstDivergence ?? -1)")
            #expect(newcomer.state == final, "newcomer from entry \(cut)")
        }

        // (c) Every entry delivered twice in a row (a retried fetch).
        var retried = GroupReducer(state: GroupState(groupID: GroupTest.groupID))
        for (index, signed) in log.enumerated() {
            let first = retried.feed(signed)
            let second = retried.feed(signed)
            #expect(first == reference.outcomes[index], "entry \(index), first delivery")
            switch first {
            case .applied?: #expect(second == .duplicate, "entry \(index), redelivered")
            default: #expect(second == first, "entry \(index), redelivered")
            }
        }
        #expect(retried.state == final)

        // (d) A client that persists the state as a snapshot after every
        // entry and reloads it for the next (as the local store does).
        var persisted = GroupReducer(state: GroupState(groupID: GroupTest.groupID))
        for signed in log {
            _ = persisted.feed(signed)
            let bytes = FrameCodec.encode(persisted.state.snapshot)
            let snapshot = try WireGroupSnapshot(serializedBytes: bytes)
            persisted.state =
                snapshot.epoch == 0 ? GroupState(groupID: snapshot.groupID) : try GroupState(snapshot: snapshot)
        }
        #expect(persisted.state == final)
    }

    /// The newcomer check has teeth: a snapshot that forgot which commits
    /// were applied lets a re-published commit from before the cut apply
    /// (or be judged) differently.
    @Test func aSnapshotWithoutAppliedCommitIDsWouldDiverge() throws {
        var generator = try GroupLogGenerator(seed: 42)
        let log = try generator.generate(steps: Self.steps)
        let reference = try fromScratch(log)
        var divergedCuts = 0
        for cut in reference.states.indices where reference.states[cut].isCreated {
            var snapshot = reference.states[cut].snapshot
            snapshot.appliedCommitIds = []
            var newcomer = GroupReducer(state: try GroupState(snapshot: snapshot))
            var diverged = false
            for index in log.indices.dropFirst(cut + 1) {
                let outcome = newcomer.feed(log[index])
                diverged = diverged || outcome != reference.outcomes[index]
            }
            if diverged { divergedCuts += 1 }
        }
        #expect(divergedCuts > 0)
    }

    @Test(arguments: seeds.prefix(3))
    func theSameSeedGeneratesTheSameDecisions(seed: UInt64) throws {
        var one = try GroupLogGenerator(seed: seed)
        var two = try GroupLogGenerator(seed: seed)
        let first = try fromScratch(one.generate(steps: 60))
        let second = try fromScratch(two.generate(steps: 60))
        #expect(first.outcomes.count == second.outcomes.count)
        #expect(first.states.last == second.states.last)
    }
}
