import Foundation
import RallyTestSupport
import Testing

@testable import RallyCore

/// The byte order group snapshots sort their id lists in.
@Suite("Byte order of ids in a group snapshot")
struct BytesOrderTests {
    @Test("bytesPrecede orders as lexicographicallyPrecedes: empty, prefixes, slices and random ids")
    func sameOrderAsLexicographic() {
        var random = SeededGenerator(seed: 0xB17E5)
        func data() -> Data {
            // A small alphabet, so pairs often share a prefix.
            Data((0..<Int.random(in: 0...12, using: &random)).map { _ in UInt8.random(in: 0...3, using: &random) * 85 })
        }
        var pairs: [(Data, Data)] = [
            (Data(), Data()), (Data(), Data([0])), (Data([0]), Data()), (Data([1, 2]), Data([1, 2, 0])),
            (Data([0xFF]), Data([0x00, 0xFF])), (Data([7, 7, 7]), Data([7, 7, 7])),
            // Slices whose indices do not start at zero.
            (Data([9, 1, 2, 3])[1...], Data([1, 2, 4])), (Data([1, 2, 3]), Data([0, 0, 1, 2, 3])[2...]),
        ]
        for _ in 0..<5_000 { pairs.append((data(), data())) }
        for (left, right) in pairs {
            #expect(
                left.bytesPrecede(right) == left.lexicographicallyPrecedes(right),
                "\(Array(left)) vs \(Array(right))")
        }
    }
}
