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
    let codecs: CodecRegistry
    let logger: Logger

    init(
        identity: Identity, store: LocalStore, transport: any RelayTransport, clock: ClientClock, backoff: Backoff,
        codecs: CodecRegistry, logger: Logger
    ) {
        self.identity = identity
        self.store = store
        self.links = RelayLinks(transport: transport, identity: identity)
        self.clock = clock
        self.backoff = backoff
        self.codecs = codecs
        self.logger = logger
    }

    var relayURL: URL { links.transport.relayURL }

    /// The same home, relay and clock, acting as another identity (a
    /// group's invite identity), with links of its own.
    func acting(as other: Identity) -> ClientContext {
        ClientContext(
            identity: other, store: store, transport: links.transport, clock: clock, backoff: backoff,
            codecs: codecs, logger: logger)
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

/// The context's links to the relay: one shared link for requests, opened
/// on demand and replaced when it drops.
actor RelayLinks {
    nonisolated let transport: any RelayTransport
    nonisolated let identity: Identity
    private var shared: (any RelayLink)?

    init(transport: any RelayTransport, identity: Identity) {
        self.transport = transport
        self.identity = identity
    }

    /// The open shared link, or a new authenticated one.
    func connected() async throws(RelayClientError) -> any RelayLink {
        if let shared, await shared.isOpen { return shared }
        let fresh = try await transport.connect(as: identity)
        shared = fresh
        return fresh
    }

    /// A link of its own, for a live follower (the relay keeps one
    /// subscription per topic and link).
    nonisolated func dedicated() async throws(RelayClientError) -> any RelayLink {
        try await transport.connect(as: identity)
    }

    func disconnect() async {
        await shared?.close()
        shared = nil
    }
}
