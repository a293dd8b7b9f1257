/// A point of edwards25519 (-x² + y² = 1 + d·x²·y²) in extended coordinates:
/// x = X/Z, y = Y/Z, x·y = T/Z. The formulas are the complete ones of
/// Hisil, Wong, Carter and Dawson (2008) for a = -1.
struct EdwardsPoint {
    var x: FieldElement
    var y: FieldElement
    var z: FieldElement
    var t: FieldElement

    static let identity = EdwardsPoint(x: .zero, y: .one, z: .one, t: .zero)

    /// The base point B, decoded from its standard encoding (y = 4/5, x even).
    static let base: EdwardsPoint = {
        var encoding = [UInt8](repeating: 0x66, count: 32)
        encoding[0] = 0x58
        guard let point = EdwardsPoint(encoding: encoding) else { preconditionFailure("the base point decodes") }
        return point
    }()

    /// Decompresses a 32-byte encoding as BoringSSL's
    /// `x25519_ge_frombytes_vartime` does: y is the low 255 bits taken as they
    /// are (a y at or above p is not refused), x is the root of
    /// (y² - 1)/(d·y² + 1) whose low bit is bit 255. Nil when there is none.
    init?(encoding: [UInt8]) {
        guard encoding.count == 32 else { return nil }
        let y = encoding.withUnsafeBytes { FieldElement(bytes: $0) }
        let yy = y.squared
        let u = yy - .one
        let v = yy * .d + .one
        var x = (u * v).power2252Minus3 * u
        let vxx = x.squared * v
        if !(vxx - u).isZero {
            guard (vxx + u).isZero else { return nil }
            x = x * .sqrtMinusOne
        }
        if x.isNegative != (encoding[31] >> 7 == 1) { x = -x }
        self = EdwardsPoint(x: x, y: y, z: .one, t: x * y)
    }

    init(x: FieldElement, y: FieldElement, z: FieldElement, t: FieldElement) {
        (self.x, self.y, self.z, self.t) = (x, y, z, t)
    }

    /// The canonical 32-byte encoding: y, with x's sign in bit 255.
    var encoding: [UInt8] {
        let zInverse = z.inverse
        var bytes = (y * zInverse).bytes
        if (x * zInverse).isNegative { bytes[31] |= 0x80 }
        return bytes
    }

    var negated: EdwardsPoint { EdwardsPoint(x: -x, y: y, z: z, t: -t) }

    /// dbl-2008-hwcd: 4 squarings, 4 products.
    var doubled: EdwardsPoint {
        let a = x.squared
        let b = y.squared
        let c = z.squared + z.squared
        let h = a + b
        let e = h - (x + y).squared
        let g = a - b
        let f = c + g
        return EdwardsPoint(x: e * f, y: g * h, z: f * g, t: e * h)
    }

    /// add-2008-hwcd-3 with k = 2d: 9 products.
    static func + (p: EdwardsPoint, q: EdwardsPoint) -> EdwardsPoint {
        let a = (p.y - p.x) * (q.y - q.x)
        let b = (p.y + p.x) * (q.y + q.x)
        let c = p.t * FieldElement.d2 * q.t
        let zz = p.z * q.z
        let d = zz + zz
        return finish(a: a, b: b, c: c, d: d)
    }

    /// self + the table point, or minus it when `negative` (swapping y+x
    /// with y-x and negating 2dxy negates an affine point): 7 products.
    func adding(_ q: AffineNielsPoint, negative: Bool) -> EdwardsPoint {
        let a = (y - x) * (negative ? q.yPlusX : q.yMinusX)
        let b = (y + x) * (negative ? q.yMinusX : q.yPlusX)
        let txy = t * q.xy2d
        let c = negative ? -txy : txy
        return Self.finish(a: a, b: b, c: c, d: z + z)
    }

    @inline(__always)
    private static func finish(a: FieldElement, b: FieldElement, c: FieldElement, d: FieldElement) -> EdwardsPoint {
        let e = b - a
        let f = d - c
        let g = d + c
        let h = b + a
        return EdwardsPoint(x: e * f, y: g * h, z: f * g, t: e * h)
    }
}

/// An affine point kept as (y + x, y - x, 2d·x·y), the form a table entry
/// is added in.
struct AffineNielsPoint {
    var yPlusX: FieldElement
    var yMinusX: FieldElement
    var xy2d: FieldElement

    /// Each point in affine form, with one inversion for all of them
    /// (Montgomery's trick).
    static func normalizing(_ points: [EdwardsPoint]) -> [AffineNielsPoint] {
        guard !points.isEmpty else { return [] }
        var prefix = [FieldElement]()
        prefix.reserveCapacity(points.count)
        var running = FieldElement.one
        for point in points {
            prefix.append(running)
            running = running * point.z
        }
        var inverse = running.inverse
        var result = [AffineNielsPoint](
            repeating: AffineNielsPoint(yPlusX: .zero, yMinusX: .zero, xy2d: .zero), count: points.count)
        for index in points.indices.reversed() {
            let zInverse = inverse * prefix[index]
            inverse = inverse * points[index].z
            let x = points[index].x * zInverse
            let y = points[index].y * zInverse
            result[index] = AffineNielsPoint(yPlusX: y + x, yMinusX: y - x, xy2d: x * y * .d2)
        }
        return result
    }
}
