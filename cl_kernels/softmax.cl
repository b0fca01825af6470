/* softmax and log_softmax over the last axis, one work-item per row, three passes over the row
 * (max; sum of exp; output) instead of three kernels with rows through memory in between.
 *
 * x and y are (R, D) row-major.  Like functrace.nn's reference: the shift is the row max, or 0
 * when that is not finite (rows of -inf give NaN, as 0/0); a NaN in a row makes the row NaN.
 * The lowering (functrace/backends/opencl/softmax.py) puts
 *     #define SM_REAL float | double      the element type
 *     #define SM_SUF f32 | f64             suffix of every kernel name
 * before this file and #undefs them after it.  Explicitly vectorized (SM_VW lanes per step with a
 * scalar tail); a*b+c is written as such (no fma(): slow on PoCL).
 */
#ifndef FT_CAT
#define FT_CAT_(a, b) a##b
#define FT_CAT(a, b) FT_CAT_(a, b)
#endif

#define SM_VW 8
#define SM_KN(name) FT_CAT(name, FT_CAT(_, SM_SUF))
#define SM_REALV FT_CAT(SM_REAL, SM_VW)
#define SM_VLOAD FT_CAT(vload, SM_VW)
#define SM_VSTORE FT_CAT(vstore, SM_VW)
#define SM_HSUM8(v) ((((v).s0 + (v).s4) + ((v).s2 + (v).s6)) + (((v).s1 + (v).s5) + ((v).s3 + (v).s7)))

#ifndef SM_HELPERS
#define SM_HELPERS
/* NaN-propagating max of a value into an accumulator (fmax alone would drop NaN) */
#define SM_MAX(acc, v) ((isnan(v) || (v) > (acc)) ? (v) : (acc))
#endif

/* the row's shift: its max, or 0 when that is not finite (+-inf, or NaN: the row is NaN anyway) */
inline SM_REAL SM_KN(sm_shift)(__global const SM_REAL* xr, const long D)
{
    SM_REALV vm = (SM_REALV)(-INFINITY);
    long d = 0;
    for (; d + SM_VW <= D; d += SM_VW) {
        const SM_REALV a = SM_VLOAD(0, xr + d);
        vm = select(fmax(vm, a), a + vm, isnan(a) | isnan(vm));
    }
    SM_REAL m = -INFINITY;
    for (int l = 0; l < SM_VW; l++) {
        const SM_REAL v = ((SM_REAL*)&vm)[l];
        m = SM_MAX(m, v);
    }
    for (; d < D; d++) m = SM_MAX(m, xr[d]);
    return isfinite(m) ? m : (SM_REAL)0;
}

/* y[r, :] = exp(x - shift) / sum(exp(x - shift)) */
__kernel void SM_KN(softmax_fwd)(__global const SM_REAL* restrict x, __global SM_REAL* restrict y, const long D)
{
    const long r = get_global_id(0);
    __global const SM_REAL* xr = x + r * D;
    __global SM_REAL* yr = y + r * D;
    const SM_REAL m = SM_KN(sm_shift)(xr, D);
    SM_REALV acc = (SM_REALV)(0);
    long d = 0;
    for (; d + SM_VW <= D; d += SM_VW) {
        const SM_REALV e = exp(SM_VLOAD(0, xr + d) - m);
        SM_VSTORE(e, 0, yr + d);
        acc += e;
    }
    SM_REAL s = SM_HSUM8(acc);
    for (; d < D; d++) {
        const SM_REAL e = exp(xr[d] - m);
        yr[d] = e;
        s += e;
    }
    d = 0;
    for (; d + SM_VW <= D; d += SM_VW) SM_VSTORE(SM_VLOAD(0, yr + d) / s, 0, yr + d);
    for (; d < D; d++) yr[d] = yr[d] / s;
}

/* sum(exp(x - m)) over a row */
inline SM_REAL SM_KN(sm_sum_exp)(__global const SM_REAL* xr, const long D, const SM_REAL m)
{
    SM_REALV acc = (SM_REALV)(0);
    long d = 0;
    for (; d + SM_VW <= D; d += SM_VW) acc += exp(SM_VLOAD(0, xr + d) - m);
    SM_REAL s = SM_HSUM8(acc);
    for (; d < D; d++) s += exp(xr[d] - m);
    return s;
}

/* y[r, :] = (x - shift) - log(sum(exp(x - shift))) */
__kernel void SM_KN(log_softmax_fwd)(__global const SM_REAL* restrict x, __global SM_REAL* restrict y, const long D)
{
    const long r = get_global_id(0);
    __global const SM_REAL* xr = x + r * D;
    __global SM_REAL* yr = y + r * D;
    const SM_REAL m = SM_KN(sm_shift)(xr, D);
    const SM_REAL ls = log(SM_KN(sm_sum_exp)(xr, D, m));
    long d = 0;
    for (; d + SM_VW <= D; d += SM_VW) SM_VSTORE((SM_VLOAD(0, xr + d) - m) - ls, 0, yr + d);
    for (; d < D; d++) yr[d] = (xr[d] - m) - ls;
}

#undef SM_VW
#undef SM_KN
#undef SM_REALV
#undef SM_VLOAD
#undef SM_VSTORE
#undef SM_HSUM8
