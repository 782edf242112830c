"""GLSL helpers (expr.HELPERS) for the trigonometric and hyperbolic ops in float32, accurate to a
few ulps over the whole float range on every Vulkan device.

GLSL.std.450's sin and cos promise only an absolute error of 2^-11 inside [-pi, pi] and nothing
outside; asin, acos, atan, sinh, cosh, asinh, acosh and atanh are "inherited" from formulas over
other built-ins (sinh's (e^x - e^-x) / 2 cancels near 0; exp and log themselves promise 3 + 2|x|
ulps and an absolute 2^-21 near 1). So these helpers use only what Vulkan specifies exactly
(integer arithmetic, float add, subtract and multiply, correctly rounded) or within a few ulps
(division: 2.5; sqrt, which asin, acos and acosh refine by a Newton step), with their own exp and
log:
- sin, cos, tan: |x| < pi/4 by minimax polynomials (Cephes sinf, cosf, tanf); above, x is reduced
  by pi/2 exactly, for every finite x, in 32-bit integers (Payne-Hanek: x's 24-bit mantissa times
  the 96 bits of 2/pi at its exponent, modulo 4 quadrants), then the polynomials of the remainder.
- asin, acos, atan: Cephes asinf, acosf, atanf (near |x| = 1: asin(x) = pi/2 - 2 asin(sqrt((1 -
  |x|) / 2)), where 1 - |x| is exact), pi/2 and pi/4 in two parts.
- sinh, cosh: exp by Cody-Waite (ln 2 in two parts) and the Cephes expf polynomial, scaled by
  powers of two (no overflow before the result's own); sinh below |x| = 1 by its odd polynomial.
- asinh, acosh, atanh: fdlibm's forms that do not cancel, over log (Cephes logf) and
  log1p(u) = log(1 + u) * u / ((1 + u) - 1), exact in its rounding of 1 + u.
NaN gives NaN; sin, cos, tan of +-inf, asin and acos past +-1, acosh below 1 and atanh past +-1
give NaN, atanh(+-1) +-inf, as numpy and onnxruntime. Steps whose exactness matters are `precise`
(SPIR-V NoContraction), so no driver reassociates or fuses them.
"""
from __future__ import annotations

import math

import numpy as np

# The bits of 2/pi after the binary point, 32 a word, after one word of zeros (the table starts
# at bit -31, so that x's exponent -1 to 127 all find their window; tests check them).
TWO_OVER_PI_WORDS = (0x00000000, 0xA2F9836E, 0x4E441529, 0xFC2757D1, 0xF534DDC0, 0xDB629599,
                     0x3C439041, 0xFE5163AB, 0xDEBBC561)


def _f(x: float) -> str:
    """A float32 GLSL literal of x, round-tripping exactly."""
    return f"{float(np.float32(x))!r}".replace("inf", "1.0/0.0")


def _split(x: float) -> tuple[str, str]:
    """x as float32 high part and float32 remainder (pi/2 = PIO2_HI + PIO2_LO)."""
    hi = float(np.float32(x))
    return _f(hi), _f(x - hi)


def _horner(var: str, coefficients) -> str:
    text = _f(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        text = f"{_f(c)} + {var} * ({text})"
    return text


PIO2_HI, PIO2_LO = _split(math.pi / 2)
PIO4_HI, PIO4_LO = _split(math.pi / 4)
PI_HI, PI_LO = _split(math.pi)
NAN = "uintBitsToFloat(0x7fc00000u)"
INF = "uintBitsToFloat(0x7f800000u)"
# The largest float below pi/4: below it, no reduction.
QUARTER_PI_BELOW = "uintBitsToFloat(0x3f490fdau)"

# Payne-Hanek: a = m 2^(e - 23) with m a 24-bit integer, so bits of 2/pi weighing more than
# 2^(e - 25) only add multiples of 4 quadrants; the 96 bits from 2^-(e - 24) give the quadrant
# (2 bits) and 94 bits of fraction, of which every float32 keeps at least 64 (the nearest to a
# multiple of pi/2, 16367173 x 2^72, is 2^-29.9 quadrants from it). Returns the remainder in
# [-pi/4, pi/4].
_REDUCE = """
const uint $name_two_over_pi[9] = uint[9](""" + ", ".join(f"0x{w:08X}u" for w in TWO_OVER_PI_WORDS) + """);

uint $name_window(uint k, uint s) {
    return ($name_two_over_pi[k] << s) | (($name_two_over_pi[k + 1u] >> 1) >> (31u - s));
}

// |x| >= pi/4, finite: x - n pi/2 for the nearest quadrant n (mod 4, returned in n).
float $name_reduce(float a, out uint n) {
    const uint bits = floatBitsToUint(a);
    const uint m = (bits & 0x7fffffu) | 0x800000u;
    const uint q = (bits >> 23) - 120u;            // (e - 24) + 31, e = exponent - 127
    const uint k = q >> 5, s = q & 31u;
    const uint w0 = $name_window(k, s), w1 = $name_window(k + 1u, s), w2 = $name_window(k + 2u, s);
    uint h2, l2, h1, l1, c;
    umulExtended(m, w2, h2, l2);
    umulExtended(m, w1, h1, l1);
    const uint r1 = uaddCarry(h2, l1, c);
    const uint r0 = h1 + m * w0 + c;               // (m * window) mod 2^96 = r0:r1:l2
    n = (r0 + 0x20000000u) >> 30;                  // rounded to the nearest quadrant
    // the fraction of a quadrant left, a signed 94-bit number shifted to 96 bits
    uint f0 = (r0 << 2) | (r1 >> 30), f1 = (r1 << 2) | (l2 >> 30), f2 = l2 << 2;
    const bool negative = int(f0) < 0;
    if (negative) {
        f0 = ~f0; f1 = ~f1; f2 = ~f2;
        uint c1, c2;
        f2 = uaddCarry(f2, 1u, c1);
        f1 = uaddCarry(f1, c1, c2);
        f0 += c2;
    }
    int scale = 32;
    if (f0 == 0u) { f0 = f1; f1 = f2; f2 = 0u; scale += 32; }
    if (f0 == 0u) { f0 = f1; f1 = 0u; scale += 32; }
    const uint z = 31u - uint(findMSB(f0));
    const uint top = (f0 << z) | ((f1 >> 1) >> (31u - z));
    // top's 32 bits as two exact floats, summed with one rounding
    const float f = float(top >> 8) * 256.0 + float(top & 0xffu);
    const float r = f * """ + _f(math.pi / 2) + """ * uintBitsToFloat(uint(127 - scale - int(z)) << 23);
    return negative ? -r : r;
}
"""

# Cephes sinf, cosf and tanf on [-pi/4, pi/4] (relative error under 1e-7).
_POLYNOMIALS = """
float $name_sin(float r) {
    const float z = r * r;
    return r + r * z * (""" + _horner("z", [-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4]) + """);
}

float $name_cos(float r) {
    const float z = r * r;
    return 1.0 - 0.5 * z + z * z * (""" + _horner("z", [4.166664568298827e-2, -1.388731625493765e-3,
                                                         2.443315711809948e-5]) + """);
}

float $name_tan(float r) {
    const float z = r * r;
    return r + r * z * (""" + _horner("z", [3.33331568548e-1, 1.33387994085e-1, 5.34112807005e-2,
                                            2.44301354525e-2, 3.11992232697e-3, 9.38540185543e-3]) + """);
}
"""


def _periodic(core: str, odd: bool) -> str:
    """f(x) from |x|'s remainder r and quadrant n: `core` sets y from them; an odd f takes x's
    sign (-0 included)."""
    sign = "floatBitsToInt(x) < 0 ? -y : y" if odd else "y"
    return _REDUCE + _POLYNOMIALS + """
float $name(float x) {
    if (isnan(x)) return x;
    if (isinf(x)) return """ + NAN + """;
    const float a = abs(x);
    uint n = 0u;
    const float r = a < """ + QUARTER_PI_BELOW + """ ? a : $name_reduce(a, n);
    float y;
    """ + core + """
    return """ + sign + """;
}
"""


_SIN = _periodic("y = (n & 1u) == 0u ? $name_sin(r) : $name_cos(r);\n"
                 "    if ((n & 2u) != 0u) y = -y;", odd=True)
_COS = _periodic("y = (n & 1u) == 0u ? $name_cos(r) : -$name_sin(r);\n"
                 "    if ((n & 2u) != 0u) y = -y;", odd=False)
_TAN = _periodic("y = (n & 1u) == 0u ? $name_tan(r) : -1.0 / $name_tan(r);", odd=True)

# sqrt within an ulp whatever the device's (Vulkan allows the error of 1 / inversesqrt).
_SQRT = """
float $name_sqrt(float z) {
    const float s = sqrt(z);
    return s > 0.0 && !isinf(s) ? s + (z - s * s) * (0.5 / s) : s;
}
"""

# Cephes asinf on |t| <= 0.5.
_ASIN_CORE = _SQRT + """
float $name_asin(float t) {
    const float z = t * t;
    return t + t * z * (""" + _horner("z", [1.6666752422e-1, 7.4953002686e-2, 4.5470025998e-2,
                                            2.4181311049e-2, 4.2163199048e-2]) + """);
}
"""

_ASIN = _ASIN_CORE + """
float $name(float x) {
    const float a = abs(x);
    if (a > 1.0) return """ + NAN + """;
    float y;
    if (a > 0.5) {
        const float s = $name_asin($name_sqrt(0.5 * (1.0 - a)));
        y = (""" + PIO2_HI + """ - 2.0 * s) + """ + PIO2_LO + """;
        return x < 0.0 ? -y : y;
    }
    return $name_asin(x);
}
"""

_ACOS = _ASIN_CORE + """
float $name(float x) {
    if (abs(x) > 1.0) return """ + NAN + """;
    if (x < -0.5) return (""" + PI_HI + """ - 2.0 * $name_asin($name_sqrt(0.5 * (1.0 + x)))) + """ + PI_LO + """;
    if (x > 0.5) return 2.0 * $name_asin($name_sqrt(0.5 * (1.0 - x)));
    return (""" + PIO2_HI + """ - $name_asin(x)) + """ + PIO2_LO + """;
}
"""

# Cephes atanf: |x| past tan(3 pi / 8) through -1/x, past tan(pi / 8) through (x - 1) / (x + 1).
_ATAN = """
float $name(float x) {
    const float a = abs(x);
    float hi = 0.0, lo = 0.0, t = a;
    if (a > """ + _f(1 + math.sqrt(2)) + """) {
        hi = """ + PIO2_HI + """; lo = """ + PIO2_LO + """; t = -1.0 / a;
    } else if (a > """ + _f(math.sqrt(2) - 1) + """) {
        hi = """ + PIO4_HI + """; lo = """ + PIO4_LO + """; t = (a - 1.0) / (a + 1.0);
    }
    const float z = t * t;
    const float y = hi + (lo + (t + t * z * (""" + _horner("z", [-3.33329491539e-1, 1.99777106478e-1,
                                                                -1.38776856032e-1, 8.05374449538e-2]) + """)));
    return x < 0.0 ? -y : (x == 0.0 ? x : y);
}
"""

# e^x 2^s for |x| <= 90 (Cephes expf: relative error 1.7e-7): x - k ln 2 is exact with ln 2 in
# two parts, the first of 9 bits; the power of two in two factors, each a normal float.
_EXP = """
float $name_exp(float x, int s) {
    const float k = floor(x * """ + _f(1 / math.log(2)) + """ + 0.5);
    precise const float r = (x - k * 0.693359375) - k * """ + _f(-2.12194440e-4) + """;
    const float p = 1.0 + r + r * r * (""" + _horner("r", [5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2,
                                                         8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4]) + """);
    const int j = int(k) + s, h = j / 2;
    return p * uintBitsToFloat(uint(h + 127) << 23) * uintBitsToFloat(uint(j - h + 127) << 23);
}
"""

_SINH = _EXP + """
float $name(float x) {
    if (isnan(x)) return x;
    const float a = abs(x);
    if (a < 1.0) {
        const float z = x * x;
        return x + x * z * (""" + _horner("z", [1.66667160211e-1, 8.33028376239e-3, 2.03721912945e-4]) + """);
    }
    if (a > 90.0) return x > 0.0 ? """ + INF + """ : -""" + INF + """;
    const float e = $name_exp(a, -1);              // e^|x| / 2
    const float y = e - 0.25 / e;
    return x > 0.0 ? y : -y;
}
"""

_COSH = _EXP + """
float $name(float x) {
    if (isnan(x)) return x;
    const float a = abs(x);
    if (a > 90.0) return """ + INF + """;
    const float e = $name_exp(a, -1);
    return e + 0.25 / e;
}
"""

# log of a positive normal float (Cephes logf: relative error under 1e-7): x = m 2^e with m in
# [sqrt(1/2), sqrt(2)), log(m) = f - f^2 / 2 + f^3 P(f) with f = m - 1 exact.
_LOG = """
float $name_log(float x) {
    const uint bits = floatBitsToUint(x);
    int e = int(bits >> 23) - 127;
    float m = uintBitsToFloat((bits & 0x7fffffu) | 0x3f800000u);
    if (m > """ + _f(math.sqrt(2)) + """) {
        m *= 0.5;
        e += 1;
    }
    precise const float f = m - 1.0;
    const float z = f * f;
    float y = f * z * (""" + _horner("f", [3.3333331174e-1, -2.4999993993e-1, 2.0000714765e-1,
                                           -1.6668057665e-1, 1.4249322787e-1, -1.2420140846e-1,
                                           1.1676998740e-1, -1.1514610310e-1, 7.0376836292e-2]) + """);
    y += float(e) * """ + _f(-2.12194440e-4) + """;
    y += -0.5 * z;
    return (f + y) + float(e) * 0.693359375;
}

// log(1 + u) for u >= 0: the rounding of 1 + u is undone by the ratio u / ((1 + u) - 1).
float $name_log1p(float u) {
    precise const float w = 1.0 + u;
    precise const float d = w - 1.0;
    return d == 0.0 ? u : $name_log(w) * (u / d);
}
"""

_LN2 = _f(math.log(2))
# Below 2^-12 the next term of asinh's and atanh's series is under half an ulp; past 2^12,
# sqrt(x^2 + 1) is |x| to float precision.
_TINY, _HUGE = "2.44140625e-4", "4096.0"

_ASINH = _LOG + """
float $name(float x) {
    const float a = abs(x);
    if (!(a >= """ + _TINY + """) || isinf(x)) return x;
    float y;
    if (a > """ + _HUGE + """) y = $name_log(a) + """ + _LN2 + """;
    else if (a > 2.0) y = $name_log(2.0 * a + 1.0 / (sqrt(a * a + 1.0) + a));
    else y = $name_log1p(a + a * a / (1.0 + sqrt(1.0 + a * a)));
    return x < 0.0 ? -y : y;
}
"""

_ACOSH = _LOG + _SQRT + """
float $name(float x) {
    if (isnan(x)) return x;
    if (x < 1.0) return """ + NAN + """;
    if (isinf(x)) return x;
    if (x > """ + _HUGE + """) return $name_log(x) + """ + _LN2 + """;
    if (x > 2.0) return $name_log(2.0 * x - 1.0 / (x + sqrt(x * x - 1.0)));
    const float t = x - 1.0;
    return $name_log1p(t + $name_sqrt(2.0 * t + t * t));
}
"""

_ATANH = _LOG + """
float $name(float x) {
    const float a = abs(x);
    if (!(a >= """ + _TINY + """)) return x;
    if (a > 1.0) return """ + NAN + """;
    if (a == 1.0) return x > 0.0 ? """ + INF + """ : -""" + INF + """;
    const float t = a + a;
    const float y = 0.5 * $name_log1p(a < 0.5 ? t + t * a / (1.0 - a) : t / (1.0 - a));
    return x < 0.0 ? -y : y;
}
"""


def _helper(text: str) -> str:
    """A GLSL text as expr.HELPERS holds it: str.format's braces escaped, $name its {name}."""
    return text.strip().replace("{", "{{").replace("}", "}}").replace("$name", "{name}")


HELPERS = {name: _helper(text) for name, text in {
    "sin": _SIN, "cos": _COS, "tan": _TAN, "asin": _ASIN, "acos": _ACOS, "atan": _ATAN,
    "sinh": _SINH, "cosh": _COSH, "asinh": _ASINH, "acosh": _ACOSH, "atanh": _ATANH}.items()}
