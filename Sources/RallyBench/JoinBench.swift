import ArgumentParser
import Foundation
import Logging
import RallyCore
import RallyCrypto
import RallyWire

/// `rally-bench join`: how long `rally join` takes to reach joined with an
/// admin's client online, for single and concurrent joiners, and how fast
/// invites verify. Prints numbers; asserts nothing.
struct JoinBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "join", abstract: "Measure join latency (request → joined) and invite verification speed.")

    @Option(help: "Concurrent joiner counts, comma-separated.") var concurrency = "1,50"
    @Option(help: "Rounds per count (each round is a fresh set of joiners).") var rounds = 10
    @Option(help: "Invite verifications to time.") var verifications = 20_000
    @ArgumentParser.Flag(
        help: "Also print each round's p50, slowest join and CPU per join, with the group's size when the round began.")
    var perRound = false
    @Option(
        help: """
            Where the admin's client runs: 'separate' (a process of its own, as on its own device) or \
            'in-process' (sharing the joiners' process and concurrency pool).
            """)
    var admin = AdminPlacement.separate

    enum AdminPlacement: String, ExpressibleByArgument, Sendable {
        case separate
        case inProcess = "in-process"
    }

    /// The admin's client, wherever it runs, and how to stop it.
    private struct RunningAdmin {
        let inviteLink: String
        let pid: Int32?
        /// Synchronous, so a `defer` stops it when the bench fails too.
        let stop: @Sendable () -> Void
    }

    func run() async throws {
        let counts = concurrency.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !counts.isEmpty, counts.allSatisfy({ $0 >= 1 }) else { throw ValidationError("--concurrency: e.g. 1,50") }
        guard verifications >= 1 else { throw ValidationError("--verifications must be at least 1") }
        let relay = try ChildRelay.start()
        defer { relay.stop() }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("rally-bench-join-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        var logger = Logger(label: "rally.bench")
        logger.logLevel = .error
        Output.write("relay: separate process pid \(relay.pid) on \(relay.url)")

        let running = try await startAdmin(root: root, relayURL: relay.url, logger: logger)
        defer { running.stop() }
        let inviteLink = running.inviteLink
        let invite = try Invite.parse(inviteLink, now: Date())
        let slug = try InviteLink.slug(from: inviteLink)
        Output.write(
            "admin: "
                + (running.pid.map { "separate process pid \($0)" } ?? "in this process, sharing the joiners' pool"))

        Output.write(
            "joiners  joins  p50 ms  p99 ms  max ms  clients CPU ms/join  admin CPU ms/join  relay CPU ms/join"
                + "  (rally join → joined; one admin client online)")
        // Every joiner's home is made before any round is timed, so the
        // rounds' CPU figures are the joins' alone.
        var homes: [[[RallyClient]]] = []
        var serial = 0
        for count in counts {
            var countRounds: [[RallyClient]] = []
            for _ in 0..<rounds {
                var joiners: [RallyClient] = []
                for _ in 0..<count {
                    serial += 1
                    joiners.append(
                        try await RallyClient.create(
                            home: root.appendingPathComponent("j\(serial)"), relayURL: relay.url,
                            displayName: "joiner-\(serial)", logger: logger))
                }
                countRounds.append(joiners)
            }
            homes.append(countRounds)
        }
        // Every join of every round lands in the one group, so a later
        // round's joiners are welcomed into a larger group.
        var membersBefore = 1
        for (countIndex, count) in counts.enumerated() {
            var latencies: [Double] = []
            var clientCPU = 0.0
            var relayCPU = 0.0
            var adminCPU = 0.0
            for round in 0..<rounds {
                let joiners = homes[countIndex][round]
                let link = inviteLink
                let cpuBefore = (
                    ProcessCPU.milliseconds() ?? 0, ProcessCPU.milliseconds(pid: relay.pid) ?? 0,
                    running.pid.flatMap { ProcessCPU.milliseconds(pid: $0) } ?? 0
                )
                let measured = try await withThrowingTaskGroup(of: Double.self) { tasks in
                    for joiner in joiners {
                        tasks.addTask {
                            let clock = ContinuousClock()
                            let start = clock.now
                            let attempt = try await joiner.startJoin(link)
                            let final = try await joiner.waitForJoin(
                                requestID: attempt.requestID, timeout: .seconds(300))
                            guard final.phase == .joined else {
                                throw ValidationError("a bench join ended \(final.phase): \(final.userMessage)")
                            }
                            return GroupBench.milliseconds(clock.now - start)
                        }
                    }
                    var all: [Double] = []
                    for try await latency in tasks { all.append(latency) }
                    return all
                }
                let roundClientCPU = (ProcessCPU.milliseconds() ?? 0) - cpuBefore.0
                let roundRelayCPU = (ProcessCPU.milliseconds(pid: relay.pid) ?? 0) - cpuBefore.1
                let roundAdminCPU = running.pid.map { (ProcessCPU.milliseconds(pid: $0) ?? 0) - cpuBefore.2 }
                clientCPU += roundClientCPU
                relayCPU += roundRelayCPU
                adminCPU += roundAdminCPU ?? 0
                latencies += measured
                if perRound {
                    let sorted = measured.sorted()
                    let joins = Double(measured.count)
                    let admin = roundAdminCPU.map { String(format: "%.2f", $0 / joins) } ?? "(in clients)"
                    Output.write(
                        String(
                            format:
                                "  round %d: %d joiners into a group of %d: p50 %.1f ms, max %.1f ms;"
                                + " CPU ms/join clients %.2f, admin %@, relay %.2f",
                            round + 1, count, membersBefore, ReconnectBench.percentile(sorted, 0.5),
                            sorted.last ?? 0, roundClientCPU / joins, admin, roundRelayCPU / joins))
                }
                membersBefore += measured.count
                for joiner in joiners { await joiner.disconnect() }
            }
            latencies.sort()
            func percentile(_ p: Double) -> Double { ReconnectBench.percentile(latencies, p) }
            let adminColumn =
                running.pid == nil ? "(in clients)" : String(format: "%.2f", adminCPU / Double(latencies.count))
            Output.write(
                String(
                    format: "%7d  %5d  %6.1f  %6.1f  %6.1f  %19.2f  ", count, latencies.count, percentile(0.5),
                    percentile(0.99), percentile(1), clientCPU / Double(latencies.count))
                    + String(repeating: " ", count: max(0, 17 - adminColumn.count)) + adminColumn
                    + String(format: "  %17.2f", relayCPU / Double(latencies.count)))
        }

        // Distinct invites (each verified once: an Ed25519 verification
        // each), then one invite again and again (a group link many people
        // use: verified once per process, VerifiedInviteCache).
        let issuer = Identity(displayName: "bench issuer")
        let distinct = (0..<verifications).map { index in
            var payload = invite.payload
            payload.issuer = issuer.publicIdentity.wireBundle
            payload.createdAtMs = Int64(index)
            return InviteLink.links(for: InviteSlug.encode(Invite.sign(payload, by: issuer)), relayURL: relay.url).app
        }
        for (label, links) in [
            ("distinct invites", distinct),
            ("one invite, repeated", Array(repeating: inviteLink, count: verifications)),
        ] {
            let clock = ContinuousClock()
            let start = clock.now
            var verified = 0
            for link in links where (try? Invite.parse(link, now: Date())) != nil { verified += 1 }
            let seconds = GroupBench.milliseconds(clock.now - start) / 1000
            Output.write(
                String(
                    format:
                        "invite verifications, %@: %d in %.2f s = %.0f/s (slug %d characters: decode, signature, checks)",
                    label, verified, seconds, Double(verified) / seconds, slug.count))
        }
        // The ceiling for distinct invites: Ed25519 verifications alone, of
        // signatures as long as an invite's over as many bytes.
        let payloadBytes = (try? InviteSlug.decode(InviteLink.slug(from: distinct[0])))?.payload.count ?? 400
        let message = Data(count: payloadBytes)
        let signatures = (0..<min(verifications, 2000)).map { index in
            var bytes = message
            bytes[0] = UInt8(truncatingIfNeeded: index)
            bytes[1] = UInt8(truncatingIfNeeded: index >> 8)
            return (bytes, (try? issuer.signingKey.signature(for: bytes)) ?? Data())
        }
        // Then the same signatures through the issuer's key table (docs/adr/0027),
        // which invites from an issuer seen before are verified with.
        let key = issuer.publicIdentity.signingKey
        let table = Ed25519KeyTable(key)
        let verifiers: [(String, (Data, Data) -> Bool)] = [
            ("alone (swift-crypto, one core)", { key.isValidSignature($1, for: $0) }),
            ("with the issuer's key table (one core)", { table?.isValidSignature($1, for: $0) ?? false }),
        ]
        for (label, verify) in verifiers {
            let clock = ContinuousClock()
            let start = clock.now
            var valid = 0
            for _ in 0..<max(1, verifications / signatures.count) {
                for (bytes, signature) in signatures where verify(bytes, signature) { valid += 1 }
            }
            let seconds = GroupBench.milliseconds(clock.now - start) / 1000
            Output.write(
                String(
                    format: "Ed25519 verifications %@: %d in %.2f s = %.0f/s", label, valid, seconds,
                    Double(valid) / seconds))
        }
        Self.timeSnapshotReading(members: 500)
        Output.write("relay peak memory (VmHWM): \(relay.peakMemoryKiB().map { "\($0 / 1024) MiB" } ?? "unknown")")
    }

    /// What a joiner spends reading the welcome's snapshot of a large
    /// group into its state: the codec's reading (its growing fields by
    /// hand) against SwiftProtobuf's alone, timed in the same run.
    static func timeSnapshotReading(members: Int) {
        let owner = Identity(displayName: "owner")
        var snapshot = WireGroupSnapshot()
        snapshot.groupID = String(repeating: "a", count: 32)
        snapshot.epoch = UInt64(members)
        snapshot.transcript = Data(count: 32)
        snapshot.members = (0..<members).map { index in
            var record = WireGroupMemberRecord()
            record.identity =
                index == 0
                ? owner.publicIdentity.wireBundle : Identity(displayName: "joiner \(index)").publicIdentity.wireBundle
            record.role = index == 0 ? .owner : .member
            record.addedBy = index == 0 ? "" : owner.inboxID.rawValue
            return record
        }
        snapshot.admittedJoinRequests = (0..<members).map { _ in MessageSealing.newMessageID() }
        let bytes = FrameCodec.encode(snapshot)
        let readers: [(String, (Data) throws -> WireGroupSnapshot)] = [
            ("SwiftProtobuf alone", { try FrameCodec.decode(WireGroupSnapshot.self, from: $0, limit: .max) }),
            ("the codec (growing fields by hand)", { try FrameCodec.decodeGroupSnapshot($0, limit: .max) }),
        ]
        let repeats = 200
        for (label, read) in readers {
            let clock = ContinuousClock()
            var decoded: [WireGroupSnapshot] = []
            decoded.reserveCapacity(repeats)
            let start = clock.now
            for _ in 0..<repeats { if let snapshot = try? read(bytes) { decoded.append(snapshot) } }
            let read = clock.now
            let built = decoded.filter { (try? GroupState(snapshot: $0))?.members.count == members }.count
            let end = clock.now
            Output.write(
                String(
                    format:
                        "group snapshot of %d members (%d KB), %@: read %.3f ms, state built %.3f ms (%d of %d built)",
                    members, bytes.count / 1024, label, GroupBench.milliseconds(read - start) / Double(repeats),
                    GroupBench.milliseconds(end - read) / Double(repeats), built, repeats))
        }
    }

    private func startAdmin(root: URL, relayURL: URL, logger: Logger) async throws -> RunningAdmin {
        let home = root.appendingPathComponent("admin")
        switch admin {
        case .separate:
            let child = try ChildAdmin.start(home: home, relayURL: relayURL)
            return RunningAdmin(inviteLink: child.inviteLink, pid: child.pid) { child.stop() }
        case .inProcess:
            let client = try await RallyClient.create(
                home: home, relayURL: relayURL, displayName: "admin", logger: logger)
            let group = try await client.createGroup(name: "bench")
            let invite = try await client.createInvite(in: group.groupID)
            let watcher = Task { try await client.watch { _ in } }
            return RunningAdmin(inviteLink: invite.appLink, pid: nil) { watcher.cancel() }
        }
    }

}
