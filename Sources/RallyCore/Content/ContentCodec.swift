import Foundation
public import RallyWire

/// Encodes one Swift type as `EncodedContent` and back.
public protocol ContentCodec<Value>: Sendable {
    associatedtype Value: Sendable
    var contentType: ContentTypeID { get }
    func encode(_ value: Value) throws(ContentError) -> WireEncodedContent
    func decode(_ content: WireEncodedContent) throws(ContentError) -> Value
    /// What a client that does not know this type shows instead.
    func fallback(for value: Value) -> String?
    /// Whether a message of this content should wake the recipient.
    func shouldPush(_ value: Value) -> Bool
    /// A one-line rendering for lists and the CLI.
    func summary(of value: Value) -> String
    /// What a home stores of a value it sent or received when that is less
    /// than the value (nil, the default: all of it). A welcome is acted on
    /// once; its copy keeps what its summary shows, not the group's keys
    /// and state.
    func keptCopy(of value: Value) -> Value?
}

extension ContentCodec {
    public func keptCopy(of value: Value) -> Value? { nil }
}

public enum ContentError: Error, Equatable, Sendable, CustomStringConvertible {
    case unknownContentType(String)
    case malformed(contentType: String, reason: String)
    case tooLarge(size: Int, limit: Int)
    case unsupportedCompression

    public var description: String {
        switch self {
        case .unknownContentType(let type): "unknown content type \(type)"
        case .malformed(let type, let reason): "malformed \(type) content: \(reason)"
        case .tooLarge(let size, let limit): "content of \(size) bytes exceeds the limit of \(limit)"
        case .unsupportedCompression: "unsupported compression"
        }
    }
}

/// Plain UTF-8 text: `xmtp.org/text:1.0`, as XMTP clients use it.
public struct TextCodec: ContentCodec {
    public static let contentType = ContentTypeID(authority: "xmtp.org", type: "text", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }

    public init() {}

    public func encode(_ value: String) throws(ContentError) -> WireEncodedContent {
        var content = WireEncodedContent()
        content.type = contentType.wire
        content.parameters = ["encoding": "UTF-8"]
        content.content = Data(value.utf8)
        content.shouldPush = true
        return content
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> String {
        if let encoding = content.parameters["encoding"], encoding.uppercased() != "UTF-8" {
            throw .malformed(contentType: contentType.description, reason: "unsupported encoding \(encoding)")
        }
        guard let text = String(validating: content.content, as: UTF8.self) else {
            throw .malformed(contentType: contentType.description, reason: "not valid UTF-8")
        }
        return text
    }

    public func fallback(for value: String) -> String? { nil }
    public func shouldPush(_ value: String) -> Bool { true }
    public func summary(of value: String) -> String { value }
}

extension ContentError {
    /// Runs the decoding of a content of `type`; a failure is `.malformed`.
    static func decoding<M>(
        _ type: ContentTypeID, _ decode: () throws(FrameDecodingError) -> M
    ) throws(ContentError) -> M {
        do {
            return try decode()
        } catch {
            throw .malformed(contentType: type.description, reason: error.description)
        }
    }
}
