import Foundation
import RallyCore

/// Prints results for people or, with `--json`, for programs. JSON output
/// is one document per command (or one line per event when following).
struct Output: Sendable {
    let json: Bool

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ISO8601DateFormatter.rally.string(from: date))
        }
        return encoder
    }()

    func emit<T: Encodable>(_ value: T, human: () -> String) {
        if json {
            let data = (try? Self.encoder.encode(value)) ?? Data("null".utf8)
            Self.write(String(decoding: data, as: UTF8.self))
        } else {
            Self.write(human())
        }
    }

    static func write(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static func warn(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

extension ISO8601DateFormatter {
    nonisolated(unsafe) static let rally: ISO8601DateFormatter = {
        // Configured once here and only read afterwards; ISO8601DateFormatter
        // is documented thread-safe for formatting.
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }()
}

/// The JSON shape of a message.
struct MessageJSON: Encodable {
    let id: String
    let conversation: String
    let direction: String
    let sender: String
    let senderName: String
    let sentAt: Date
    let seq: UInt64?
    let contentType: String
    let text: String
    let knownType: Bool

    init(_ message: StoredMessage) {
        id = message.id
        conversation = message.conversation
        direction = message.outgoing ? "out" : "in"
        sender = message.sender.rawValue
        senderName = message.senderName
        sentAt = message.sentAt
        seq = message.seq
        contentType = message.contentType
        text = message.displayText
        knownType = message.isKnownType
    }

    static func human(_ message: StoredMessage) -> String {
        let time = ISO8601DateFormatter.rally.string(from: message.sentAt)
        let who =
            message.outgoing
            ? "me → \(message.conversation.prefix(8))…"
            : "\(message.senderName) (\(message.sender.rawValue.prefix(8))…)"
        let marker = message.isKnownType ? "" : " [\(message.contentType)]"
        return "[\(time)] \(who): \(message.displayText)\(marker)"
    }
}
