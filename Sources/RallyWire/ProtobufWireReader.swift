import Foundation

/// Reads protobuf's wire format (varints, tags, length-delimited fields)
/// from raw bytes within a range, never past its end; every read that would
/// cross it, or that is malformed, is nil. The pieces the hand-read publish
/// (``PublishFrameDecoding``) and the load generator's server-frame skim
/// are made of.
package struct ProtobufWireReader {
    package let bytes: UnsafeRawBufferPointer
    package private(set) var position: Int
    package let end: Int

    /// Protobuf's wire types, of the fields these readers meet.
    package enum WireType: UInt64, Sendable {
        case varint = 0
        case fixed64 = 1
        case lengthDelimited = 2
        case fixed32 = 5
    }

    /// Over `range` of `bytes` (all of them by default).
    package init(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>? = nil) {
        self.bytes = bytes
        position = range?.lowerBound ?? 0
        end = range?.upperBound ?? bytes.count
    }

    package var isAtEnd: Bool { position >= end }

    /// A varint of at most ten bytes, the tenth holding one bit (64 bits).
    package mutating func varint() -> UInt64? {
        var value: UInt64 = 0
        for index in 0..<10 {
            guard position < end else { return nil }
            let byte = bytes[position]
            position += 1
            if index == 9, byte > 1 { return nil }
            value |= UInt64(byte & 0x7F) << (7 * UInt64(index))
            if byte & 0x80 == 0 { return value }
        }
        return nil
    }

    /// A field's tag: its number (1 to 2^29 - 1) and wire type.
    package mutating func tag() -> (field: Int, type: WireType)? {
        guard let key = varint(), let type = WireType(rawValue: key & 7), key >> 3 > 0, key >> 3 <= 536_870_911
        else { return nil }
        return (Int(key >> 3), type)
    }

    /// A tag written in one byte (field numbers below 16), as every encoder
    /// writes them; nil for any other, and for a tag padded to more bytes.
    package mutating func oneByteTag() -> (field: Int, type: WireType)? {
        guard position < end, bytes[position] < 0x80, let type = WireType(rawValue: UInt64(bytes[position] & 7)),
            bytes[position] >> 3 > 0
        else { return nil }
        let field = Int(bytes[position] >> 3)
        position += 1
        return (field, type)
    }

    /// The next field's tag, if it takes one byte and its number is above
    /// `last`: each field at most once, in order, as every encoder writes
    /// them. Nil for a field out of order or given twice, and for a tag
    /// padded to more bytes (which SwiftProtobuf reads up to five of).
    package mutating func fieldInOrder(after last: inout Int) -> (field: Int, type: WireType)? {
        guard let tag = oneByteTag(), tag.field > last else { return nil }
        last = tag.field
        return tag
    }

    /// A length and the range of that many bytes after it.
    package mutating func lengthDelimited() -> Range<Int>? {
        guard let length = varint(), length <= UInt64(end - position) else { return nil }
        let range = position..<(position + Int(length))
        position = range.upperBound
        return range
    }

    /// Past a field's value of `type`; false when it is cut short or malformed.
    package mutating func skip(_ type: WireType) -> Bool {
        switch type {
        case .varint: return varint() != nil
        case .lengthDelimited: return lengthDelimited() != nil
        case .fixed64: return advance(8)
        case .fixed32: return advance(4)
        }
    }

    private mutating func advance(_ count: Int) -> Bool {
        guard end - position >= count else { return false }
        position += count
        return true
    }
}

extension ProtobufWireReader {
    /// The string at `range` of `raw`, if its bytes are valid UTF-8
    /// (SwiftProtobuf refuses the message otherwise): decoding repairs
    /// what is not, so a string whose bytes differ from the input was not.
    package static func utf8(_ raw: UnsafeRawBufferPointer, _ range: Range<Int>) -> String? {
        let bytes = UnsafeRawBufferPointer(rebasing: raw[range])
        var string = String(decoding: bytes.assumingMemoryBound(to: UInt8.self), as: UTF8.self)
        let unchanged = string.withUTF8 { decoded in
            decoded.count == bytes.count
                && (bytes.isEmpty || memcmp(decoded.baseAddress!, bytes.baseAddress!, bytes.count) == 0)
        }
        return unchanged ? string : nil
    }

    /// The bytes at `range` in a `Data` of their own.
    package static func copy(_ raw: UnsafeRawBufferPointer, _ range: Range<Int>) -> Data {
        range.isEmpty ? Data() : Data(UnsafeRawBufferPointer(rebasing: raw[range]))
    }
}
