/// Protocol-wide limits. Both sides enforce them; the relay announces the
/// payload limit in its challenge so clients can size their publishes.
public enum WireLimits {
    /// Version of the frame protocol spoken by this build.
    public static let protocolVersion: UInt32 = 2
    /// Largest envelope payload the relay stores.
    public static let maxPayloadBytes = 256 * 1024
    /// Largest frame either side accepts: a payload plus room for the
    /// frame's other fields.
    public static let maxFrameBytes = maxPayloadBytes + 4 * 1024
    /// Longest topic name.
    public static let maxTopicLength = 160
    /// Longest idempotency key.
    public static let maxIdempotencyKeyBytes = 64
    /// Largest signed key bundle.
    public static let maxKeyBundleBytes = 4 * 1024
    /// Longest display name in a key bundle, in UTF-8 bytes.
    public static let maxDisplayNameBytes = 128
    /// Longest invite slug anyone accepts: the SDK's decoder and the
    /// relay's `/join/<slug>` page share it.
    public static let maxInviteSlugCharacters = 4096
}
