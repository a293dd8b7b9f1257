import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// How far a transfer has come, for a progress bar.
public struct TransferProgress: Sendable, Equatable {
    public var bytesDone: Int64
    public var bytesTotal: Int64

    public init(bytesDone: Int64, bytesTotal: Int64) {
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
    }
}

/// Streams a document to and from a relay blob, one sealed segment per
/// request (ADR 0014): memory stays at a few segments whatever the size,
/// and a dropped connection costs one segment. An upload that fails
/// resumes where the relay's copy ends; a download retries the segment it
/// was reading. Both give up, with a clear error, only after
/// ``attemptsPerSegment`` consecutive failures of one segment.
struct DocumentTransfer: Sendable {
    static let attemptsPerSegment = 8

    let blobs: BlobClient
    let clock: ClientClock
    let backoff: Backoff

    struct Uploaded: Sendable, Equatable {
        var plaintextSize: Int64
        var sealedSize: Int64
        var sealedSHA256: Data
    }

    /// Seals `file` under `key` and uploads it as blob `blobID`.
    func upload(
        file: URL, key: SymmetricKey, blobID: String, progress: @Sendable (TransferProgress) -> Void
    ) async throws(RallyClientError) -> Uploaded {
        let reader = try SegmentReader(file: file)
        defer { reader.close() }
        let cipher = DocumentCipher(key: key)
        let segments = DocumentCipher.segmentCount(plaintextSize: reader.size)
        let sealedSize = DocumentCipher.sealedSize(plaintextSize: reader.size)
        let sealedSegment = Int64(DocumentCipher.sealedSegmentBytes)
        func sealed(_ index: Int64) throws(RallyClientError) -> Data {
            do {
                return try cipher.seal(try reader.segment(index), index: index, isLast: index == segments - 1)
            } catch let error as RallyClientError {
                throw error
            } catch {
                throw .vault(.fileUnreadable(path: file.path, reason: "\(error)"))
            }
        }
        var hasher = SHA256()
        var next: Int64 = 0
        /// Continues after the relay's copy: `received` is always a whole
        /// number of segments, since the relay stores whole appends only.
        /// Hashing again from the start is the rare case (an upload an
        /// earlier run began); a lost answer costs nothing here.
        func resume(at received: Int64) throws(RallyClientError) {
            let target = min(segments, received / sealedSegment)
            guard target != next else { return }
            next = target
            hasher = SHA256()
            for index in 0..<next { hasher.update(data: try sealed(index)) }
        }

        let created = try await retrying("starting the upload") { () async throws(RelayClientError) in
            try await blobs.create(blobID, size: sealedSize)
        }
        if created.received > 0 { try resume(at: Int64(created.received)) }
        var failures = 0
        while next < segments {
            let bytes = try sealed(next)
            let offset = next * sealedSegment
            /// This segment is stored: on to the next.
            func stored() {
                hasher.update(data: bytes)
                next += 1
                progress(TransferProgress(bytesDone: min(sealedSize, next * sealedSegment), bytesTotal: sealedSize))
            }
            do {
                _ = try await blobs.append(blobID, offset: offset, bytes: bytes)
                failures = 0
                stored()
            } catch {
                var received: Int64?
                if case .conflict(_, let held) = error {
                    received = Int64(held)
                } else {
                    guard error.isTransient else { throw .relay(error) }
                    failures += 1
                    guard failures < Self.attemptsPerSegment else {
                        throw .vault(.transferFailed("segment \(next) failed \(failures) times: \(error)"))
                    }
                    await pause(failures)
                    // The append may have been stored before the answer
                    // was lost: continue from what the relay holds.
                    received = (try? await blobs.status(blobID)).map { Int64($0.received) }
                }
                guard let received else { continue }
                if received == offset + Int64(bytes.count) {
                    stored()
                } else {
                    try resume(at: received)
                }
            }
        }
        let digest = Data(hasher.finalize())
        _ = try await retrying("completing the upload") { () async throws(RelayClientError) in
            try await blobs.complete(blobID, sha256: digest)
        }
        return Uploaded(plaintextSize: reader.size, sealedSize: sealedSize, sealedSHA256: digest)
    }

    /// Downloads blob `blobID`, opens it with `key` and writes the document
    /// to `output`, through `<output>.part`, renamed only once every
    /// segment authenticated and the size and hash match.
    func download(
        blobID: String, key: SymmetricKey, plaintextSize: Int64, sealedSize: Int64, sealedSHA256: Data, to output: URL,
        progress: @Sendable (TransferProgress) -> Void
    ) async throws(RallyClientError) {
        guard sealedSize == DocumentCipher.sealedSize(plaintextSize: plaintextSize) else {
            throw .vault(.integrity("the document's sizes do not agree"))
        }
        let part = output.appendingPathExtension("part")
        let writer = try PartWriter(part: part)
        var finished = false
        defer {
            writer.close()
            if !finished { try? FileManager.default.removeItem(at: part) }
        }
        let cipher = DocumentCipher(key: key)
        let segments = DocumentCipher.segmentCount(plaintextSize: plaintextSize)
        let sealedSegment = Int64(DocumentCipher.sealedSegmentBytes)
        var hasher = SHA256()
        for index in 0..<segments {
            let offset = index * sealedSegment
            let length = Int(min(sealedSegment, sealedSize - offset))
            let bytes = try await retrying("reading segment \(index)") { () async throws(RelayClientError) in
                try await blobs.read(blobID, offset: offset, length: length)
            }
            guard bytes.count == length else {
                throw .vault(.integrity("segment \(index) is \(bytes.count) bytes, not \(length)"))
            }
            let plain: Data
            do {
                plain = try cipher.open(bytes, index: index, isLast: index == segments - 1)
            } catch {
                throw .vault(.integrity("segment \(index) does not authenticate"))
            }
            hasher.update(data: bytes)
            try writer.write(plain)
            progress(TransferProgress(bytesDone: offset + Int64(length), bytesTotal: sealedSize))
        }
        guard Data(hasher.finalize()) == sealedSHA256 else {
            throw .vault(.integrity("the SHA-256 of what arrived is not the one the owner recorded"))
        }
        try writer.finish(as: output)
        finished = true
    }

    /// Runs one request, retrying transient failures with backoff.
    private func retrying<T>(
        _ what: String, _ operation: () async throws(RelayClientError) -> T
    ) async throws(RallyClientError) -> T {
        var failures = 0
        while true {
            do {
                return try await operation()
            } catch {
                guard error.isTransient else { throw .relay(error) }
                failures += 1
                guard failures < Self.attemptsPerSegment else {
                    throw .vault(.transferFailed("\(what) failed \(failures) times: \(error)"))
                }
                await pause(failures)
            }
        }
    }

    private func pause(_ attempt: Int) async {
        try? await clock.sleep(backoff.delay(attempt: attempt))
    }
}

/// Reads a file one plaintext segment at a time, checking that it does not
/// change size under the reader.
private final class SegmentReader {
    let file: URL
    let size: Int64
    private let handle: FileHandle

    init(file: URL) throws(RallyClientError) {
        self.file = file
        do {
            handle = try FileHandle(forReadingFrom: file)
            size = Int64(try handle.seekToEnd())
        } catch {
            throw .vault(.fileUnreadable(path: file.path, reason: error.localizedDescription))
        }
    }

    func segment(_ index: Int64) throws(RallyClientError) -> Data {
        let start = index * Int64(DocumentCipher.segmentBytes)
        let length = Int(max(0, min(Int64(DocumentCipher.segmentBytes), size - start)))
        do {
            try handle.seek(toOffset: UInt64(start))
            let data = length == 0 ? Data() : (try handle.read(upToCount: length) ?? Data())
            guard data.count == length else { throw VaultClientError.fileChanged(path: file.path) }
            return data
        } catch let error as VaultClientError {
            throw .vault(error)
        } catch {
            throw .vault(.fileUnreadable(path: file.path, reason: error.localizedDescription))
        }
    }

    func close() { try? handle.close() }
}

/// Writes a download to its `.part` file, owner-only.
private final class PartWriter {
    let part: URL
    private let handle: FileHandle

    init(part: URL) throws(RallyClientError) {
        self.part = part
        do {
            try? FileManager.default.removeItem(at: part)
            guard
                FileManager.default.createFile(atPath: part.path, contents: nil, attributes: [.posixPermissions: 0o600])
            else { throw CocoaError(.fileWriteNoPermission) }
            handle = try FileHandle(forWritingTo: part)
        } catch {
            throw .vault(.outputUnwritable(path: part.path, reason: error.localizedDescription))
        }
    }

    func write(_ data: Data) throws(RallyClientError) {
        do {
            try handle.write(contentsOf: data)
        } catch {
            throw .vault(.outputUnwritable(path: part.path, reason: error.localizedDescription))
        }
    }

    func finish(as output: URL) throws(RallyClientError) {
        do {
            try handle.synchronize()
            try handle.close()
            if FileManager.default.fileExists(atPath: output.path) {
                _ = try FileManager.default.replaceItemAt(output, withItemAt: part)
            } else {
                try FileManager.default.moveItem(at: part, to: output)
            }
        } catch {
            throw .vault(.outputUnwritable(path: output.path, reason: error.localizedDescription))
        }
    }

    func close() { try? handle.close() }
}
