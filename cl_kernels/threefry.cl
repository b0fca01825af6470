/* threefry2x32: the counter-mode hash behind functrace.random (and jax.random), one work-item
 * per output element: Threefry-2x32 with 20 rounds (Salmon et al., SC'11) in uint32 arithmetic
 * (adds wrap around; rotate() is OpenCL's rotate-left).
 *
 * The four operands (key words k1, k2 and counter words x1, x2) broadcast to the output, as the
 * primitive's numpy reference does.  The lowering (functrace/backends/opencl/random.py) puts
 *     #define TF_NAME threefry2x32_<layout>        the kernel's name
 *     #define TF_AT_K1(i) ... TF_AT_X2(i)          each operand's element for output element i
 * before this file (index expressions of integer constants only) and #undefs them after it.
 */
#ifndef FT_THREEFRY2X32
#define FT_THREEFRY2X32
#define FT_TF_ROUND(r) { x0 += x1; x1 = rotate(x1, (uint)(r)) ^ x0; }
#define FT_TF_ROUNDS_A FT_TF_ROUND(13) FT_TF_ROUND(15) FT_TF_ROUND(26) FT_TF_ROUND(6)
#define FT_TF_ROUNDS_B FT_TF_ROUND(17) FT_TF_ROUND(29) FT_TF_ROUND(16) FT_TF_ROUND(24)

inline uint2 ft_threefry2x32(const uint k0, const uint k1, uint x0, uint x1)
{
    const uint k2 = k0 ^ k1 ^ 0x1BD11BDAu;  /* the key schedule's parity word */
    x0 += k0; x1 += k1;
    FT_TF_ROUNDS_A x0 += k1; x1 += k2 + 1u;
    FT_TF_ROUNDS_B x0 += k2; x1 += k0 + 2u;
    FT_TF_ROUNDS_A x0 += k0; x1 += k1 + 3u;
    FT_TF_ROUNDS_B x0 += k1; x1 += k2 + 4u;
    FT_TF_ROUNDS_A x0 += k2; x1 += k0 + 5u;
    return (uint2)(x0, x1);
}
#endif

__kernel void TF_NAME(__global const uint* restrict k1, __global const uint* restrict k2,
                      __global const uint* restrict x1, __global const uint* restrict x2,
                      __global uint* restrict y1, __global uint* restrict y2, const long n)
{
    const long i = get_global_id(0);
    if (i >= n) return;
    const uint2 y = ft_threefry2x32(k1[TF_AT_K1(i)], k2[TF_AT_K2(i)], x1[TF_AT_X1(i)], x2[TF_AT_X2(i)]);
    y1[i] = y.x;
    y2[i] = y.y;
}
