import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

/// Runs `connect` again after a transient relay error (a connection refused
/// for a moment, an authentication that came late on a loaded machine), at
/// most `attempts` times, as the SDK's own retries do.
func retryingTransient<Link>(attempts: Int = 10, _ connect: () async throws -> Link) async throws -> Link {
    var attempt = 1
    while true {
        do {
            return try await connect()
        } catch let error as RelayClientError where error.isTransient && attempt < attempts {
            attempt += 1
        }
    }
}

/// Publishers writing to one capability topic through a relay until it is
/// killed under them: `kill` runs once `killAfter` publishes were
/// acknowledged, so it lands while commits are in flight. Returns what each
/// acknowledged seq carried.
func publishUntilKilled(
    relayURL: URL, identity: Identity, topic: TopicName, access: TopicAccess, workers: Int = 4,
    killAfter: Int = 200, kill: () async -> Void
) async -> [UInt64: Data] {
    actor Acks {
        var bySeq: [UInt64: Data] = [:]
        func add(_ seq: UInt64, _ payload: Data) { bySeq[seq] = payload }
    }
    let acks = Acks()
    let (progress, progressContinuation) = AsyncStream<Int>.makeStream()
    let publishers = (0..<workers).map { worker in
        Task {
            guard
                let connection = try? await retryingTransient({
                    try await RelayConnection.connect(to: relayURL, identity: identity, logger: TestLogger.quiet)
                })
            else {
                Issue.record("publisher \(worker) could not connect to \(relayURL)")
                return
            }
            for index in 0..<10_000 {
                let payload = Data("worker \(worker) message \(index)".utf8)
                guard
                    let ack = try? await connection.publish(
                        topic: topic, payload: payload, idempotencyKey: MessageSealing.newMessageID(),
                        access: access)
                else { return }
                await acks.add(ack.seq, payload)
                progressContinuation.yield(1)
            }
        }
    }
    // If every publisher stops before `killAfter` acknowledgements, the
    // count below ends there instead of waiting forever (the caller's
    // checks then fail on the count).
    let allStopped = Task {
        for publisher in publishers { await publisher.value }
        progressContinuation.finish()
    }
    defer { allStopped.cancel() }
    var acknowledged = 0
    for await _ in progress {
        acknowledged += 1
        if acknowledged == killAfter { break }
    }
    await kill()
    for publisher in publishers { await publisher.value }
    return await acks.bySeq
}

/// The topic's stored envelopes are gap-free from 1 and every acknowledged
/// seq holds the payload its publisher was told.
func expectAcknowledgedStored(_ acked: [UInt64: Data], _ stored: [WireEnvelope], atLeast: Int = 200) {
    #expect(acked.count >= atLeast)
    #expect(stored.map(\.seq) == Array(1...UInt64(stored.count)))
    let storedBySeq = Dictionary(uniqueKeysWithValues: stored.map { ($0.seq, $0.payload) })
    for (seq, payload) in acked {
        #expect(storedBySeq[seq] == payload, "acknowledged seq \(seq) lost or altered")
    }
}
