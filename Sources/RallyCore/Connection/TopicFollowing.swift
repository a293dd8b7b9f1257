import Foundation
import RallyCrypto
import RallyWire

extension ClientContext {
    /// How often an idempotent request is retried on a new link after a
    /// transient failure.
    static let requestAttempts = 5

    /// Runs `operation` on the shared link, reconnecting and retrying on
    /// transient failures with the context's backoff. Only for idempotent
    /// operations (publishes carry an idempotency key).
    func withRetries<T: Sendable>(
        _ what: String, _ operation: (any RelayLink) async throws(RelayClientError) -> T
    ) async throws(RallyClientError) -> T {
        var lastError = RelayClientError.disconnected("no attempt made")
        for attempt in 1...Self.requestAttempts {
            do throws(RelayClientError) {
                let link = try await links.connected()
                do throws(RelayClientError) {
                    return try await operation(link)
                } catch {
                    if case .refused = error {} else if error.isTransient { await links.disconnect() }
                    throw error
                }
            } catch {
                guard error.isTransient else { throw .relay(error) }
                lastError = error
                logger.info("retrying \(what) after: \(error)")
                if attempt < Self.requestAttempts { await pause(attempt) }
            }
        }
        throw .relay(lastError)
    }

    /// Waits the backoff's pause before attempt `attempt`.
    func pause(_ attempt: Int) async {
        try? await clock.sleep(backoff.delay(attempt: attempt))
    }

    /// Subscribes to a topic from its stored cursor and hands each envelope
    /// to `process` in seq order; anything at or below the cursor is
    /// skipped, so a backlog overlapping a reconnect is handled once. With
    /// `untilCaughtUp`, returns once the backlog is processed (a transport
    /// failure is thrown to the caller). Otherwise follows live on a link
    /// of its own until cancelled or the user leaves: it reports its health
    /// to the connection monitor, pings a quiet link, and after a drop
    /// climbs the recovery ladder until it is subscribed again from the
    /// cursor. `access` is read again on every subscription: a commit that
    /// rotated the topic's key ends the old key's subscription at that
    /// commit.
    ///
    /// A live follower hands `readElsewhere` each envelope that arrives at
    /// or below the cursor: another process on this home (or another
    /// reader in this one) processed it first, so the follower shows what
    /// was stored instead of missing it (docs/adr/0026).
    func followTopic(
        _ topic: TopicName, untilCaughtUp: Bool,
        access: () throws(RallyClientError) -> TopicAccess? = { nil },
        process: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void,
        readElsewhere: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void = { _ in },
        caughtUp: @Sendable () async -> Void = {}
    ) async throws(RallyClientError) {
        if untilCaughtUp {
            try await catchUp(topic, access: access, process: process, caughtUp: caughtUp)
            return
        }
        var follower = LiveFollower(
            context: self, topic: topic, party: await monitor.join(),
            ladder: RecoveryLadder(backoff: policy.backoff, rungs: links.transports.rungs),
            generation: await monitor.transportGeneration)
        do {
            try await follower.run(
                access: access, process: process, readElsewhere: readElsewhere, caughtUp: caughtUp)
        } catch {
            await follower.end(gone: true)
            throw error
        }
        await follower.end(gone: false)
    }

    /// The message this home stored at `envelope`'s place, if that entry
    /// was one it kept: what a reader shows for an entry another reader
    /// stored first (docs/adr/0026).
    func storedMessage(at envelope: WireEnvelope) throws(RallyClientError) -> StoredMessage? {
        try stored { () throws(LocalStoreError) in try store.message(topic: envelope.topic, seq: envelope.seq) }
    }

    /// Reads a topic's backlog on the shared link and returns.
    private func catchUp(
        _ topic: TopicName, access: () throws(RallyClientError) -> TopicAccess?,
        process: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void,
        caughtUp: @Sendable () async -> Void
    ) async throws(RallyClientError) {
        while !Task.isCancelled {
            let link: any RelayLink
            do {
                link = try await links.connected()
            } catch {
                throw .relay(error)
            }
            let key = try access()
            let outcome = try await read(
                topic, on: link, key: key, untilCaughtUp: true, access: access, process: process,
                caughtUp: caughtUp)
            switch outcome {
            case .caughtUp: return
            case .keyReplaced: continue
            case .dropped(let error):
                if error.isTransient { await links.disconnect() }
                throw .relay(error)
            }
        }
    }

    /// How one subscription ended.
    enum ReadOutcome {
        case caughtUp
        /// The subscription's access key was replaced by a commit it read;
        /// subscribe again with the new one.
        case keyReplaced
        case dropped(RelayClientError)
    }

    /// Subscribes on `link` from the stored cursor and processes events
    /// until the backlog is read (`untilCaughtUp`) or the stream ends.
    func read(
        _ topic: TopicName, on link: any RelayLink, key: TopicAccess?, untilCaughtUp: Bool,
        access: () throws(RallyClientError) -> TopicAccess?,
        process: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void,
        readElsewhere: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void = { _ in },
        caughtUp: @Sendable () async -> Void
    ) async throws(RallyClientError) -> ReadOutcome {
        let cursor = try stored { () throws(LocalStoreError) in try store.cursor(for: topic) }
        let events = await link.subscribe(topic: topic, after: cursor, access: key)
        // The last place this subscription handed on: a place again (a
        // relay replaying) is dropped, not shown twice.
        var handled = cursor
        do {
            for try await event in events {
                switch event {
                case .envelope(let envelope):
                    guard envelope.seq > handled else { continue }
                    handled = envelope.seq
                    guard envelope.seq > (try store.cursor(for: topic)) else {
                        try await readElsewhere(envelope)
                        continue
                    }
                    try await process(envelope)
                case .caughtUp:
                    await caughtUp()
                    if untilCaughtUp {
                        await link.unsubscribe(topic: topic)
                        return .caughtUp
                    }
                }
            }
            return .dropped(.disconnected("the subscription ended"))
        } catch let error as RallyClientError {
            throw error
        } catch let error as LocalStoreError {
            throw .store(error)
        } catch let error as RelayClientError {
            if case .accessRevoked = error {
                // The key this subscription used was replaced at an entry
                // it has now read. With the new key from that entry, read
                // on; without one, the caller judges why.
                guard let current = try access(), current.publicKey != key?.publicKey else {
                    throw .relay(error)
                }
                return .keyReplaced
            }
            return .dropped(error)
        } catch {
            return .dropped(.disconnected("\(error)"))
        }
    }
}

/// One live follower: its link, its place on the recovery ladder and its
/// health as the connection monitor sees it.
struct LiveFollower {
    let context: ClientContext
    let topic: TopicName
    let party: UInt64
    var ladder: RecoveryLadder
    /// The monitor's transport generation this follower's link belongs to.
    var generation: UInt64
    var live: (any RelayLink)?
    /// The recovery step to take before subscribing again.
    var pending: RecoveryLadder.Step?

    init(context: ClientContext, topic: TopicName, party: UInt64, ladder: RecoveryLadder, generation: UInt64) {
        self.context = context
        self.topic = topic
        self.party = party
        self.ladder = ladder
        self.generation = generation
    }

    mutating func run(
        access: () throws(RallyClientError) -> TopicAccess?,
        process: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void,
        readElsewhere: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void,
        caughtUp: @Sendable () async -> Void
    ) async throws(RallyClientError) {
        let monitor = context.monitor
        let party = self.party
        let outbox = context.outbox
        let logger = context.logger
        while !Task.isCancelled {
            if await monitor.hasLeft { return }
            if let step = pending {
                guard await climb(step) else { continue }
                pending = nil
            }
            let link: any RelayLink
            if let open = live {
                link = open
            } else {
                do {
                    link = try await context.links.dedicated()
                    live = link
                } catch {
                    await trouble(error, reason: .transportError)
                    continue
                }
            }
            let key = try access()
            let heartbeat = Heartbeat.start(on: link, context: context)
            let subscribed = Subscribed()
            let outcome = try await context.read(
                topic, on: link, key: key, untilCaughtUp: false, access: access, process: process,
                readElsewhere: readElsewhere,
                caughtUp: {
                    await subscribed.mark()
                    await monitor.report(party, .live)
                    // The relay is reachable again: send what was typed
                    // meanwhile.
                    do throws(RallyClientError) {
                        try await outbox.flush()
                    } catch {
                        logger.warning("could not send queued messages: \(error)")
                    }
                    await caughtUp()
                })
            let missedPing = await heartbeat.stop()
            if await subscribed.marked { ladder.recovered() }
            switch outcome {
            case .caughtUp, .keyReplaced:
                continue
            case .dropped(let error):
                guard error.isTransient else { throw .relay(error) }
                let now = await monitor.transportGeneration
                if now != generation {
                    // The client moved between transports: not trouble.
                    generation = now
                    await live?.close()
                    live = nil
                    continue
                }
                await trouble(error, reason: missedPing ? .missedPings : .transportError)
            }
        }
    }

    /// Records a failure and picks the next rung.
    private mutating func trouble(_ error: RelayClientError, reason: ConnectionDegradation) async {
        context.logger.info("the subscription to \(topic) dropped: \(error)")
        await context.monitor.report(party, .recovering(reason))
        if error.code == .shuttingDown {
            pending = ladder.afterShutdownNotice(window: context.policy.shutdownJitter, unit: .random(in: 0...1))
        } else {
            pending = ladder.next(unit: .random(in: 0...1))
        }
    }

    /// Waits the step's pause and tries its rung; true when it gave this
    /// follower a link to subscribe on.
    private mutating func climb(_ planned: RecoveryLadder.Step) async -> Bool {
        let monitor = context.monitor
        var step = planned
        if step.rung == .ping {
            let open = await live?.isOpen ?? false
            // The drop closed the link: there is nothing to ping.
            if !open { step = ladder.skipping(step) }
        }
        await monitor.attempted(step.rung)
        try? await context.clock.sleep(step.delay)
        context.logger.info("recovering \(topic): attempt \(step.attempt), \(step.rung.rawValue)")
        do throws(RelayClientError) {
            switch step.rung {
            case .ping:
                guard let old = live, await old.isOpen else { throw .disconnected("the link is closed") }
                try await Heartbeat.ping(old, timeout: context.policy.heartbeatTimeout)
            case .reconnect:
                await live?.close()
                live = nil
                live = try await context.links.reconnected()
            case .reauthenticate:
                await live?.close()
                live = nil
                await context.links.disconnect()
                let fresh = try await context.links.reconnected()
                live = fresh
                try await fresh.putKeyBundle(context.identity.signedKeyBundle())
            case .httpFallback:
                await live?.close()
                live = nil
                live = try await context.links.fellBack()
            }
            generation = await monitor.transportGeneration
            return true
        } catch {
            context.logger.info("recovering \(topic): \(step.rung.rawValue) failed: \(error)")
            pending = ladder.next(unit: .random(in: 0...1))
            return false
        }
    }

    /// Leaves the monitor and closes the link. `gone`: the follower ended
    /// on a refusal no retry changes (see ``ConnectionMonitor/gone(party:)``).
    func end(gone: Bool) async {
        if gone {
            await context.monitor.gone(party: party)
        } else {
            await context.monitor.leave(party: party)
        }
        await live?.close()
    }
}

/// Whether a subscription caught up: then the follower's ladder starts
/// from the bottom at its next trouble.
private actor Subscribed {
    var marked = false
    func mark() { marked = true }
}

/// Pings a live subscription's link while it is quiet; a ping not answered
/// in time closes the link (the subscription then ends) and counts as a
/// missed ping.
struct Heartbeat {
    let task: Task<Bool, Never>

    static func start(on link: any RelayLink, context: ClientContext) -> Heartbeat {
        let interval = context.policy.heartbeatInterval
        let timeout = context.policy.heartbeatTimeout
        let clock = context.clock
        return Heartbeat(
            task: Task {
                while !Task.isCancelled {
                    do {
                        try await clock.sleep(interval)
                    } catch {
                        return false
                    }
                    do throws(RelayClientError) {
                        try await ping(link, timeout: timeout)
                    } catch {
                        if Task.isCancelled { return false }
                        await link.close()
                        return true
                    }
                }
                return false
            })
    }

    /// Whether the heartbeat closed the link for a missed ping.
    func stop() async -> Bool {
        task.cancel()
        return await task.value
    }

    /// Pings `link`, failing with `.timedOut` after `timeout`.
    static func ping(_ link: any RelayLink, timeout: Duration) async throws(RelayClientError) {
        do {
            try await withTimeout(timeout, what: "ping") { try await link.ping() }
        } catch let error as RelayClientError {
            throw error
        } catch {
            throw .disconnected("\(error)")
        }
    }
}
