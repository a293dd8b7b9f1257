public import RallyWire

/// A content type id, `authority/type:major.minor` (XMTP's shape). Codecs
/// match on authority, type and major version; a higher minor version is
/// readable by an older codec.
public struct ContentTypeID: Hashable, Sendable, CustomStringConvertible {
    public let authority: String
    public let type: String
    public let major: UInt32
    public let minor: UInt32

    public init(authority: String, type: String, major: UInt32, minor: UInt32) {
        self.authority = authority
        self.type = type
        self.major = major
        self.minor = minor
    }

    public init(wire: WireContentTypeId) {
        self.init(authority: wire.authorityID, type: wire.typeID, major: wire.versionMajor, minor: wire.versionMinor)
    }

    /// Parses `authority/type:major.minor`.
    public init?(parsing text: String) {
        guard let slash = text.firstIndex(of: "/"), let colon = text.lastIndex(of: ":"), slash < colon else {
            return nil
        }
        let authority = String(text[..<slash])
        let type = String(text[text.index(after: slash)..<colon])
        let version = text[text.index(after: colon)...].split(separator: ".", omittingEmptySubsequences: false)
        let isDigits = { (part: Substring) in !part.isEmpty && part.utf8.allSatisfy { (48...57).contains($0) } }
        guard !authority.isEmpty, !type.isEmpty, version.count == 2, isDigits(version[0]), isDigits(version[1]),
            let major = UInt32(version[0]), let minor = UInt32(version[1])
        else { return nil }
        self.init(authority: authority, type: type, major: major, minor: minor)
    }

    public var wire: WireContentTypeId {
        var id = WireContentTypeId()
        id.authorityID = authority
        id.typeID = type
        id.versionMajor = major
        id.versionMinor = minor
        return id
    }

    public var description: String { "\(authority)/\(type):\(major).\(minor)" }

    /// Whether a codec for `self` can read content of `other`.
    public func reads(_ other: ContentTypeID) -> Bool {
        authority == other.authority && type == other.type && major == other.major
    }
}
