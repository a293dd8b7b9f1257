public import Foundation

/// A blob's name: 32 bytes chosen by its uploader, as 64 lowercase hex
/// digits. Unguessable, so knowing it is what lets a vault reader fetch it.
public struct BlobID: Hashable, Sendable, CustomStringConvertible {
    public static let hexDigits = 64
    public let rawValue: String

    public init?(_ text: String) {
        guard Self.isLowercaseHex(text, digits: Self.hexDigits) else { return nil }
        rawValue = text
    }

    /// Whether `text` is exactly `digits` lowercase hex digits: the spelling
    /// of every random id the relay takes in a path.
    static func isLowercaseHex(_ text: String, digits: Int) -> Bool {
        text.utf8.count == digits && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    public var description: String { rawValue }
}

/// What the relay knows about one blob.
public struct BlobInfo: Sendable, Equatable {
    public var id: BlobID
    /// The uploader's inbox id: the identity its bytes count against.
    public var owner: String
    public var size: Int64
    public var received: Int64
    public var complete: Bool
    public var createdAtMilliseconds: Int64

    public init(
        id: BlobID, owner: String, size: Int64, received: Int64, complete: Bool, createdAtMilliseconds: Int64
    ) {
        self.id = id
        self.owner = owner
        self.size = size
        self.received = received
        self.complete = complete
        self.createdAtMilliseconds = createdAtMilliseconds
    }
}

/// Why a blob operation was refused; nothing was changed.
public enum BlobRefusal: Error, Sendable, Equatable {
    case notFound
    /// Another identity uploaded it.
    case notOwner
    /// Created before with another size, or already complete.
    case exists(BlobInfo)
    /// An append not at the end of what the relay holds.
    case wrongOffset(received: Int64)
    /// An append past the declared size.
    case beyondSize(size: Int64)
    case quotaExceeded(usedBytes: Int64, quotaBytes: Int64)
    case tooManyUnfinished(limit: Int)
    /// All bytes arrived but their SHA-256 is not the one given: the bytes
    /// were discarded, the upload starts again at 0.
    case integrityMismatch
    /// Completing before all bytes arrived, or reading before completion.
    case incomplete(received: Int64, size: Int64)
    case outOfRange(size: Int64)
}

/// The quotas a store enforces when a blob is created.
public struct BlobQuota: Sendable, Equatable {
    public var maxBlobBytes: Int64
    public var bytesPerIdentity: Int64
    public var unfinishedPerIdentity: Int

    public init(maxBlobBytes: Int64, bytesPerIdentity: Int64, unfinishedPerIdentity: Int) {
        self.maxBlobBytes = maxBlobBytes
        self.bytesPerIdentity = bytesPerIdentity
        self.unfinishedPerIdentity = unfinishedPerIdentity
    }
}

/// Durable storage of blobs. An `append` or `complete` that returns has
/// reached the disk: the relay acknowledges on return, and an interrupted
/// upload continues at `received`.
public protocol BlobStore: Sendable {
    /// Starts a blob (an upload) of `size` bytes for `owner`. Creating the
    /// same blob again with the same owner and size answers its status.
    func create(
        id: BlobID, owner: String, size: Int64, quota: BlobQuota, nowMilliseconds: Int64
    ) async throws -> Result<BlobInfo, BlobRefusal>

    func info(id: BlobID) async throws -> BlobInfo?

    /// Appends `bytes` at `offset`, which must be the bytes received so far.
    func append(id: BlobID, owner: String, offset: Int64, bytes: Data) async throws -> Result<BlobInfo, BlobRefusal>

    /// Checks every byte against `sha256` and marks the blob readable.
    func complete(id: BlobID, owner: String, sha256: Data) async throws -> Result<BlobInfo, BlobRefusal>

    /// Up to `length` bytes of a complete blob from `offset`.
    func read(id: BlobID, offset: Int64, length: Int) async throws -> Result<Data, BlobRefusal>

    func delete(id: BlobID, owner: String) async throws -> Result<Void, BlobRefusal>

    /// Deletes uploads started before `cutoffMilliseconds` and never
    /// completed. Returns how many.
    func deleteUnfinished(startedBefore cutoffMilliseconds: Int64) async throws -> Int

    func close() async throws
}
