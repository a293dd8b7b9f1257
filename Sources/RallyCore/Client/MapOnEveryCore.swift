import Foundation

extension Array where Element: Sendable {
    /// `map`, spread over the machine's cores once there are at least
    /// `threshold` elements: each core's task takes every n-th element, and
    /// the results come back in the elements' order. For CPU-bound work on
    /// a batch (sealing a round of welcomes, opening a batch of join
    /// requests) that would otherwise keep one core busy while the others
    /// wait.
    func mapOnEveryCore<Mapped: Sendable>(
        threshold: Int = 8, _ transform: @escaping @Sendable (Element) -> Mapped
    ) async -> [Mapped] {
        let lanes = count < threshold ? 1 : Swift.min(count, ProcessInfo.processInfo.activeProcessorCount)
        guard lanes > 1 else { return map(transform) }
        var byLane: [[Mapped]] = Array<[Mapped]>(repeating: [], count: lanes)
        await withTaskGroup(of: (Int, [Mapped]).self) { group in
            for lane in 0..<lanes {
                group.addTask { (lane, stride(from: lane, to: count, by: lanes).map { transform(self[$0]) }) }
            }
            for await (lane, mapped) in group { byLane[lane] = mapped }
        }
        return indices.map { byLane[$0 % lanes][$0 / lanes] }
    }
}
