// The low-precision element types (bundles/dtypes.py, format 1.2): each format's bits <-> the
// float32 value kernels compute with, as ONNX's Cast defines the conversions. Kernels hold these
// types packed in 32-bit words and call to_<dtype> / from_<dtype> on each element
// (compiler/dtypes.py ScalarType.encode / decode). Every function here is the only definition of
// its conversion.

// The magnitude `a` (float32 bits, not NaN) rounded to nearest even into a float format of `man`
// mantissa bits and exponent bias `bias`, with subnormals: exponent << man | mantissa. The result
// may exceed the format's largest finite code: the caller decides what overflow becomes. float32
// subnormals lie far below every such format's smallest subnormal and round to 0.
uint lp_round(uint a, int man, int bias) {
    if ((a >> 23) == 0u) return 0u;
    const int e = int(a >> 23) - 127 + bias;  // the biased exponent in the format
    const uint m = (a & 0x7fffffu) | 0x800000u;  // the 24-bit significand
    const int shift = 23 - man + max(1 - e, 0);  // the bits dropped: more for a subnormal result
    if (shift > 24) return 0u;  // below half the smallest subnormal
    uint q = m >> shift;
    const uint rest = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (q & 1u) != 0u)) q += 1u;  // a carry moves to the exponent
    // q holds the implicit 1 at bit `man` for a normal result; the exponent field replaces it.
    return e >= 1 ? (uint(e - 1) << man) + q : q;
}

// x in a float8 / float4 format whose sign is `sign_bit` and largest finite magnitude `max_code`
// (the float32 bits `max_bits`): round to nearest even. `saturate` first clamps x, infinities
// included, to the largest finite magnitude; without it a value past it becomes `overflow` (the
// format's infinity or NaN). NaN becomes `nan` (with x's sign where the format has signed NaNs).
// The fnuz formats have a single NaN (the code of negative zero) and no negative zero.
uint lp_encode(float x, bool saturate, int man, int bias, uint sign_bit, uint max_code, uint max_bits,
               uint overflow, uint nan, bool fnuz) {
    const uint u = floatBitsToUint(x), sign = (u >> 31) * sign_bit;
    uint a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return fnuz ? nan : sign | nan;
    if (saturate) a = min(a, max_bits);
    const uint r = lp_round(a, man, bias);
    if (r > max_code) return fnuz ? overflow : sign | overflow;
    return fnuz && r == 0u ? 0u : sign | r;
}

// The value of a finite code of a float format (`man` mantissa bits, bias `bias`, sign `sign_bit`).
float lp_decode(uint c, int man, int bias, uint sign_bit) {
    const uint mag = c & (sign_bit - 1u);
    const int e = int(mag >> man);
    const uint m = mag & ((1u << man) - 1u);
    const float v = ldexp(float(e == 0 ? m : m | (1u << man)), max(e, 1) - bias - man);
    return (c & sign_bit) != 0u ? -v : v;
}

float lp_nan(uint negative) {
    return uintBitsToFloat(0x7fc00000u | (negative << 31));
}

// float8e4m3fn: bias 7, 3 mantissa bits, no infinity, NaN S.1111.111, largest 448.
uint to_float8_e4m3fn(float x, bool saturate) {
    return lp_encode(x, saturate, 3, 7, 0x80u, 0x7eu, 0x43e00000u, 0x7fu, 0x7fu, false);
}
float from_float8_e4m3fn(uint c) {
    return (c & 0x7fu) == 0x7fu ? lp_nan(c >> 7) : lp_decode(c, 3, 7, 0x80u);
}

// float8e4m3fnuz: bias 8, no infinity, no negative zero: 0x80 is NaN (decoded with its sign bit,
// as ml_dtypes does); largest 240.
uint to_float8_e4m3fnuz(float x, bool saturate) {
    return lp_encode(x, saturate, 3, 8, 0x80u, 0x7fu, 0x43700000u, 0x80u, 0x80u, true);
}
float from_float8_e4m3fnuz(uint c) {
    return c == 0x80u ? lp_nan(1u) : lp_decode(c, 3, 8, 0x80u);
}

// float8e5m2: IEEE-like, bias 15, 2 mantissa bits, infinities S.11111.00, largest 57344; NaN
// becomes the quiet S.11111.10 (float32 NaN's top mantissa bits, as ml_dtypes keeps them).
uint to_float8_e5m2(float x, bool saturate) {
    return lp_encode(x, saturate, 2, 15, 0x80u, 0x7bu, 0x47600000u, 0x7cu, 0x7eu, false);
}
float from_float8_e5m2(uint c) {
    if ((c & 0x7cu) != 0x7cu) return lp_decode(c, 2, 15, 0x80u);
    return (c & 3u) != 0u ? lp_nan(c >> 7) : uintBitsToFloat(0x7f800000u | ((c >> 7) << 31));
}

// float8e5m2fnuz: bias 16, no infinity, no negative zero: 0x80 is NaN; largest 57344.
uint to_float8_e5m2fnuz(float x, bool saturate) {
    return lp_encode(x, saturate, 2, 16, 0x80u, 0x7fu, 0x47600000u, 0x80u, 0x80u, true);
}
float from_float8_e5m2fnuz(uint c) {
    return c == 0x80u ? lp_nan(1u) : lp_decode(c, 2, 16, 0x80u);
}

// float4e2m1 (4 bits, S.EE.M, bias 1): 0, 0.5 ... 6, no infinity or NaN. Conversions saturate
// whatever `saturate` says, and NaN becomes a zero of its sign (ONNX's reference, ml_dtypes).
uint to_float4_e2m1fn(float x, bool saturate) {
    return lp_encode(x, true, 1, 1, 0x8u, 0x7u, 0x40c00000u, 0x7u, 0x0u, false);
}
float from_float4_e2m1fn(uint c) {
    return lp_decode(c, 1, 1, 0x8u);
}

// bfloat16: float32's upper half; round to nearest even, NaN stays a (quiet) NaN.
uint to_bfloat16(float x, bool saturate) {
    const uint u = floatBitsToUint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
float from_bfloat16(uint c) {
    return uintBitsToFloat(c << 16);
}

// float8e8m0 (MX scales): an unsigned biased exponent, 2^(c - 127), 0xff NaN. `round_mode` 0 is
// "up" (any fraction rounds away from zero), 1 "down", 2 "nearest" (ties up), as ONNX's reference
// (onnx.numpy_helper.to_float8e8m0) computes it from x's float32 exponent and mantissa; the sign
// is ignored (negative inputs are undefined). `saturate` keeps 2^127 from rounding up to NaN.
uint to_float8_e8m0fnu(float x, bool saturate, int round_mode) {
    const uint u = floatBitsToUint(x);
    const uint e = (u >> 23) & 0xffu;
    if (e == 0xffu) return 0xffu;
    bool up = round_mode == 0 ? (u & 0x7fffffu) != 0u :
              round_mode == 2 && (u & 0x400000u) != 0u && ((u & 0x3fffffu) != 0u || e > 0u);
    if (saturate && e == 0xfeu) up = false;
    return e + (up ? 1u : 0u);
}
float from_float8_e8m0fnu(uint c) {
    // bit patterns, not ldexp: 2^-127 is a float32 subnormal, which arithmetic may flush to 0
    return c == 0xffu ? lp_nan(0u) : uintBitsToFloat(c == 0u ? 0x400000u : c << 23);
}

// A float to a 4- or 2-bit integer in [lo, hi]: truncated toward zero; ONNX leaves values out of
// range undefined, and they (NaN too) become 0, as in ONNX's reference (ml_dtypes).
int lp_float_to_int(float x, int lo, int hi) {
    const float t = trunc(x);
    return t >= float(lo) && t <= float(hi) ? int(t) : 0;
}
