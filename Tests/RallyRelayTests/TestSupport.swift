import Crypto
import Foundation
import Logging
import RallyCrypto
import RallyWire

@testable import RallyRelay

/// A fresh temporary directory, removed when the value is released by the
/// test via `remove()`.
struct TemporaryDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("rally-relay-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    var storeURL: URL { url.appendingPathComponent("relay.sqlite") }

    func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}

extension Logger {
    static let quiet: Logger = {
        var logger = Logger(label: "rally.relay.tests")
        logger.logLevel = .critical
        return logger
    }()
}

func makeServices(
    store: any RelayStore, clock: any RelayClock = SystemRelayClock(), limits: RelayLimits = .default
) -> RelayServices {
    // Tests of sessions and topics never touch blobs or escrows; their
    // stores live in a fresh temporary directory so they are real but empty.
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
        "rally-blobs-\(UUID().uuidString)")
    return RelayServices(
        store: store, blobs: try! FileBlobStore(dataDirectory: directory),
        escrows: try! SQLiteEscrowStore(dataDirectory: directory),
        pushTargets: try! SQLitePushTargetStore(dataDirectory: directory), clock: clock, limits: limits,
        metrics: RelayMetrics(), logger: .quiet, origins: [testOrigin])
}

extension RelayStore {
    /// Appends and unwraps: for tests whose publishes must all be stored.
    func appendAll(_ batch: [PublishRequest], serverTimeMilliseconds: Int64) async throws -> [AppendResult] {
        try await append(batch, serverTimeMilliseconds: serverTimeMilliseconds).map { try $0.get() }
    }
}

/// Frames a session sent, read in arrival order; `take(where:)` skips over
/// (and keeps) frames of other paths, since acks, replies and envelopes
/// interleave freely.
final class FrameInbox: Sendable {
    let stream: AsyncStream<WireServerFrame>
    let continuation: AsyncStream<WireServerFrame>.Continuation

    init() {
        (stream, continuation) = AsyncStream.makeStream(of: WireServerFrame.self)
    }

    var send: RelaySession.Send {
        let continuation = continuation
        return { frame in continuation.yield(frame) }
    }
}

struct FrameReader {
    private var iterator: AsyncStream<WireServerFrame>.AsyncIterator
    private var pending: [WireServerFrame] = []

    init(_ inbox: FrameInbox) {
        iterator = inbox.stream.makeAsyncIterator()
    }

    mutating func take(where predicate: (WireServerFrame) -> Bool) async -> WireServerFrame? {
        if let index = pending.firstIndex(where: predicate) { return pending.remove(at: index) }
        while let frame = await iterator.next() {
            if predicate(frame) { return frame }
            pending.append(frame)
        }
        return nil
    }

    mutating func reply(to requestID: UInt64) async -> WireServerFrame? {
        await take { $0.requestID == requestID && $0.body != nil && !$0.isPushedEnvelope }
    }

    mutating func envelope() async -> WireEnvelope? {
        await take { $0.isPushedEnvelope }?.envelope
    }
}

extension WireServerFrame {
    var isPushedEnvelope: Bool {
        if case .envelope = body { return true }
        return false
    }

    var errorCode: WireErrorCode? {
        if case .error(let error) = body { return error.code }
        return nil
    }
}

extension WireClientFrame {
    static func make(_ requestID: UInt64, _ body: WireClientFrame.OneOf_Body) -> WireClientFrame {
        var frame = WireClientFrame()
        frame.requestID = requestID
        frame.body = body
        return frame
    }

    var bytes: Data { FrameCodec.encode(self) }
}

func publishBody(_ topic: String, _ payload: String, key: String = "", expiresAt: Int64 = 0) -> WirePublish {
    var publish = WirePublish()
    publish.topic = topic
    publish.payload = Data(payload.utf8)
    publish.idempotencyKey = Data(key.utf8)
    publish.expiresAtMs = expiresAt
    return publish
}

func request(_ topic: String, _ payload: String, key: String = "", expiresAt: Int64 = 0) -> PublishRequest {
    PublishRequest(
        topic: topic, payload: Data(payload.utf8), idempotencyKey: Data(key.utf8), expiresAtMilliseconds: expiresAt)
}

/// Deterministic topic access keys for tests: `testAccess(n)` founds the
/// topic `"group/" + testAccess(n).foundedTopicID`.
func testAccess(_ seed: UInt8) -> TopicAccess {
    try! TopicAccess(secret: SymmetricKey(data: Data(repeating: seed, count: 32)))
}

func testTopic(_ seed: UInt8, kind: String = "group") -> String {
    kind + "/" + testAccess(seed).foundedTopicID
}

let groupAccess = testAccess(7)
let groupTopic = "group/" + groupAccess.foundedTopicID

/// The origin `makeServices` binds signatures to.
let testOrigin = "http://127.0.0.1:8080"

/// The access key that founds `topic`, among the test keys.
func foundingAccess(of topic: String) -> TopicAccess? {
    for seed in UInt8(0)...UInt8(40) where topic.hasSuffix("/" + testAccess(seed).foundedTopicID) {
        return testAccess(seed)
    }
    return nil
}

extension WireTopicProof {
    static func on(
        _ session: RelaySession, topic: String, access: TopicAccess, origin: String = testOrigin
    ) -> WireTopicProof {
        access.connectionProof(origin: origin, challengeNonce: session.challengeNonce, topic: topic)
    }
}
