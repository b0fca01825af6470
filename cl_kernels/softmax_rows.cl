/* softmax and log_softmax over the last axis for GPUs (the gpu kind; cl_kernels/softmax.cl is the
 * CPU design): three passes over each row (max; sum of exp; output) by a work-group.
 *
 * x and y are (R, D) row-major.  A work-group of SR_WG work-items (a power of two) holds SR_WG / T
 * rows, T work-items per row (T a power of two, the argument ``T``: SR_WG for rows of at least
 * SR_WG elements, else the row length rounded up to a power of two).  Work-item t of a row reads
 * elements t, t + T, ... (neighbouring work-items read neighbouring elements: coalesced loads);
 * the row's max and its sum of exponentials are reduced by trees in local memory (fixed pairs: the
 * same bits every run).  Work-items past the last row take part in the barriers only.
 *
 * Like functrace.nn's reference and softmax.cl: the shift is the row max, or 0 when that is not
 * finite (rows of -inf give NaN, as 0/0); a NaN in a row makes the row NaN (the max keeps NaN).
 * The lowering (functrace/backends/opencl/softmax.py) puts
 *     #define SR_REAL float | double      the element type
 *     #define SR_SUF f32 | f64             suffix of every kernel name
 *     #define SR_WG 256                    work-items of a work-group (a power of two)
 * before this file and #undefs them after it.  Plain OpenCL C 1.2 (no builtins, no native functions).
 */
#ifndef FT_CAT
#define FT_CAT_(a, b) a##b
#define FT_CAT(a, b) FT_CAT_(a, b)
#endif

#define SR_KN(name) FT_CAT(name, FT_CAT(_, SR_SUF))

#ifndef SR_HELPERS
#define SR_HELPERS
/* NaN-propagating max of a value into an accumulator (fmax alone would drop NaN) */
#define SR_MAX(acc, v) ((isnan(v) || (v) > (acc)) ? (v) : (acc))
#endif

/* the shift of this work-item's row (its max, or 0 when that is not finite) and the row's sum of
 * exp(x - shift), by trees in local memory over the row's T work-items (t: index in the row);
 * off: the row's first element, live: the row exists */
inline void SR_KN(sr_row_stats)(__global const SR_REAL* x, const long off, const bool live, const long D,
                                __local SR_REAL* rm, __local SR_REAL* rs, const uint lid, const uint t,
                                const uint T, SR_REAL* shift, SR_REAL* sum)
{
    SR_REAL m = -INFINITY;
    if (live)
        for (long d = t; d < D; d += T) m = SR_MAX(m, x[off + d]);
    rm[lid] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = T >> 1; s > 0; s >>= 1) {
        if (t < s) rm[lid] = SR_MAX(rm[lid], rm[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = rm[lid - t];
    m = isfinite(m) ? m : (SR_REAL)0;
    SR_REAL a = 0;
    if (live)
        for (long d = t; d < D; d += T) a += exp(x[off + d] - m);
    rs[lid] = a;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = T >> 1; s > 0; s >>= 1) {
        if (t < s) rs[lid] += rs[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    *shift = m;
    *sum = rs[lid - t];
}

/* y[r, :] = exp(x - shift) / sum(exp(x - shift)) */
__kernel __attribute__((reqd_work_group_size(SR_WG, 1, 1)))
void SR_KN(softmax_rows_fwd)(__global const SR_REAL* restrict x, __global SR_REAL* restrict y,
                             const long R, const long D, const uint T)
{
    __local SR_REAL rm[SR_WG], rs[SR_WG];
    const uint lid = get_local_id(0);
    const uint t = lid & (T - 1);
    const long r = (long)get_group_id(0) * (SR_WG / T) + lid / T;
    const bool live = r < R;
    const long off = live ? r * D : 0;
    SR_REAL m, s;
    SR_KN(sr_row_stats)(x, off, live, D, rm, rs, lid, t, T, &m, &s);
    if (live)
        for (long d = t; d < D; d += T) y[off + d] = exp(x[off + d] - m) / s;
}

/* y[r, :] = (x - shift) - log(sum(exp(x - shift))) */
__kernel __attribute__((reqd_work_group_size(SR_WG, 1, 1)))
void SR_KN(log_softmax_rows_fwd)(__global const SR_REAL* restrict x, __global SR_REAL* restrict y,
                                 const long R, const long D, const uint T)
{
    __local SR_REAL rm[SR_WG], rs[SR_WG];
    const uint lid = get_local_id(0);
    const uint t = lid & (T - 1);
    const long r = (long)get_group_id(0) * (SR_WG / T) + lid / T;
    const bool live = r < R;
    const long off = live ? r * D : 0;
    SR_REAL m, s;
    SR_KN(sr_row_stats)(x, off, live, D, rm, rs, lid, t, T, &m, &s);
    const SR_REAL ls = log(s);
    if (live)
        for (long d = t; d < D; d += T) y[off + d] = (x[off + d] - m) - ls;
}

#undef SR_KN
