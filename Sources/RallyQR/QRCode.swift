public import Foundation

/// Why a payload could not be encoded.
public enum QRError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The payload is larger than a version-40 symbol holds at the requested
    /// error-correction level.
    case tooLong(bytes: Int, limit: Int)

    public var description: String {
        switch self {
        case .tooLong(let bytes, let limit):
            "payload of \(bytes) bytes is too long for a QR code (at most \(limit) bytes at this correction level)"
        }
    }
}

/// A QR code symbol (ISO/IEC 18004, model 2), encoded in byte mode.
///
/// The smallest version (1–40) that holds the payload at the requested
/// error-correction level is chosen, and of the eight data masks the one
/// with the lowest penalty score per the spec.
public struct QRCode: Sendable, Equatable {
    /// Modules per side, not counting the quiet zone: 21 (version 1) to 177
    /// (version 40).
    public let size: Int
    /// The symbol version, 1–40.
    public let version: Int
    public let correction: QRErrorCorrection
    /// The data mask applied, 0–7.
    public let mask: Int
    /// Row-major, `true` = dark.
    private let modules: [Bool]

    /// Whether the module at column `x`, row `y` (origin top-left) is dark.
    /// Coordinates outside the symbol read as light, which is what the quiet
    /// zone around it must be.
    public subscript(x: Int, y: Int) -> Bool {
        guard (0..<size).contains(x), (0..<size).contains(y) else { return false }
        return modules[y * size + x]
    }

    /// Largest payload, in bytes, that any symbol holds at `correction`.
    public static func byteCapacity(correction: QRErrorCorrection) -> Int {
        QRCodewords.byteCapacity(version: QRVersion.range.upperBound, correction: correction)
    }

    public static func encode(_ bytes: [UInt8], correction: QRErrorCorrection = .medium) throws(QRError) -> QRCode {
        guard let version = QRCodewords.smallestVersion(for: bytes.count, correction: correction) else {
            throw .tooLong(bytes: bytes.count, limit: byteCapacity(correction: correction))
        }
        let layout = QRBlockLayout(version: version, correction: correction)
        let data = QRCodewords.dataCodewords(for: bytes, version: version, correction: correction)
        var template = QRMatrix(version: version)
        template.placeCodewords(QRCodewords.interleaved(data: data, layout: layout))

        var best: (matrix: QRMatrix, mask: Int, penalty: Int)?
        for mask in QRMask.all {
            var candidate = template
            candidate.applyMask(mask)
            candidate.drawFormatInformation(correction: correction, mask: mask)
            let penalty = QRMask.penalty(candidate)
            if best == nil || penalty < best!.penalty { best = (candidate, mask, penalty) }
        }
        let chosen = best!
        return QRCode(
            size: chosen.matrix.size, version: version, correction: correction, mask: chosen.mask,
            modules: chosen.matrix.dark)
    }

    public static func encode(_ data: Data, correction: QRErrorCorrection = .medium) throws(QRError) -> QRCode {
        try encode([UInt8](data), correction: correction)
    }

    /// Encodes the string's UTF-8 bytes.
    public static func encode(_ text: String, correction: QRErrorCorrection = .medium) throws(QRError) -> QRCode {
        try encode(Array(text.utf8), correction: correction)
    }
}
