import RallyWire

/// Delivers one topic to one subscriber: the backlog after its cursor, then
/// `Subscribed`, then live envelopes, with no gap and no duplicate.
///
/// It registers with the hub *before* reading the store. Every envelope is
/// then either committed before a store read started (so the read sees it)
/// or offered to the hub after registration (so the buffer holds it);
/// envelopes seen both ways are skipped by seq.
struct SubscriptionFeed: Sendable {
    enum Outcome: Sendable, Equatable {
        /// Cancelled, the connection went away, or the relay shut down.
        case stopped
        /// The subscriber fell behind; it was told with SLOW_CONSUMER.
        case slowConsumer
        /// The store failed; the subscriber was told with INTERNAL.
        case failed
    }

    let topic: String
    let requestID: UInt64
    let cursor: UInt64
    let services: RelayServices
    let send: RelaySession.Send

    func run() async -> Outcome {
        let hub = services.hub
        let capacity = services.limits.subscriberBufferSize
        var subscription = await hub.subscribe(topic: topic, capacity: capacity)
        var lastSent = cursor
        do {
            var resyncs = 0
            while true {
                try await replayBacklog(lastSent: &lastSent)
                guard await hub.endReason(subscription.id) == .overflowed else { break }
                // The buffer filled while the backlog was replayed; the store
                // still has everything, so start a fresh buffer and read on.
                await hub.unsubscribe(subscription.id)
                guard resyncs < services.limits.maxCatchUpResyncs else { return await slowConsumer() }
                resyncs += 1
                subscription = await hub.subscribe(topic: topic, capacity: capacity)
            }
            var subscribed = WireSubscribed()
            subscribed.topic = topic
            subscribed.caughtUpSeq = lastSent
            var frame = WireServerFrame()
            frame.requestID = requestID
            frame.subscribed = subscribed
            try await send(frame)

            for await envelope in subscription.envelopes where envelope.seq > lastSent {
                try await deliver(envelope)
                lastSent = envelope.seq
            }
            try Task.checkCancellation()
            if await hub.unsubscribe(subscription.id) == .overflowed { return await slowConsumer() }
            return .stopped
        } catch let failure as RelayFailure {
            await hub.unsubscribe(subscription.id)
            try? await send(services.errorFrame(failure, requestID: requestID))
            return .failed
        } catch {
            await hub.unsubscribe(subscription.id)
            return .stopped
        }
    }

    private func replayBacklog(lastSent: inout UInt64) async throws {
        let pageSize = max(1, services.limits.backlogPageSize)
        while true {
            try Task.checkCancellation()
            let page: FetchResult
            do {
                page = try await services.store.fetch(
                    topic: topic, after: lastSent, limit: pageSize, nowMilliseconds: services.clock.nowMilliseconds)
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                services.logger.error("backlog read failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
                throw RelayFailure(.internal, "could not read the topic", topic: topic)
            }
            for envelope in page.envelopes {
                try await deliver(envelope)
                lastSent = envelope.seq
            }
            if page.envelopes.count < pageSize { return }
        }
    }

    private func deliver(_ envelope: WireEnvelope) async throws {
        var frame = WireServerFrame()
        frame.envelope = envelope
        try await send(frame)
        services.metrics.deliveries.increment()
    }

    private func slowConsumer() async -> Outcome {
        let failure = RelayFailure(
            .slowConsumer, "the subscription fell too far behind; subscribe again from your cursor", topic: topic)
        // Pushed, not a reply: the subscribe was answered long ago.
        try? await send(services.errorFrame(failure, requestID: 0))
        return .slowConsumer
    }
}
