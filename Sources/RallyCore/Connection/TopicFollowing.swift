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
    /// `untilCaughtUp`, returns once the backlog is processed; otherwise
    /// follows live on a link of its own until cancelled, reconnecting and
    /// resubscribing from the cursor after drops. `access` is read again on
    /// every subscription: a commit that rotated the topic's key ends the
    /// old key's subscription at that commit.
    func followTopic(
        _ topic: TopicName, untilCaughtUp: Bool,
        access: () throws(RallyClientError) -> TopicAccess? = { nil },
        process: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void,
        caughtUp: @Sendable () async -> Void = {}
    ) async throws(RallyClientError) {
        var live: (any RelayLink)?
        do {
            try await follow(
                topic, untilCaughtUp: untilCaughtUp, live: &live, access: access, process: process,
                caughtUp: caughtUp)
        } catch {
            await live?.close()
            throw error
        }
        await live?.close()
    }

    private func link(
        untilCaughtUp: Bool, live: inout (any RelayLink)?
    ) async throws(RelayClientError)
        -> any RelayLink
    {
        if untilCaughtUp { return try await links.connected() }
        if let open = live, await open.isOpen { return open }
        let fresh = try await links.dedicated()
        live = fresh
        return fresh
    }

    private func follow(
        _ topic: TopicName, untilCaughtUp: Bool, live: inout (any RelayLink)?,
        access: () throws(RallyClientError) -> TopicAccess?,
        process: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void,
        caughtUp: @Sendable () async -> Void
    ) async throws(RallyClientError) {
        var attempt = 0
        while !Task.isCancelled {
            let link: any RelayLink
            do {
                link = try await self.link(untilCaughtUp: untilCaughtUp, live: &live)
            } catch {
                guard !untilCaughtUp, error.isTransient else { throw .relay(error) }
                attempt += 1
                logger.info("retrying the subscription to \(topic) after: \(error)")
                await pause(attempt)
                continue
            }
            let cursor = try stored { () throws(LocalStoreError) in try store.cursor(for: topic) }
            let key = try access()
            let events = await link.subscribe(topic: topic, after: cursor, access: key)
            do {
                for try await event in events {
                    attempt = 0
                    switch event {
                    case .envelope(let envelope):
                        guard envelope.seq > (try store.cursor(for: topic)) else { continue }
                        try await process(envelope)
                    case .caughtUp:
                        await caughtUp()
                        if untilCaughtUp {
                            await link.unsubscribe(topic: topic)
                            return
                        }
                    }
                }
                if untilCaughtUp { throw RallyClientError.relay(.disconnected("subscription ended")) }
            } catch let error as RallyClientError {
                throw error
            } catch let error as LocalStoreError {
                throw .store(error)
            } catch let error as RelayClientError {
                if case .accessRevoked = error {
                    // The key this subscription used was replaced at an
                    // entry it has now read. With the new key from that
                    // entry, read on; without one, the caller judges why.
                    guard let current = try access(), current.publicKey != key?.publicKey else {
                        throw .relay(error)
                    }
                    continue
                }
                guard error.isTransient, !untilCaughtUp else { throw .relay(error) }
                await live?.close()
                live = nil
                attempt += 1
                logger.info("retrying the subscription to \(topic) after: \(error)")
                await pause(attempt)
            } catch {
                throw .relay(.disconnected("\(error)"))
            }
        }
    }
}
