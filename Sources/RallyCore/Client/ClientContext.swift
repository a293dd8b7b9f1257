import Foundation
import Logging
import RallyCrypto
import RallyWire

/// What every capability's service works with: who this client is, its
/// home's database, its links to the relay, its clock and its codecs.
/// Services are values over one context; the context's only mutable part
/// is the shared link, held by an actor.
struct ClientContext: Sendable {
    let identity: Identity
    let store: LocalStore
    let links: RelayLinks
    let clock: ClientClock
    let backoff: Backoff
    let policy: ConnectionPolicy
    let codecs: CodecRegistry
    let logger: Logger
    /// Serializes this process's flushes of the home's outbox.
    let outboxGate: FlushGate
    /// Where queued group messages are sealed and sent.
    let outboxRoutes: OutboxRoutes

    /// `transports`: how to reach the relay (and whether there is an HTTP
    /// fallback); `monitor`: the client's one connection status, shared
    /// with the contexts it acts as.
    init(
        identity: Identity, store: LocalStore, transports: RelayTransports, monitor: ConnectionMonitor,
        clock: ClientClock, policy: ConnectionPolicy, codecs: CodecRegistry, logger: Logger,
        outboxGate: FlushGate = FlushGate(), outboxRoutes: OutboxRoutes = OutboxRoutes()
    ) {
        self.identity = identity
        self.store = store
        self.links = RelayLinks(transports: transports, identity: identity, monitor: monitor, policy: policy)
        self.clock = clock
        self.backoff = policy.backoff
        self.policy = policy
        self.codecs = codecs
        self.logger = logger
        self.outboxGate = outboxGate
        self.outboxRoutes = outboxRoutes
    }

    /// The home's queue of outgoing publishes.
    var outbox: OutboxService { OutboxService(context: self, gate: outboxGate, routes: outboxRoutes) }

    var relayURL: URL { links.transports.primary.relayURL }
    var monitor: ConnectionMonitor { links.monitor }

    /// The same home, relay and clock, acting as another identity (a
    /// group's invite identity), with links of its own and the same
    /// connection status.
    func acting(as other: Identity) -> ClientContext {
        ClientContext(
            identity: other, store: store, transports: links.transports, monitor: links.monitor, clock: clock,
            policy: policy, codecs: codecs, logger: logger, outboxGate: outboxGate, outboxRoutes: outboxRoutes)
    }

    var inboxTopic: TopicName {
        // An inbox id is 32 base32 characters, always a valid topic id.
        try! TopicName.inbox(identity.inboxID.rawValue)
    }

    /// Runs a store operation, turning its failure into the SDK's error.
    @discardableResult
    func stored<T>(_ operation: () throws(LocalStoreError) -> T) throws(RallyClientError) -> T {
        try Self.stored(operation)
    }

    @discardableResult
    static func stored<T>(_ operation: () throws(LocalStoreError) -> T) throws(RallyClientError) -> T {
        do {
            return try operation()
        } catch {
            throw .store(error)
        }
    }
}

/// How a client reaches its relay: the primary transport and, when the
/// policy allows one, the HTTP fallback the recovery ladder may move to.
struct RelayTransports: Sendable {
    let primary: any RelayTransport
    let fallback: (any RelayTransport)?

    /// The transports for `policy`: a caller's own transport is used as
    /// is; otherwise WebSocket with an HTTP fallback, or HTTP only.
    static func choose(relayURL: URL, given: (any RelayTransport)?, policy: ConnectionPolicy) -> RelayTransports {
        if let given { return RelayTransports(primary: given, fallback: nil) }
        switch policy.transport {
        case .automatic:
            return RelayTransports(
                primary: WebSocketTransport(relayURL: relayURL), fallback: HTTPTransport(relayURL: relayURL))
        case .http:
            return RelayTransports(primary: HTTPTransport(relayURL: relayURL), fallback: nil)
        }
    }

    var startsOn: ActiveTransport { primary is HTTPTransport ? .http : .webSocket }

    /// The rungs that make sense with these transports.
    var rungs: [RelayRecoveryRung] {
        fallback == nil ? [.ping, .reconnect, .reauthenticate] : RelayRecoveryRung.allCases
    }
}

/// The context's links to the relay: one shared link for requests, opened
/// on demand and replaced when it drops, and dedicated links for live
/// followers. Both come from the transport the client is on now: the
/// primary one, or the HTTP fallback after the ladder moved there (then a
/// probe keeps trying the primary and moves everyone back when it works).
actor RelayLinks {
    nonisolated let transports: RelayTransports
    nonisolated let identity: Identity
    nonisolated let monitor: ConnectionMonitor
    nonisolated let policy: ConnectionPolicy
    private var shared: (any RelayLink)?

    init(transports: RelayTransports, identity: Identity, monitor: ConnectionMonitor, policy: ConnectionPolicy) {
        self.transports = transports
        self.identity = identity
        self.monitor = monitor
        self.policy = policy
    }

    /// The transport links open on now.
    private func current() async -> (any RelayTransport, onFallback: Bool) {
        if let fallback = transports.fallback, await monitor.transport == .http { return (fallback, true) }
        return (transports.primary, false)
    }

    /// The open shared link, or a new authenticated one.
    func connected() async throws(RelayClientError) -> any RelayLink {
        if let shared, await shared.isOpen { return shared }
        let (transport, onFallback) = await current()
        let fresh = try await transport.connect(as: identity)
        if onFallback { await monitor.register(fallbackLink: fresh) }
        shared = fresh
        return fresh
    }

    /// A link of its own, for a live follower (the relay keeps one
    /// subscription per topic and link), on the transport in use.
    func dedicated() async throws(RelayClientError) -> any RelayLink {
        let (transport, onFallback) = await current()
        let fresh = try await transport.connect(as: identity)
        if onFallback { await monitor.register(fallbackLink: fresh) }
        return fresh
    }

    /// A new link on the primary transport (the ladder's reconnect rungs).
    /// When the client was on the fallback, this working moves everyone
    /// back.
    func reconnected() async throws(RelayClientError) -> any RelayLink {
        let fresh = try await transports.primary.connect(as: identity)
        if transports.fallback != nil, await monitor.transport == .http {
            await shared?.close()
            shared = nil
            await monitor.movedBack()
        }
        return fresh
    }

    /// A new link on the HTTP fallback (the ladder's last rung); the whole
    /// client moves there and a probe starts looking for the way back.
    func fellBack() async throws(RelayClientError) -> any RelayLink {
        guard let fallback = transports.fallback else { return try await reconnected() }
        let fresh = try await fallback.connect(as: identity)
        if await monitor.fellBack() {
            await shared?.close()
            shared = nil
            let probe = Task { [self] in await self.probePrimary() }
            await monitor.probing(probe)
        }
        await monitor.register(fallbackLink: fresh)
        return fresh
    }

    /// While on the fallback: tries the primary transport after each of
    /// the backoff's pauses and moves everyone back once it connects.
    private func probePrimary() async {
        var attempt = 0
        while !Task.isCancelled, await monitor.transport == .http {
            attempt += 1
            try? await Task.sleep(for: policy.backoff.delay(attempt: attempt))
            guard !Task.isCancelled, await monitor.transport == .http else { return }
            do throws(RelayClientError) {
                let probe = try await transports.primary.connect(as: identity)
                await probe.close()
                await shared?.close()
                shared = nil
                await monitor.movedBack()
                return
            } catch {
                continue
            }
        }
    }

    func disconnect() async {
        await shared?.close()
        shared = nil
    }
}
