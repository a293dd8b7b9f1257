import Foundation
import NIOCore
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
        /// The subscription's access key was retired and everything it may
        /// read was delivered; the subscriber was told with ACCESS_REVOKED.
        case revoked
    }

    /// Thrown inside the feed once the key's last readable seq is reached.
    private struct Revoked: Error {}

    let topic: String
    let requestID: UInt64
    let cursor: UInt64
    let services: RelayServices
    let send: RelaySession.Send
    let sendEncoded: RelaySession.SendEncoded
    /// The access key the subscription was opened with (nil: an inbox).
    var accessKey: Data? = nil
    /// The last seq that key may read (nil: unbounded, the current key).
    var readBound: UInt64? = nil
    /// Writes a live envelope to the subscriber's socket without waiting,
    /// or returns false (nil: every envelope goes through this feed).
    var writeLive: LiveDelivery.Write? = nil

    /// Where delivery stands: what was sent, and how far the key may read.
    private struct Progress {
        var lastSent: UInt64
        var bound: UInt64?
        var subscribed = false
        /// Told of every seq sent, so the hub's direct writes follow on.
        let live: LiveDelivery?
    }

    /// The hub registration and delivery state the phases of a feed share.
    private struct Feeding {
        var subscription: TopicHub.Subscription
        var progress: Progress
    }

    /// Each phase (catching up, following the hub, each way of ending) is a
    /// function of its own, never inlined, so that this frame, which an
    /// idle subscription's task holds for as long as the subscription
    /// lasts, keeps only what the phases share. With all of them in this
    /// frame it took 2.7 KiB of the task's memory; 10,000 idle subscribed
    /// clients took 261.5 MiB of the relay instead of 235.5 (`rally-bench
    /// idle`). ``deliver(_:retiredKey:frame:_:)`` is kept out for the same
    /// reason. A catch-up in a task of its own, to free its deeper frames,
    /// took more (268 MiB), as did one in an `async let` (280 MiB).
    func run() async -> Outcome {
        let live = liveDelivery()
        defer { live?.stop() }
        var feeding = Feeding(
            subscription: register(live: live),
            progress: Progress(lastSent: cursor, bound: readBound, live: live))
        do {
            if let outcome = try await catchUp(&feeding) { return outcome }
            try await followLive(&feeding)
            return await ended(feeding)
        } catch is Revoked {
            return await revoked(feeding)
        } catch let failure as RelayFailure {
            return await failed(failure, feeding)
        } catch {
            services.hub.unsubscribe(feeding.subscription.id)
            return .stopped
        }
    }

    /// The backlog after the cursor, then `Subscribed`; an outcome when the
    /// feed ends here (a subscriber too slow to catch up).
    @inline(never)
    private func catchUp(_ feeding: inout Feeding) async throws -> Outcome? {
        let hub = services.hub
        if let accessKey, let name = try? TopicName(validating: topic) {
            // Read again after registering with the hub: a rotation
            // committed since the session's check is in the key chain,
            // and any later one reaches the hub buffer.
            feeding.progress.bound = try await services.readBound(topic: name, key: accessKey)
        }
        if let bound = feeding.progress.bound, feeding.progress.lastSent >= bound { throw Revoked() }
        var resyncs = 0
        while true {
            try await replayBacklog(&feeding.progress)
            guard hub.endReason(feeding.subscription.id) == .overflowed else { break }
            // The buffer filled while the backlog was replayed; the store
            // still has everything, so start a fresh buffer and read on.
            hub.unsubscribe(feeding.subscription.id)
            guard resyncs < services.limits.maxCatchUpResyncs else { return await slowConsumer() }
            resyncs += 1
            feeding.progress.live?.newBuffer()
            feeding.subscription = register(live: feeding.progress.live)
        }
        var subscribed = WireSubscribed()
        subscribed.topic = topic
        subscribed.caughtUpSeq = feeding.progress.lastSent
        var frame = WireServerFrame()
        frame.requestID = requestID
        frame.subscribed = subscribed
        try await send(frame)
        feeding.progress.subscribed = true
        // A key with a read bound ends the subscription at it: this
        // feed sends everything, to see the end.
        if feeding.progress.bound == nil { feeding.progress.live?.goLive(after: feeding.progress.lastSent) }
        return nil
    }

    /// Live envelopes from the hub's buffer, until it ends.
    @inline(never)
    private func followLive(_ feeding: inout Feeding) async throws {
        for await item in feeding.subscription.items {
            if let live = feeding.progress.live {
                feeding.progress.lastSent = max(feeding.progress.lastSent, live.took())
            }
            guard item.envelope.seq > feeding.progress.lastSent else { continue }
            if item.envelope.seq > feeding.progress.lastSent + 1 {
                // A gap: with several nodes, this node's own commits can
                // reach the hub before another node's earlier ones.
                // Everything up to this seq is committed: read it in order.
                try await replayBacklog(&feeding.progress)
                if item.envelope.seq <= feeding.progress.lastSent { continue }
            }
            try await deliver(item.envelope, retiredKey: item.retiredKey, frame: item.frame, &feeding.progress)
        }
        try Task.checkCancellation()
    }

    /// The hub's buffer ended: why says how the feed ends.
    @inline(never)
    private func ended(_ feeding: Feeding) async -> Outcome {
        switch services.hub.unsubscribe(feeding.subscription.id) {
        case .overflowed?: return await slowConsumer()
        case .shutDown?: return await shuttingDown()
        default: return .stopped
        }
    }

    @inline(never)
    private func revoked(_ feeding: Feeding) async -> Outcome {
        services.hub.unsubscribe(feeding.subscription.id)
        let bound = feeding.progress.bound ?? feeding.progress.lastSent
        let failure = RelayFailure(
            .accessRevoked, "this access key was replaced; it may read up to seq \(bound)", topic: topic,
            seq: bound)
        // Before `Subscribed` it answers the subscribe; after, it is pushed.
        try? await send(services.errorFrame(failure, requestID: feeding.progress.subscribed ? 0 : requestID))
        return .revoked
    }

    @inline(never)
    private func failed(_ failure: RelayFailure, _ feeding: Feeding) async -> Outcome {
        services.hub.unsubscribe(feeding.subscription.id)
        try? await send(services.errorFrame(failure, requestID: feeding.progress.subscribed ? 0 : requestID))
        return .failed
    }

    /// A buffer of the topic's live envelopes at the hub, from now on.
    private func register(live: LiveDelivery?) -> TopicHub.Subscription {
        services.hub.subscribe(topic: topic, capacity: services.limits.subscriberBufferSize, live: live)
    }

    /// The hub's direct path for this subscription, counting what it
    /// delivers like the feed does.
    private func liveDelivery() -> LiveDelivery? {
        guard let writeLive else { return nil }
        let metrics = services.metrics
        return LiveDelivery { frame in
            guard writeLive(frame) else { return false }
            metrics.deliveries.increment()
            metrics.liveWrites.increment()
            return true
        }
    }

    private func replayBacklog(_ progress: inout Progress) async throws {
        let pageSize = max(1, services.limits.backlogPageSize)
        while true {
            try Task.checkCancellation()
            let page: FetchResult
            do {
                page = try await services.store.fetch(
                    topic: topic, after: progress.lastSent, limit: pageSize,
                    maxBytes: services.limits.backlogPageBytes, nowMilliseconds: services.clock.nowMilliseconds)
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                services.logger.error("backlog read failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
                throw RelayFailure(.internal, "could not read the topic", topic: topic)
            }
            for envelope in page.envelopes {
                try await deliver(envelope, retiredKey: page.retiredKeys[envelope.seq], frame: nil, &progress)
            }
            // Entries up to the bound may have expired: the key has read all
            // it may once the head is past it.
            if let bound = progress.bound, page.headSeq >= bound, page.envelopes.isEmpty { throw Revoked() }
            // A page short by count ends the backlog unless it was cut by
            // bytes (its last seq is then below the head).
            guard let last = page.envelopes.last else { return }
            if page.envelopes.count < pageSize, last.seq >= page.headSeq { return }
        }
    }

    /// `frame` is the envelope already encoded (a live one, by the hub for
    /// all its subscribers); a backlog envelope is encoded here.
    ///
    /// Never inlined: inlined into `run()`, its locals joined the frame an
    /// idle subscription's task keeps while it waits, and the relay held
    /// 10,000 idle subscribed clients in 305 MiB instead of 277.
    @inline(never)
    private func deliver(
        _ envelope: WireEnvelope, retiredKey: Data?, frame encoded: ByteBuffer?, _ progress: inout Progress
    ) async throws {
        if let bound = progress.bound, envelope.seq > bound { throw Revoked() }
        try await sendEncoded(encoded ?? TopicHub.encodedFrame(envelope))
        services.metrics.deliveries.increment()
        progress.lastSent = envelope.seq
        if progress.bound == nil, let accessKey, retiredKey == accessKey { progress.bound = envelope.seq }
        if let bound = progress.bound, envelope.seq >= bound { throw Revoked() }
        // Only past the bound checks: the hub writes nothing after a seq
        // that ends the subscription.
        progress.live?.sent(through: envelope.seq)
    }

    /// The relay is stopping: the subscription ends with `SHUTTING_DOWN`
    /// for its topic, so the client knows to reconnect (with jitter) rather
    /// than count a failure, whether or not the connection-wide notice
    /// reaches it before the socket closes.
    private func shuttingDown() async -> Outcome {
        let failure = RelayFailure(
            .shuttingDown, "the relay is shutting down; subscribe again from your cursor", topic: topic)
        try? await send(services.errorFrame(failure, requestID: 0))
        return .stopped
    }

    private func slowConsumer() async -> Outcome {
        let failure = RelayFailure(
            .slowConsumer, "the subscription fell too far behind; subscribe again from your cursor", topic: topic)
        // Pushed, not a reply: the subscribe was answered long ago.
        try? await send(services.errorFrame(failure, requestID: 0))
        return .slowConsumer
    }
}
