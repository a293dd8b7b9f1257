import Foundation

/// SplitMix64: a tiny deterministic generator so fuzz-style tests replay the
/// same inputs on every run.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func bytes(_ count: Int) -> Data {
        Data((0..<count).map { _ in UInt8.random(in: .min ... .max, using: &self) })
    }

    /// Every cut of `bytes`, then `count` copies with one bit flipped and
    /// `count` with one byte inserted, each at a random place.
    mutating func mutations(of bytes: Data, count: Int) -> [Data] {
        var variants: [Data] = (0..<bytes.count).map { bytes.prefix($0) }
        for _ in 0..<count {
            var flipped = bytes
            let at = Int.random(in: 0..<flipped.count, using: &self)
            flipped[at] ^= UInt8(1) << UInt8.random(in: 0...7, using: &self)
            variants.append(flipped)
            var inserted = bytes
            inserted.insert(
                UInt8.random(in: .min ... .max, using: &self), at: Int.random(in: 0...bytes.count, using: &self))
            variants.append(inserted)
        }
        return variants
    }
}

/// Protobuf wire-format helpers for hand-built (hostile) inputs.
enum ProtoBytes {
    static func varint(_ value: UInt64) -> Data {
        var value = value
        var out = Data()
        while value >= 0x80 {
            out.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        out.append(UInt8(value))
        return out
    }

    static func tag(field: UInt64, wireType: UInt64) -> Data { varint(field << 3 | wireType) }

    static func varintField(_ field: UInt64, _ value: UInt64) -> Data { tag(field: field, wireType: 0) + varint(value) }

    static func bytesField(_ field: UInt64, _ value: Data) -> Data {
        tag(field: field, wireType: 2) + varint(UInt64(value.count)) + value
    }

    /// `depth` groups of field `field` nested inside each other.
    static func nestedGroups(field: UInt64, depth: Int) -> Data {
        let open = tag(field: field, wireType: 3)
        let close = tag(field: field, wireType: 4)
        var out = Data()
        for _ in 0..<depth { out += open }
        for _ in 0..<depth { out += close }
        return out
    }
}

/// What a hand-read path's mutation test found: how many inputs the hand
/// path took, and every input where it, or the codec around it, disagreed
/// with SwiftProtobuf's reference decoding.
struct HandPathAudit<Value: Equatable> {
    private(set) var taken = 0
    private(set) var mismatches: [String] = []

    /// `hand` is the hand path's value (nil: it left the input alone);
    /// `codec` decodes as the codec does, or throws where it refuses.
    mutating func check(_ bytes: Data, reference: Value?, hand: Value?, codec: () throws -> Value) {
        if let hand {
            taken += 1
            if hand != reference { mismatches.append("hand: " + bytes.base64EncodedString()) }
        }
        do {
            if try codec() != reference { mismatches.append("codec: " + bytes.base64EncodedString()) }
        } catch {
            if reference != nil && !bytes.isEmpty { mismatches.append("refused: " + bytes.base64EncodedString()) }
        }
    }
}
