/* RMSNorm over the last axis: y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), and its
 * backward pass (dx per row; dw as a parallel column reduction over rows).
 *
 * x, g, y, dx are (R, D) row-major; w, dw are (D,).  One program can hold several
 * specializations of this file: the lowering (functrace/backends/opencl/norms.py) puts
 *     #define RN_REAL float | double      the element type
 *     #define RN_SUF f32 | f64             suffix of every kernel name
 * before it and #undefs them after it.  Code is explicitly vectorized (RN_VW = 8 lanes per step
 * with a scalar tail); a*b+c is written as such (no fma(): slow on PoCL).
 */
#ifndef FT_CAT
#define FT_CAT_(a, b) a##b
#define FT_CAT(a, b) FT_CAT_(a, b)
#endif

#define RN_VW 8
#define RN_KN(name) FT_CAT(name, FT_CAT(_, RN_SUF))
#define RN_REALV FT_CAT(RN_REAL, RN_VW)
#define RN_VLOAD FT_CAT(vload, RN_VW)
#define RN_VSTORE FT_CAT(vstore, RN_VW)
/* horizontal sum of an 8-lane vector */
#define RN_HSUM8(v) (((v).s0 + (v).s4) + ((v).s2 + (v).s6)) + (((v).s1 + (v).s5) + ((v).s3 + (v).s7))

/* y[r, :] = x[r, :] * rstd[r] * w   (one work-item per row) */
__kernel void RN_KN(rms_norm_fwd)(__global const RN_REAL* restrict x, __global const RN_REAL* restrict w,
                                  __global RN_REAL* restrict y, const long D, const RN_REAL eps)
{
    const long r = get_global_id(0);
    __global const RN_REAL* xr = x + r * D;
    __global RN_REAL* yr = y + r * D;
    RN_REALV acc = (RN_REALV)(0);
    long d = 0;
    for (; d + RN_VW <= D; d += RN_VW) {
        const RN_REALV a = RN_VLOAD(0, xr + d);
        acc = a * a + acc;
    }
    RN_REAL ss = RN_HSUM8(acc);
    for (; d < D; d++) ss = xr[d] * xr[d] + ss;
    const RN_REAL rstd = (RN_REAL)1 / sqrt(ss / (RN_REAL)D + eps);
    d = 0;
    for (; d + RN_VW <= D; d += RN_VW)
        RN_VSTORE(RN_VLOAD(0, xr + d) * rstd * RN_VLOAD(0, w + d), 0, yr + d);
    for (; d < D; d++) yr[d] = xr[d] * rstd * w[d];
}

/* dx[r, :] = rstd * (g*w - x * rstd^2 * mean(g*w*x)); rstd[r] is kept for the dw reduction. */
__kernel void RN_KN(rms_norm_bwd_dx)(__global const RN_REAL* restrict x, __global const RN_REAL* restrict w,
                                     __global const RN_REAL* restrict g, __global RN_REAL* restrict dx,
                                     __global RN_REAL* restrict rstd_out, const long D, const RN_REAL eps)
{
    const long r = get_global_id(0);
    __global const RN_REAL* xr = x + r * D;
    __global const RN_REAL* gr = g + r * D;
    __global RN_REAL* dr = dx + r * D;
    RN_REALV acc = (RN_REALV)(0), cacc = (RN_REALV)(0);
    long d = 0;
    for (; d + RN_VW <= D; d += RN_VW) {
        const RN_REALV a = RN_VLOAD(0, xr + d);
        const RN_REALV gw = RN_VLOAD(0, gr + d) * RN_VLOAD(0, w + d);
        acc = a * a + acc;
        cacc = gw * a + cacc;
    }
    RN_REAL ss = RN_HSUM8(acc), c = RN_HSUM8(cacc);
    for (; d < D; d++) {
        ss = xr[d] * xr[d] + ss;
        c = gr[d] * w[d] * xr[d] + c;
    }
    const RN_REAL rstd = (RN_REAL)1 / sqrt(ss / (RN_REAL)D + eps);
    const RN_REAL k = rstd * rstd * (c / (RN_REAL)D);
    rstd_out[r] = rstd;
    d = 0;
    for (; d + RN_VW <= D; d += RN_VW) {
        const RN_REALV gw = RN_VLOAD(0, gr + d) * RN_VLOAD(0, w + d);
        RN_VSTORE(rstd * (gw - RN_VLOAD(0, xr + d) * k), 0, dr + d);
    }
    for (; d < D; d++) dr[d] = rstd * (gr[d] * w[d] - xr[d] * k);
}

/* Partial column sums of g * x * rstd over a chunk of rows: work-item (j, c) sums columns
 * [j*2*RN_VW, (j+1)*2*RN_VW) over rows [c*rows_per_chunk, ...) into out[c, :]. */
__kernel void RN_KN(rms_norm_bwd_dw)(__global const RN_REAL* restrict x, __global const RN_REAL* restrict g,
                                     __global const RN_REAL* restrict rstd, __global RN_REAL* restrict out,
                                     const long R, const long D, const long rows_per_chunk)
{
    const long d0 = get_global_id(0) * (2 * RN_VW);
    const long c = get_global_id(1);
    const long r0 = c * rows_per_chunk;
    const long r1 = min(R, r0 + rows_per_chunk);
    __global RN_REAL* o = out + c * D;
    if (d0 + 2 * RN_VW <= D) {
        RN_REALV a0 = (RN_REALV)(0), a1 = (RN_REALV)(0);
        for (long r = r0; r < r1; r++) {
            const RN_REAL s = rstd[r];
            const long off = r * D + d0;
            a0 = RN_VLOAD(0, g + off) * RN_VLOAD(0, x + off) * s + a0;
            a1 = RN_VLOAD(1, g + off) * RN_VLOAD(1, x + off) * s + a1;
        }
        RN_VSTORE(a0, 0, o + d0);
        RN_VSTORE(a1, 1, o + d0);
    } else {
        for (long d = d0; d < D; d++) {
            RN_REAL a = 0;
            for (long r = r0; r < r1; r++) a = g[r * D + d] * x[r * D + d] * rstd[r] + a;
            o[d] = a;
        }
    }
}

/* dw[d] = sum over chunks of partial[c, d] */
__kernel void RN_KN(rms_norm_bwd_dw_combine)(__global const RN_REAL* restrict partial, __global RN_REAL* restrict dw,
                                             const long D, const long chunks)
{
    const long d = get_global_id(0);
    RN_REAL a = partial[d];
    for (long c = 1; c < chunks; c++) a += partial[c * D + d];
    dw[d] = a;
}

#undef RN_VW
#undef RN_KN
#undef RN_REALV
#undef RN_VLOAD
#undef RN_VSTORE
#undef RN_HSUM8
