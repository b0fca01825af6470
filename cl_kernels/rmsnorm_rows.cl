/* RMSNorm over the last axis for GPUs (the gpu kind; cl_kernels/rmsnorm.cl is the CPU design):
 * y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), and its backward pass.
 *
 * x, g, y, dx are (R, D) row-major; w, dw are (D,).
 *
 * Rows (rms_norm_rows_fwd, rms_norm_rows_bwd_dx): a work-group of RR_WG work-items (a power of
 * two) holds RR_WG / T rows, T work-items per row (T a power of two, the argument ``T``: RR_WG for
 * rows of at least RR_WG elements, else the row length rounded up to a power of two).  Work-item t
 * of a row reads elements t, t + T, t + 2T, ... (neighbouring work-items read neighbouring
 * elements: coalesced loads), sums its share in order, then the row's T partial sums are added by
 * a tree in local memory (fixed pairs: the same bits every run), and a second pass writes the
 * row.  Work-items past the last row take part in the barriers only.
 *
 * dw (rms_norm_rows_bwd_dw): a column reduction of g * x * rstd over rows, no atomics: a work-group
 * of RR_CW x RR_RH work-items covers RR_CW neighbouring columns (coalesced) of one chunk of rows;
 * its RR_RH lanes sum every RR_RH-th row of the chunk in order, a tree in local memory adds the
 * lanes, and the chunk's sums go to out[chunk, :] (dw itself when there is one chunk); then
 * rms_norm_rows_bwd_dw_combine adds the chunks in order (chunk 0, 1, ...).
 *
 * One program can hold several specializations of this file: the lowering
 * (functrace/backends/opencl/norms.py) puts
 *     #define RR_REAL float | double     the element type
 *     #define RR_SUF f32 | f64            suffix of every kernel name
 *     #define RR_WG 256                   work-items of a row work-group (a power of two)
 *     #define RR_CW 32                    columns of a dw work-group
 *     #define RR_RH 8                     row lanes of a dw work-group (a power of two)
 * before it and #undefs them after it.  Plain OpenCL C 1.2 (no builtins, no native functions).
 */
#ifndef FT_CAT
#define FT_CAT_(a, b) a##b
#define FT_CAT(a, b) FT_CAT_(a, b)
#endif

#define RR_KN(name) FT_CAT(name, FT_CAT(_, RR_SUF))

/* the sums of a and b over the T work-items of this work-item's row (t its index in the row),
 * by a tree in local memory (once per kernel: ra and rb are not written again) */
inline void RR_KN(rr_row_sums)(__local RR_REAL* ra, __local RR_REAL* rb, const uint lid, const uint t,
                               const uint T, RR_REAL* a, RR_REAL* b)
{
    ra[lid] = *a;
    rb[lid] = *b;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = T >> 1; s > 0; s >>= 1) {
        if (t < s) {
            ra[lid] += ra[lid + s];
            rb[lid] += rb[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    *a = ra[lid - t];
    *b = rb[lid - t];
}

/* y[r, :] = x[r, :] * rstd[r] * w */
__kernel __attribute__((reqd_work_group_size(RR_WG, 1, 1)))
void RR_KN(rms_norm_rows_fwd)(__global const RR_REAL* restrict x, __global const RR_REAL* restrict w,
                              __global RR_REAL* restrict y, const long R, const long D, const uint T,
                              const RR_REAL eps)
{
    __local RR_REAL ra[RR_WG], rb[RR_WG];
    const uint lid = get_local_id(0);
    const uint t = lid & (T - 1);
    const long r = (long)get_group_id(0) * (RR_WG / T) + lid / T;
    const bool live = r < R;
    const long off = live ? r * D : 0;
    RR_REAL ss = 0, unused = 0;
    if (live)
        for (long d = t; d < D; d += T) {
            const RR_REAL a = x[off + d];
            ss = a * a + ss;
        }
    RR_KN(rr_row_sums)(ra, rb, lid, t, T, &ss, &unused);
    const RR_REAL rstd = (RR_REAL)1 / sqrt(ss / (RR_REAL)D + eps);
    if (live)
        for (long d = t; d < D; d += T) y[off + d] = x[off + d] * rstd * w[d];
}

/* dx[r, :] = rstd * (g*w - x * rstd^2 * mean(g*w*x)); rstd[r] is kept for the dw reduction */
__kernel __attribute__((reqd_work_group_size(RR_WG, 1, 1)))
void RR_KN(rms_norm_rows_bwd_dx)(__global const RR_REAL* restrict x, __global const RR_REAL* restrict w,
                                 __global const RR_REAL* restrict g, __global RR_REAL* restrict dx,
                                 __global RR_REAL* restrict rstd_out, const long R, const long D,
                                 const uint T, const RR_REAL eps)
{
    __local RR_REAL ra[RR_WG], rb[RR_WG];
    const uint lid = get_local_id(0);
    const uint t = lid & (T - 1);
    const long r = (long)get_group_id(0) * (RR_WG / T) + lid / T;
    const bool live = r < R;
    const long off = live ? r * D : 0;
    RR_REAL ss = 0, c = 0;
    if (live)
        for (long d = t; d < D; d += T) {
            const RR_REAL a = x[off + d];
            const RR_REAL gw = g[off + d] * w[d];
            ss = a * a + ss;
            c = gw * a + c;
        }
    RR_KN(rr_row_sums)(ra, rb, lid, t, T, &ss, &c);
    const RR_REAL rstd = (RR_REAL)1 / sqrt(ss / (RR_REAL)D + eps);
    const RR_REAL k = rstd * rstd * (c / (RR_REAL)D);
    if (live && t == 0) rstd_out[r] = rstd;
    if (live)
        for (long d = t; d < D; d += T) dx[off + d] = rstd * (g[off + d] * w[d] - x[off + d] * k);
}

/* out[c, d] = sum of g[r, d] * x[r, d] * rstd[r] over rows [c * rows_per_chunk, ...) of chunk
 * c = get_group_id(1); the columns d = get_global_id(0) (past D: idle) */
__kernel __attribute__((reqd_work_group_size(RR_CW, RR_RH, 1)))
void RR_KN(rms_norm_rows_bwd_dw)(__global const RR_REAL* restrict x, __global const RR_REAL* restrict g,
                                 __global const RR_REAL* restrict rstd, __global RR_REAL* restrict out,
                                 const long R, const long D, const long rows_per_chunk)
{
    __local RR_REAL red[RR_RH * RR_CW];
    const uint i = get_local_id(0), j = get_local_id(1);
    const long d = get_global_id(0);
    const long c = get_group_id(1);
    const long r0 = c * rows_per_chunk;
    const long r1 = min(R, r0 + rows_per_chunk);
    RR_REAL a = 0;
    if (d < D)
        for (long r = r0 + j; r < r1; r += RR_RH) a = g[r * D + d] * x[r * D + d] * rstd[r] + a;
    red[j * RR_CW + i] = a;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = RR_RH >> 1; s > 0; s >>= 1) {
        if (j < s) red[j * RR_CW + i] += red[(j + s) * RR_CW + i];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (j == 0 && d < D) out[c * D + d] = red[i];
}

/* dw[d] = sum over chunks of partial[c, d], in order (d past D: idle) */
__kernel void RR_KN(rms_norm_rows_bwd_dw_combine)(__global const RR_REAL* restrict partial,
                                                  __global RR_REAL* restrict dw, const long D, const long chunks)
{
    const long d = get_global_id(0);
    if (d >= D) return;
    RR_REAL a = partial[d];
    for (long c = 1; c < chunks; c++) a += partial[c * D + d];
    dw[d] = a;
}

#undef RR_KN
