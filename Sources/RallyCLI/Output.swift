import Foundation
import RallyCore

/// Prints results for people or, with `--json`, for programs. JSON output
/// is one document per command (or one line per event when following).
///
/// Much of what Rally prints comes from other people (message text, names,
/// group names and descriptions, invite names, error reasons) and must not
/// drive the terminal: human output escapes every control character but
/// the line breaks Rally itself writes (untrusted fields escape those too,
/// see ``TerminalText``), and JSON output writes those characters as
/// `\uXXXX` escapes, so it stays valid JSON that decodes to the exact text.
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
            Self.write(TerminalText.jsonSafe(String(decoding: data, as: UTF8.self)))
        } else {
            Self.write(human())
        }
    }

    /// Writes a line to stdout; control characters other than line breaks
    /// are escaped.
    static func write(_ line: String) {
        FileHandle.standardOutput.write(Data((TerminalText.escaped(line, keepingNewlines: true) + "\n").utf8))
    }

    /// Writes a line to stderr, escaped like ``write(_:)``.
    static func warn(_ line: String) {
        FileHandle.standardError.write(Data((TerminalText.escaped(line, keepingNewlines: true) + "\n").utf8))
    }
}

/// Text from untrusted sources made harmless for a terminal.
public enum TerminalText {
    /// Whether a terminal (or a reader) could be fooled by this character:
    /// C0 controls (ESC starts escape sequences, CR rewrites a line), DEL,
    /// C1 controls (U+009B is a one-character CSI), Unicode line and
    /// paragraph separators, and the bidirectional marks, embeddings,
    /// overrides and isolates that reorder what is shown.
    public static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// `text` with every unsafe character written as a visible escape
    /// (`\r`, `\n`, `\t`, or `\u{1b}`); with `keepingNewlines`, line feeds
    /// stay (for whole lines Rally composed, whose untrusted parts were
    /// escaped already).
    public static func escaped(_ text: String, keepingNewlines: Bool = false) -> String {
        guard text.unicodeScalars.contains(where: isUnsafe) else { return text }
        var result = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard isUnsafe(scalar) else {
                result.append(scalar)
                continue
            }
            let escape: String
            switch scalar {
            case "\n" where keepingNewlines: escape = "\n"
            case "\n": escape = "\\n"
            case "\r": escape = "\\r"
            case "\t": escape = "\\t"
            default: escape = "\\u{\(String(scalar.value, radix: 16))}"
            }
            result.append(contentsOf: escape.unicodeScalars)
        }
        return String(result)
    }

    /// A JSON document with every unsafe character inside its strings
    /// written as a `\uXXXX` escape: still valid JSON, decoding to the same
    /// text, and inert on a terminal. (Unsafe characters can only occur
    /// inside strings; JSONEncoder already escapes C0 controls.)
    public static func jsonSafe(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: isUnsafe) else { return json }
        var result = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            if isUnsafe(scalar) {
                let hex = String(scalar.value, radix: 16)
                result.append(
                    contentsOf: ("\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex).unicodeScalars)
            } else {
                result.append(scalar)
            }
        }
        return String(result)
    }
}

extension String {
    /// This text, escaped for a terminal (see ``TerminalText``).
    var terminalSafe: String { TerminalText.escaped(self) }
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
    /// An outgoing message still waiting in the home's outbox.
    let queued: Bool

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
        queued = message.isQueued
    }

    static func human(_ message: StoredMessage) -> String {
        let time = ISO8601DateFormatter.rally.string(from: message.sentAt)
        let who =
            message.outgoing
            ? "me → \(String(message.conversation.prefix(8)).terminalSafe)…"
            : "\(message.senderName.terminalSafe) (\(message.sender.rawValue.prefix(8))…)"
        let marker = message.isKnownType ? "" : " [\(message.contentType.terminalSafe)]"
        return "[\(time)] \(who): \(message.displayText.terminalSafe)\(marker)"
    }
}
