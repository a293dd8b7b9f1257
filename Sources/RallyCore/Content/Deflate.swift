import CompressNIO
public import Foundation
import NIOCore
public import RallyWire

/// Raw DEFLATE (RFC 1951) and gzip, with a hard limit on the inflated size
/// so that a small hostile input cannot expand into gigabytes. The codec is
/// zlib through CompressNIO; this type adds the limit, checked while
/// inflating, and tells a stream that ends early from one that is wrong.
public enum Deflate {
    public enum Format: Sendable {
        case raw
        case gzip

        var algorithm: ZlibAlgorithm { self == .raw ? .deflate : .gzip }
    }

    public enum Failure: Error, Equatable, Sendable, CustomStringConvertible {
        case exceedsLimit(limit: Int)
        case corrupt
        case truncated

        public var description: String {
            switch self {
            case .exceedsLimit(let limit): "inflates to more than \(limit) bytes"
            case .corrupt: "not valid compressed data"
            case .truncated: "compressed data ends early"
            }
        }
    }

    /// Output is inflated into a buffer of at most this many bytes at a
    /// time, so memory stays within the limit plus one chunk.
    static let chunkSize = 16 * 1024

    /// How hard `compress` tries: the same stream format either way.
    public enum Effort: Sendable {
        /// zlib's level 9: for bytes whose size matters most (an invite
        /// slug, which a QR code must hold).
        case smallest
        /// zlib's level 1: for message content, which may be large (a
        /// welcome carries a whole group's state, sealed once per
        /// newcomer) and is mostly keys and text, where level 9 gains
        /// little for about three times the CPU.
        case fastest

        var level: ZlibConfiguration.CompressionLevel {
            self == .smallest ? .bestCompression : .fastestCompression
        }
    }

    public static func compress(_ input: Data, format: Format = .raw, effort: Effort = .smallest) -> Data {
        deflate(input, format: format, effort: effort, flush: .finish)
    }

    /// The start of a raw DEFLATE stream: `input` in blocks none of which
    /// is the last, ending on a byte boundary (zlib's sync flush). Followed
    /// by a whole raw stream of other bytes (`compress`), it makes one
    /// stream that inflates to `input` and then those bytes, because that
    /// stream refers back to nothing before it. So bytes that several
    /// messages start with are deflated once for all of them.
    public static func compressHead(_ input: Data, effort: Effort = .smallest) -> Data {
        deflate(input, format: .raw, effort: effort, flush: .sync)
    }

    private static func deflate(_ input: Data, format: Format, effort: Effort, flush: CompressNIOFlush) -> Data {
        do {
            let deflater = try ZlibCompressor(
                algorithm: format.algorithm, configuration: ZlibConfiguration(compressionLevel: effort.level))
            var source = ByteBuffer(bytes: input)
            // deflateBound's room (and the sync flush's marker): one call
            // writes all of it.
            var packed = ByteBuffer()
            packed.reserveCapacity(deflater.maxSize(from: source))
            try deflater.deflate(from: &source, to: &packed, flush: flush)
            return Data(packed.readableBytesView)
        } catch {
            // Only running out of memory fails here: no stream to return.
            return Data()
        }
    }

    /// Inflates `input`, failing as soon as the output would pass `limit`.
    ///
    /// zlib's inflate returns without an error both at the end of the stream
    /// and when it has used up its input short of the end; it tells the two
    /// apart on the next call without input, which ends the stream again or
    /// fails with "no progress" (CompressNIO's `inputBufferOverflow`). So
    /// the loop stops at a call that had no input, raised no error and wrote
    /// nothing: the stream ended there.
    public static func decompress(_ input: Data, format: Format = .raw, limit: Int) throws(Failure) -> Data {
        let inflater: ZlibDecompressor
        do {
            inflater = try ZlibDecompressor(algorithm: format.algorithm)
        } catch {
            throw Failure.corrupt
        }
        var source = ByteBuffer(bytes: input)
        var chunk = ByteBuffer()
        var output = Data()
        while true {
            let inputBefore = source.readableBytes
            chunk.clear(minimumCapacity: chunkSize)
            let chunkFull: Bool
            do {
                try inflater.inflate(from: &source, to: &chunk)
                chunkFull = false
            } catch let error as CompressNIOError where error == .bufferOverflow {
                chunkFull = true
            } catch let error as CompressNIOError where error == .inputBufferOverflow {
                throw Failure.truncated
            } catch {
                throw Failure.corrupt
            }
            let produced = chunk.readableBytes
            if output.count + produced > limit { throw Failure.exceedsLimit(limit: limit) }
            output.append(contentsOf: chunk.readableBytesView)
            if chunkFull {
                // A full chunk with nothing read or written would loop forever.
                guard produced > 0 || source.readableBytes < inputBefore else { throw Failure.corrupt }
                continue
            }
            // Returning with input left over happens only at the end of the
            // stream: the rest is trailing garbage.
            guard source.readableBytes == 0 else { throw Failure.corrupt }
            if inputBefore == 0 && produced == 0 { return output }
        }
    }
}

/// The `compression` field of `EncodedContent`.
public enum ContentCompression {
    /// Largest content after decompression.
    public static let maxDecompressedBytes = 1024 * 1024
    /// Content at least this large is worth compressing.
    public static let threshold = 1024

    /// Returns the content with its bytes inflated and the compression
    /// field cleared; content without compression is returned as it is.
    public static func decompressed(_ content: WireEncodedContent) throws(ContentError) -> WireEncodedContent {
        guard content.hasCompression else { return content }
        let format: Deflate.Format
        switch content.compression {
        case .deflate: format = .raw
        case .gzip: format = .gzip
        case .UNRECOGNIZED: throw .unsupportedCompression
        }
        var plain = content
        do {
            plain.content = try Deflate.decompress(content.content, format: format, limit: maxDecompressedBytes)
        } catch .exceedsLimit(let limit) {
            throw .tooLarge(size: limit + 1, limit: limit)
        } catch {
            throw .malformed(contentType: ContentTypeID(wire: content.type).description, reason: "\(error)")
        }
        plain.clearCompression()
        return plain
    }

    /// Compresses content bytes with DEFLATE when that makes them smaller.
    public static func compressedIfUseful(_ content: WireEncodedContent) -> WireEncodedContent {
        guard !content.hasCompression, content.content.count >= threshold else { return content }
        return compressed(content, as: Deflate.compress(content.content, format: .raw, effort: .fastest))
    }

    /// Shortest start that several contents share for it to be deflated
    /// once for all of them.
    static let sharedHeadThreshold = 4 * 1024

    /// Each content as `compressedIfUseful` would make it, but the bytes
    /// every one of them starts with (a round of welcomes: the group's
    /// whole state, then each newcomer's few fields) are deflated once
    /// (`Deflate.compressHead`) and only each one's rest on its own. The
    /// streams differ from deflating each whole only in not matching the
    /// rest against the shared start; readers inflate them alike.
    public static func compressedSharingHead(_ contents: [WireEncodedContent]) -> [WireEncodedContent] {
        let candidates = contents.indices.filter {
            !contents[$0].hasCompression && contents[$0].content.count >= threshold
        }
        guard candidates.count > 1, let first = candidates.first else { return contents.map(compressedIfUseful) }
        var shared = contents[first].content.count
        for index in candidates.dropFirst() {
            shared = commonPrefixCount(contents[first].content, contents[index].content, upTo: shared)
        }
        guard shared >= sharedHeadThreshold else { return contents.map(compressedIfUseful) }
        let head = Deflate.compressHead(contents[first].content.prefix(shared), effort: .fastest)
        guard !head.isEmpty else { return contents.map(compressedIfUseful) }
        var result = contents
        for index in candidates {
            let bytes = contents[index].content
            let tail = Deflate.compress(bytes.suffix(from: bytes.startIndex + shared), format: .raw, effort: .fastest)
            result[index] = tail.isEmpty ? contents[index] : compressed(contents[index], as: head + tail)
        }
        return result
    }

    private static func compressed(_ content: WireEncodedContent, as packed: Data) -> WireEncodedContent {
        guard !packed.isEmpty, packed.count < content.content.count else { return content }
        var result = content
        result.content = packed
        result.compression = .deflate
        return result
    }

    /// How many bytes `a` and `b` start with alike, at most `limit`:
    /// compared a page at a time.
    static func commonPrefixCount(_ a: Data, _ b: Data, upTo limit: Int) -> Int {
        let limit = min(limit, a.count, b.count)
        return a.withUnsafeBytes { a in
            b.withUnsafeBytes { b in
                let page = 4096
                var same = 0
                while same + page <= limit, memcmp(a.baseAddress! + same, b.baseAddress! + same, page) == 0 {
                    same += page
                }
                while same < limit, a[same] == b[same] { same += 1 }
                return same
            }
        }
    }
}
