/// The eight data mask patterns and the spec's penalty score used to pick
/// one. Masking breaks up shapes that confuse scanners: large uniform areas
/// and anything resembling a finder pattern.
enum QRMask {
    static let all = 0...7

    /// Whether mask `mask` flips the module at column `x`, row `y` (the spec
    /// writes these with i = row, j = column).
    static func flips(_ mask: Int, x: Int, y: Int) -> Bool {
        switch mask {
        case 0: (y + x) % 2 == 0
        case 1: y % 2 == 0
        case 2: x % 3 == 0
        case 3: (y + x) % 3 == 0
        case 4: (y / 2 + x / 3) % 2 == 0
        case 5: (y * x) % 2 + (y * x) % 3 == 0
        case 6: ((y * x) % 2 + (y * x) % 3) % 2 == 0
        case 7: ((y + x) % 2 + (y * x) % 3) % 2 == 0
        default: preconditionFailure("mask out of range")
        }
    }

    // Penalty weights N1–N4 from the spec.
    static let runWeight = 3
    static let blockWeight = 3
    static let finderLikeWeight = 40
    static let balanceWeight = 10

    /// Runs shorter than this cost nothing.
    static let shortestPenalizedRun = 5
    /// 1:1:3:1:1 dark/light ratio of a finder pattern's centre line.
    static let finderLike: [Bool] = [true, false, true, true, true, false, true]
    /// Light modules needed beside `finderLike` for it to read as a finder.
    static let finderQuietLength = 4

    /// Total penalty of a finished (masked, format-stamped) symbol; lower is
    /// better.
    static func penalty(_ matrix: QRMatrix) -> Int {
        let size = matrix.size
        var score = 0
        var line = [Bool](repeating: false, count: size)
        for y in 0..<size {
            for x in 0..<size { line[x] = matrix[x, y] }
            score += linePenalty(line)
        }
        for x in 0..<size {
            for y in 0..<size { line[y] = matrix[x, y] }
            score += linePenalty(line)
        }
        var darkCount = 0
        for y in 0..<size {
            for x in 0..<size {
                if matrix[x, y] { darkCount += 1 }
                if x + 1 < size && y + 1 < size {
                    let colour = matrix[x, y]
                    if matrix[x + 1, y] == colour && matrix[x, y + 1] == colour && matrix[x + 1, y + 1] == colour {
                        score += blockWeight
                    }
                }
            }
        }
        score += balancePenalty(dark: darkCount, total: size * size)
        return score
    }

    /// N1 (same-colour runs) plus N3 (finder-like patterns) for one row or
    /// column.
    static func linePenalty(_ line: [Bool]) -> Int {
        var score = 0
        var runStart = 0
        for i in 1...line.count {
            if i == line.count || line[i] != line[runStart] {
                let run = i - runStart
                if run >= shortestPenalizedRun { score += runWeight + (run - shortestPenalizedRun) }
                runStart = i
            }
        }
        if line.count >= finderLike.count {
            for start in 0...(line.count - finderLike.count) where matches(line, at: start) {
                // Outside the symbol is quiet zone, hence light.
                let before = (start - finderQuietLength..<start).allSatisfy { $0 < 0 || !line[$0] }
                let afterStart = start + finderLike.count
                let after = (afterStart..<afterStart + finderQuietLength).allSatisfy { $0 >= line.count || !line[$0] }
                if before || after { score += finderLikeWeight }
            }
        }
        return score
    }

    private static func matches(_ line: [Bool], at start: Int) -> Bool {
        for (offset, value) in finderLike.enumerated() where line[start + offset] != value { return false }
        return true
    }

    /// N4: 10 points for every full 5 % the dark share strays from 50 %.
    static func balancePenalty(dark: Int, total: Int) -> Int {
        let deviation = abs(dark * 100 - total * 50)  // percentage points × total
        return deviation / (total * 5) * balanceWeight
    }
}
