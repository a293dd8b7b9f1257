import Foundation
import SwiftProtobuf

/// Decoding of bytes that arrive from the network, with the size limit
/// checked before any parsing and every failure mapped to a typed error.
public enum FrameCodec {
    public static func decodeClientFrame(_ bytes: Data) throws(FrameDecodingError) -> WireClientFrame {
        switch try decodeClientFrameOrPublish(bytes) {
        case .publish(let requestID, let publish): WireClientFrame(requestID: requestID, publish: publish)
        case .frame(let frame): frame
        }
    }

    /// A client frame as ``decodeClientFrame(_:)`` decodes it, but a publish
    /// in its usual shape as its request id and publish alone: the relay's
    /// event loop takes it without a frame built only to take it out again
    /// (a copy of every field each way).
    package enum ClientFrameOrPublish {
        case publish(requestID: UInt64, WirePublish)
        case frame(WireClientFrame)
    }

    package static func decodeClientFrameOrPublish(
        _ bytes: Data
    ) throws(FrameDecodingError) -> ClientFrameOrPublish {
        // A publish in its usual shape is read by hand; everything else,
        // and whatever that path does not take, by SwiftProtobuf.
        if bytes.count <= WireLimits.maxFrameBytes, let (requestID, publish) = PublishFrameDecoding.decodePublish(bytes)
        {
            return .publish(requestID: requestID, publish)
        }
        return .frame(try decode(WireClientFrame.self, from: bytes, limit: WireLimits.maxFrameBytes))
    }

    public static func decodeServerFrame(_ bytes: Data) throws(FrameDecodingError) -> WireServerFrame {
        try decode(WireServerFrame.self, from: bytes, limit: WireLimits.maxFrameBytes)
    }

    /// Decodes any protobuf message from untrusted bytes. Unknown fields are
    /// kept (forward compatibility); anything unparseable is `.malformed`.
    public static func decode<M: SwiftProtobuf.Message>(
        _ type: M.Type, from bytes: Data, limit: Int
    ) throws(FrameDecodingError) -> M {
        guard !bytes.isEmpty else { throw .empty }
        return try parse(M.self, bytes, limit: limit, keepingUnknownFields: true)
    }

    /// Decodes only the fields `M` names from untrusted bytes, skipping the
    /// rest without keeping it: a few fields read out of a large message.
    public static func decodePart<M: SwiftProtobuf.Message>(
        _ type: M.Type, from bytes: Data, limit: Int
    ) throws(FrameDecodingError) -> M {
        try parse(M.self, bytes, limit: limit, keepingUnknownFields: false)
    }

    static func parse<M: SwiftProtobuf.Message>(
        _ type: M.Type, _ bytes: Data, limit: Int, keepingUnknownFields: Bool
    ) throws(FrameDecodingError) -> M {
        guard bytes.count <= limit else { throw .tooLarge(size: bytes.count, limit: limit) }
        do {
            var options = BinaryDecodingOptions()
            options.messageDepthLimit = 32
            options.discardUnknownFields = !keepingUnknownFields
            return try M(serializedBytes: bytes, options: options)
        } catch {
            throw .malformed(String(describing: error))
        }
    }

    public static func encode(_ message: some SwiftProtobuf.Message) -> Data {
        // Serializing an initialized proto3 message cannot fail: there are no
        // required fields, and our maps have string keys.
        (try? message.serializedData()) ?? Data()
    }
}

public enum FrameDecodingError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    case tooLarge(size: Int, limit: Int)
    case malformed(String)

    public var description: String {
        switch self {
        case .empty: "empty frame"
        case .tooLarge(let size, let limit): "frame of \(size) bytes exceeds the limit of \(limit) bytes"
        case .malformed(let reason): "malformed frame: \(reason)"
        }
    }
}

extension WireClientFrame {
    /// A frame holding `publish`.
    package init(requestID: UInt64, publish: WirePublish) {
        self.init()
        self.requestID = requestID
        body = .publish(publish)
    }
}
