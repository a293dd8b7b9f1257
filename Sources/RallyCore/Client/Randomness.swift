import Foundation

/// Random bytes from the system's secure generator: invite tags and other
/// values that must not be guessed.
enum Randomness {
    static func bytes(_ count: Int) -> Data {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }
}
