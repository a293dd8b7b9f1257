/// Arithmetic in GF(2^8) as QR codes define it: bytes are polynomials over
/// GF(2) reduced modulo x^8 + x^4 + x^3 + x^2 + 1, with α = x (= 2) as the
/// generator of the multiplicative group.
enum GF256 {
    /// The reducing polynomial, including its x^8 term.
    static let primitive = 0x11D

    /// α^i for i in 0..<510: doubled so `exp[log a + log b]` needs no modulo.
    static let exp: [UInt8] = {
        var table = [UInt8](repeating: 0, count: 510)
        var value = 1
        for i in 0..<255 {
            table[i] = UInt8(value)
            table[i + 255] = UInt8(value)
            value <<= 1
            if value & 0x100 != 0 { value ^= primitive }
        }
        return table
    }()

    /// log[α^i] = i; log[0] is meaningless and never read.
    static let log: [Int] = {
        var table = [Int](repeating: 0, count: 256)
        for i in 0..<255 { table[Int(exp[i])] = i }
        return table
    }()

    static func multiply(_ a: UInt8, _ b: UInt8) -> UInt8 {
        if a == 0 || b == 0 { return 0 }
        return exp[log[Int(a)] + log[Int(b)]]
    }
}

/// Systematic Reed–Solomon encoding: the ECC codewords are the remainder of
/// data(x)·x^n divided by the generator (x − α^0)(x − α^1)…(x − α^(n−1)).
struct ReedSolomonEncoder: Sendable {
    /// Generator coefficients, highest degree first; the leading 1 is
    /// included, so `generator.count == eccCount + 1`.
    let generator: [UInt8]

    var eccCount: Int { generator.count - 1 }

    init(eccCount: Int) {
        precondition(eccCount > 0 && eccCount < 255, "Reed–Solomon degree out of range")
        var poly: [UInt8] = [1]
        for i in 0..<eccCount {
            // Multiply by (x + α^i); subtraction is addition (XOR) here.
            let root = GF256.exp[i]
            var next = [UInt8](repeating: 0, count: poly.count + 1)
            for (k, coefficient) in poly.enumerated() {
                next[k] ^= coefficient
                next[k + 1] ^= GF256.multiply(coefficient, root)
            }
            poly = next
        }
        generator = poly
    }

    /// The ECC codewords for one block of data codewords.
    func ecc(for data: [UInt8]) -> [UInt8] {
        // Long division as a shift register: `remainder` holds the running
        // remainder's top `eccCount` coefficients.
        var remainder = [UInt8](repeating: 0, count: eccCount)
        for byte in data {
            let factor = byte ^ remainder[0]
            remainder.removeFirst()
            remainder.append(0)
            if factor == 0 { continue }
            for i in 0..<eccCount {
                remainder[i] ^= GF256.multiply(generator[i + 1], factor)
            }
        }
        return remainder
    }
}
