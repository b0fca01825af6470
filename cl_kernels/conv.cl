/* Direct N-D convolution (up to 3 spatial dims) in the canonical layout of the
 * conv_general_dilated primitive: lhs (N, C, D, H, W), rhs (O, I, KD, KH, KW), out
 * (NO, O, OD, OH, OW), all row-major; fewer spatial dims are given as leading 1s.
 *
 * One work-item per output element sums over its group's input features and the kernel taps.
 * A tap reads the (virtually) lhs-dilated, padded input at  o * stride + k * rhs_dilation - pad_lo:
 * taps in the padding are outside the loop bounds, holes of the lhs dilation are skipped.  The lowering
 * (functrace/backends/opencl/conv.py) #defines the geometry before this file and #undefs it after:
 *   CV_REAL, CV_KN           element type; kernel name
 *   CV_N CV_C CV_D CV_H CV_W lhs sizes;  CV_O CV_I CV_KD CV_KH CV_KW rhs sizes
 *   CV_NO CV_OD CV_OH CV_OW  output sizes (batch and spatial)
 *   CV_S{D,H,W} strides, CV_P{D,H,W} low paddings, CV_L{D,H,W} lhs dilations, CV_R{D,H,W} rhs dilations
 *   CV_FG CV_BG              feature / batch group counts (one of them is 1)
 * Constants make the index arithmetic fold at compile time.
 */

#ifndef CV_TAP_LO
/* first tap k with o * S + k * R - P >= 0, and one past the last with it <= (SIZE - 1) * L */
#define CV_TAP_LO(o, S, R, P) ((P) - (o) * (S) > 0 ? ((P) - (o) * (S) + (R) - 1) / (R) : 0L)
#define CV_TAP_HI(o, S, R, P, L, SIZE, K) \
    (((SIZE) - 1) * (L) + (P) - (o) * (S) < 0 ? 0L : min((long)(K), (((SIZE) - 1) * (L) + (P) - (o) * (S)) / (R) + 1))
#endif

#ifdef CV_KN  /* (each specialization defines only the kernels it launches) */
__kernel void CV_KN(__global const CV_REAL* restrict lhs, __global const CV_REAL* restrict rhs,
                    __global CV_REAL* restrict out)
{
    long idx = get_global_id(0);
    const long ow = idx % CV_OW; idx /= CV_OW;
    const long oh = idx % CV_OH; idx /= CV_OH;
    const long od = idx % CV_OD; idx /= CV_OD;
    const long o = idx % CV_O;
    const long n = idx / CV_O;
    const long group = o / (CV_O / (CV_FG * CV_BG));
    const long batch = CV_BG > 1 ? group * CV_NO + n : n;
    const long c0 = CV_FG > 1 ? group * CV_I : 0;
    /* the taps that land inside the (lhs-dilated) input, so the loops need no bounds tests */
    const long d0 = CV_TAP_LO(od, CV_SD, CV_RD, CV_PD), d1 = CV_TAP_HI(od, CV_SD, CV_RD, CV_PD, CV_LD, CV_D, CV_KD);
    const long h0 = CV_TAP_LO(oh, CV_SH, CV_RH, CV_PH), h1 = CV_TAP_HI(oh, CV_SH, CV_RH, CV_PH, CV_LH, CV_H, CV_KH);
    const long w0 = CV_TAP_LO(ow, CV_SW, CV_RW, CV_PW), w1 = CV_TAP_HI(ow, CV_SW, CV_RW, CV_PW, CV_LW, CV_W, CV_KW);
    __global const CV_REAL* xb = lhs + (batch * CV_C + c0) * (CV_D * CV_H * CV_W);
    __global const CV_REAL* wb = rhs + o * (CV_I * CV_KD * CV_KH * CV_KW);
    CV_REAL acc = 0;
    for (long ci = 0; ci < CV_I; ++ci) {
        for (long kd = d0; kd < d1; ++kd) {
            const long pd = od * CV_SD + kd * CV_RD - CV_PD;
            if (CV_LD > 1 && pd % CV_LD != 0) continue;
            for (long kh = h0; kh < h1; ++kh) {
                const long ph = oh * CV_SH + kh * CV_RH - CV_PH;
                if (CV_LH > 1 && ph % CV_LH != 0) continue;
                __global const CV_REAL* xr = xb + ((ci * CV_D + pd / CV_LD) * CV_H + ph / CV_LH) * CV_W;
                __global const CV_REAL* wr = wb + ((ci * CV_KD + kd) * CV_KH + kh) * CV_KW;
                for (long kw = w0; kw < w1; ++kw) {
                    const long pw = ow * CV_SW + kw * CV_RW - CV_PW;
                    if (CV_LW > 1 && pw % CV_LW != 0) continue;
                    acc += xr[pw / CV_LW] * wr[kw];
                }
            }
        }
    }
    out[get_global_id(0)] = acc;
}
#endif

/* im2col for the matmul path: cols[g, (ci, kd, kh, kw), n, (od, oh, ow)] = the input under that tap
 * (0 in padding and dilation holes), g the feature group (channels g*I..) or the batch group
 * (batch g*NO..); one work-item per output row (all ow: the divisions once per row). */
#ifdef CV_IM2COL
__kernel void CV_IM2COL(__global const CV_REAL* restrict lhs, __global CV_REAL* restrict cols)
{
    long idx = get_global_id(0);
    __global CV_REAL* row = cols + idx * CV_OW;
    const long oh = idx % CV_OH; idx /= CV_OH;
    const long od = idx % CV_OD; idx /= CV_OD;
    const long n = idx % CV_NO; idx /= CV_NO;
    const long kw = idx % CV_KW; idx /= CV_KW;
    const long kh = idx % CV_KH; idx /= CV_KH;
    const long kd = idx % CV_KD; idx /= CV_KD;
    const long ci = idx % CV_I;
    const long group = idx / CV_I;
    const long batch = CV_BG > 1 ? group * CV_NO + n : n;
    const long c = (CV_FG > 1 ? group * CV_I : 0) + ci;
    const long pd = od * CV_SD + kd * CV_RD - CV_PD, ph = oh * CV_SH + kh * CV_RH - CV_PH;
    if (pd < 0 || ph < 0 || pd % CV_LD != 0 || ph % CV_LH != 0 || pd / CV_LD >= CV_D || ph / CV_LH >= CV_H) {
        for (long ow = 0; ow < CV_OW; ++ow) row[ow] = 0;
        return;
    }
    __global const CV_REAL* src = lhs + ((batch * CV_C + c) * CV_D + pd / CV_LD) * (CV_H * CV_W) + (ph / CV_LH) * CV_W;
    const long w0 = CV_TAP_LO(kw, CV_RW, CV_SW, CV_PW);  /* first ow with ow * SW + kw * RW - PW >= 0 */
    const long w1 = CV_TAP_HI(kw, CV_RW, CV_SW, CV_PW, CV_LW, CV_W, CV_OW);
    for (long ow = 0; ow < w0; ++ow) row[ow] = 0;
    for (long ow = w0; ow < w1; ++ow) {
        const long pw = ow * CV_SW + kw * CV_RW - CV_PW;
        row[ow] = (CV_LW == 1 || pw % CV_LW == 0) ? src[pw / CV_LW] : 0;
    }
    for (long ow = max(w0, w1); ow < CV_OW; ++ow) row[ow] = 0;
}
#endif

/* out[n, o, :] = prod[o, n, :]: the matmul's (O, NO * P) result in the output layout, a row per item */
#ifdef CV_SWAP
__kernel void CV_SWAP(__global const CV_REAL* restrict prod, __global CV_REAL* restrict out)
{
    const long i = get_global_id(0);
    const long o = i % CV_O, n = i / CV_O, P = CV_OD * CV_OH * CV_OW;
    __global const CV_REAL* src = prod + (o * CV_NO + n) * P;
    __global CV_REAL* dst = out + i * P;
    for (long p = 0; p < P; ++p) dst[p] = src[p];
}
#endif
