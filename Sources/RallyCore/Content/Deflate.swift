import CZlib
import Foundation
import RallyWire

/// Raw DEFLATE (RFC 1951) and gzip, with a hard limit on the inflated size
/// so that a small hostile input cannot expand into gigabytes.
public enum Deflate {
    public enum Format: Sendable {
        case raw
        case gzip

        var windowBits: Int32 { self == .raw ? -15 : 15 + 16 }
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

    public static func compress(_ input: Data, format: Format = .raw) -> Data {
        var stream = z_stream()
        guard
            deflateInit2_(
                &stream, Z_BEST_COMPRESSION, Z_DEFLATED, format.windowBits, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION,
                Int32(MemoryLayout<z_stream>.size)) == Z_OK
        else { return Data() }
        defer { deflateEnd(&stream) }
        let bound = Int(deflateBound(&stream, uLong(input.count)))
        var output = Data(count: bound)
        let written: Int = input.withUnsafeBytes { inBuffer in
            output.withUnsafeMutableBytes { outBuffer in
                stream.next_in = UnsafeMutablePointer(
                    mutating: inBuffer.bindMemory(to: Bytef.self).baseAddress ?? UnsafePointer(bitPattern: 1)!)
                stream.avail_in = uInt(input.count)
                stream.next_out = outBuffer.bindMemory(to: Bytef.self).baseAddress
                stream.avail_out = uInt(bound)
                _ = deflate(&stream, Z_FINISH)
                return Int(stream.total_out)
            }
        }
        return output.prefix(written)
    }

    /// Inflates `input`, failing as soon as the output would pass `limit`.
    public static func decompress(_ input: Data, format: Format = .raw, limit: Int) throws(Failure) -> Data {
        var stream = z_stream()
        guard inflateInit2_(&stream, format.windowBits, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK
        else { throw .corrupt }
        defer { inflateEnd(&stream) }
        var output = Data()
        let chunkSize = 16 * 1024
        var chunk = [UInt8](repeating: 0, count: chunkSize)
        let result: Result<Void, Failure> = input.withUnsafeBytes { inBuffer in
            stream.next_in = UnsafeMutablePointer(
                mutating: inBuffer.bindMemory(to: Bytef.self).baseAddress ?? UnsafePointer(bitPattern: 1)!)
            stream.avail_in = uInt(input.count)
            while true {
                let (status, produced) = chunk.withUnsafeMutableBufferPointer { buffer in
                    stream.next_out = buffer.baseAddress
                    stream.avail_out = uInt(chunkSize)
                    let status = inflate(&stream, Z_NO_FLUSH)
                    return (status, chunkSize - Int(stream.avail_out))
                }
                if output.count + produced > limit { return .failure(.exceedsLimit(limit: limit)) }
                output.append(contentsOf: chunk[0..<produced])
                switch status {
                case Z_STREAM_END:
                    return stream.avail_in == 0 ? .success(()) : .failure(.corrupt)
                case Z_OK:
                    continue
                case Z_BUF_ERROR:
                    return .failure(.truncated)
                default:
                    return .failure(.corrupt)
                }
            }
        }
        try result.get()
        return output
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
        let packed = Deflate.compress(content.content, format: .raw)
        guard !packed.isEmpty, packed.count < content.content.count else { return content }
        var result = content
        result.content = packed
        result.compression = .deflate
        return result
    }
}
