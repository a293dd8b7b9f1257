internal import CRallyCRC32C

/// CRC-32C (Castagnoli), the checksum that tells a whole segment
/// record from a torn or damaged one. The segment log checksums every
/// acknowledged payload on the commit path, and every record again when a
/// store opens, so the processor's own CRC-32C instruction does it where
/// there is one (SSE 4.2, ARMv8's CRC extension); slicing by eight is the
/// fallback and the reference the tests hold that instruction to.
enum CRC32C {
    /// Whether ``checksum(_:continuing:)`` uses the processor's instruction.
    static let usesHardware = rally_crc32c_hardware_available() == 1

    private static let polynomial: UInt32 = 0x82F6_3B78

    /// Eight tables of 256 entries, one after another.
    private static let tables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: 8 * 256)
        for byte in 0..<256 {
            var crc = UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ polynomial : crc >> 1 }
            tables[byte] = crc
        }
        for slice in 1..<8 {
            for byte in 0..<256 {
                let previous = tables[(slice - 1) * 256 + byte]
                tables[slice * 256 + byte] = (previous >> 8) ^ tables[Int(previous & 0xFF)]
            }
        }
        return tables
    }()

    /// The checksum of `bytes`, continuing from `previous` (the checksum of
    /// what came before them; 0 to start).
    static func checksum(_ bytes: UnsafeRawBufferPointer, continuing previous: UInt32 = 0) -> UInt32 {
        guard usesHardware else { return tableChecksum(bytes, continuing: previous) }
        return ~rally_crc32c_update(~previous, bytes.baseAddress, bytes.count)
    }

    /// The same checksum by slicing by eight, on any processor.
    static func tableChecksum(_ bytes: UnsafeRawBufferPointer, continuing previous: UInt32 = 0) -> UInt32 {
        tables.withUnsafeBufferPointer { table in
            var crc = ~previous
            var index = 0
            let count = bytes.count
            while count - index >= 8 {
                let low = crc ^ UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt32.self))
                let high = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: index + 4, as: UInt32.self))
                crc =
                    table[7 * 256 + Int(low & 0xFF)] ^ table[6 * 256 + Int((low >> 8) & 0xFF)]
                    ^ table[5 * 256 + Int((low >> 16) & 0xFF)] ^ table[4 * 256 + Int(low >> 24)]
                    ^ table[3 * 256 + Int(high & 0xFF)] ^ table[2 * 256 + Int((high >> 8) & 0xFF)]
                    ^ table[1 * 256 + Int((high >> 16) & 0xFF)] ^ table[Int(high >> 24)]
                index += 8
            }
            while index < count {
                crc = (crc >> 8) ^ table[Int((crc ^ UInt32(bytes[index])) & 0xFF)]
                index += 1
            }
            return ~crc
        }
    }
}
