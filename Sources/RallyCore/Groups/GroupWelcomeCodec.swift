import Foundation
public import RallyWire

/// `rally.dev/group_welcome:1.0`: what a new member receives by direct
/// message from the member who added them.
public struct GroupWelcomeCodec: ContentCodec {
    public static let contentType = ContentTypeID(authority: "rally.dev", type: "group_welcome", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }

    public init() {}

    public func encode(_ value: WireGroupWelcome) throws(ContentError) -> WireEncodedContent {
        var content = WireEncodedContent()
        content.type = contentType.wire
        content.content = FrameCodec.encode(value)
        return content
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> WireGroupWelcome {
        try ContentError.decoding(contentType) { () throws(FrameDecodingError) in
            try FrameCodec.decode(WireGroupWelcome.self, from: content.content, limit: WireLimits.maxPayloadBytes)
        }
    }

    public func fallback(for value: WireGroupWelcome) -> String? {
        "You were added to the group \"\(Self.summary(of: value).profile.name)\"; update Rally to open it."
    }

    public func shouldPush(_ value: WireGroupWelcome) -> Bool { true }

    public func summary(of value: WireGroupWelcome) -> String {
        let snapshot = Self.summary(of: value)
        let added = "added you to the group \"\(snapshot.profile.name)\" (\(value.groupID))"
        let welcome = snapshot.welcomeMessage
        return welcome.isEmpty ? added : added + "\nWelcome message: " + welcome
    }

    /// A stored welcome keeps its group id and what its summary shows. Its
    /// keys (epoch key, commit key, access secret, invite seed) belong in
    /// the secret store only, and its state in the group's record, which
    /// the newcomer keeps up to date; nothing reads them from the message.
    public func keptCopy(of value: WireGroupWelcome) -> WireGroupWelcome? {
        var kept = WireGroupWelcome()
        kept.groupID = value.groupID
        kept.snapshot = FrameCodec.encode(Self.summary(of: value))
        return kept
    }

    /// The name and welcome message of the snapshot, without decoding its
    /// members (empty when the snapshot is malformed: opening the welcome
    /// refuses it then).
    static func summary(of welcome: WireGroupWelcome) -> WireGroupSnapshotSummary {
        (try? FrameCodec.decodePart(
            WireGroupSnapshotSummary.self, from: welcome.snapshot, limit: WireLimits.maxPayloadBytes))
            ?? WireGroupSnapshotSummary()
    }
}
