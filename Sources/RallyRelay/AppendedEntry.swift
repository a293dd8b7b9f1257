import Foundation
import RallyWire

/// What one accepted publish writes: its envelope row, its topic's head
/// after it and the changes it makes to the topic's keys. The SQLite store
/// writes it inside its transaction; the publish log (ADR 0028) records it
/// and indexes it into the same SQLite tables later, with the same writes.
struct AppendedEntry: Sendable, Equatable {
    var topic: String
    var seq: Int64
    var serverTime: Int64
    var payload: Data
    var shouldPush: Bool
    var expiresAt: Int64
    /// Nil when the publish carried no idempotency key.
    var idempotencyKey: Data?
    var control: Bool
    /// The key this entry retired (a rotation): the publish's own.
    var retiresKey: Data?
    /// The key that founded the topic with this entry.
    var registersKey: Data?
    /// The key that became current with this rotation.
    var rotatesTo: Data?
    /// The topic's stored payload bytes after this entry.
    var bytesAfter: Int64
    /// The topic's last control seq after this entry.
    var lastControlSeqAfter: Int64

    /// The entry `request` becomes at the next seq after `head`, once the
    /// checks have accepted it (`founds`: its key founds the topic).
    init(_ request: PublishRequest, after head: AppendRules.Head, founds: Bool, serverTime: Int64) {
        let seq = head.lastSeq + 1
        let retired = AppendRules.retiredKey(by: request)
        self.init(
            topic: request.topic, seq: seq, serverTime: serverTime, payload: request.payload,
            shouldPush: request.shouldPush, expiresAt: request.expiresAtMilliseconds,
            idempotencyKey: request.idempotencyKey.isEmpty ? nil : request.idempotencyKey,
            control: request.control, retiresKey: retired, registersKey: founds ? request.accessKey : nil,
            rotatesTo: retired == nil ? nil : request.rotateAccessKey,
            bytesAfter: head.bytes + Int64(request.payload.count),
            lastControlSeqAfter: request.control ? seq : head.lastControlSeq)
    }

    init(
        topic: String, seq: Int64, serverTime: Int64, payload: Data, shouldPush: Bool, expiresAt: Int64,
        idempotencyKey: Data?, control: Bool, retiresKey: Data?, registersKey: Data?, rotatesTo: Data?,
        bytesAfter: Int64, lastControlSeqAfter: Int64
    ) {
        self.topic = topic
        self.seq = seq
        self.serverTime = serverTime
        self.payload = payload
        self.shouldPush = shouldPush
        self.expiresAt = expiresAt
        self.idempotencyKey = idempotencyKey
        self.control = control
        self.retiresKey = retiresKey
        self.registersKey = registersKey
        self.rotatesTo = rotatesTo
        self.bytesAfter = bytesAfter
        self.lastControlSeqAfter = lastControlSeqAfter
    }

    /// The topic's head once this entry is stored.
    var headAfter: AppendRules.Head {
        AppendRules.Head(lastSeq: seq, lastControlSeq: lastControlSeqAfter, bytes: bytesAfter)
    }

    var envelope: WireEnvelope {
        var envelope = WireEnvelope()
        envelope.topic = topic
        envelope.seq = UInt64(seq)
        envelope.serverTimeMs = serverTime
        envelope.payload = payload
        envelope.shouldPush = shouldPush
        envelope.expiresAtMs = expiresAt
        envelope.control = control
        return envelope
    }

    var result: AppendResult { AppendResult(envelope: envelope, duplicate: false, retiredKey: retiresKey) }
}
