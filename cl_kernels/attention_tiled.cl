/* Flash attention for GPUs (the gpu kind; cl_kernels/attention.cl is the CPU design): forward,
 * then the backward as a dQ kernel and a dK/dV kernel of the same shape.
 *
 * Layouts and semantics are attention.cl's (read its header): q, out, g, dq (B, T, NH, HD); k, v,
 * dk, dv (B, S, NH, HD); mask (B, NH, T, S) bytes (nonzero = keep; it already holds the causal
 * mask); lse, delta, bias (B, NH, T); masked logits are -1e30; a fully masked row averages the
 * keys scoring -1e30 (lse = log(count) - 1e30); the backward recomputes P = exp(logit - lse - bias)
 * with the logit rounded as the forward rounds it; delta = g . out where g, out and v are finite,
 * else the reference's sum_j P_j dP_j; dS = 0 exactly at masked pairs.
 *
 * Design: a work-group of AF_WG work-items owns AF_WG queries (forward, dQ) or AF_WG keys (dK/dV)
 * of one batch * head, one per work-item, with that row's operands and accumulators (head_dim
 * values each) in private memory.  It streams over the other side in tiles of AF_BK rows staged
 * in __local memory by the whole group (coalesced loads: neighbouring work-items read
 * neighbouring elements of a row), so each K / V (Q / G) tile is read from global memory once
 * per group instead of once per query.  The mask of a tile comes as bits per work-item (a ulong:
 * at most 64 rows per tile), from a local copy of the tile's mask loaded coalesced by the group
 * (forward, dQ) or from loads coalesced across the group's keys (dK/dV).  Before each tile every
 * work-item publishes (in local flags) whether its row keeps any pair of the tile and whether
 * its share of the tile's multiplicands holds an inf or NaN; the group skips the
 * tile -- no load, no arithmetic -- when no row keeps a pair and the zeros the masked pairs would
 * add are exact (attention.cl's rule: 0 * inf is NaN in the reference).  That is how the causal
 * upper triangle costs only the flags.  Within a loaded tile every work-item computes (its
 * masked pairs add the reference's exact zeros; rows past T / S repeat the last row and store
 * nothing): no branch on a work-item's own data inside the tile loops -- a GPU's SIMD lanes would
 * wait anyway, and PoCL's CPU device took work-item 0's side of such a branch (after a barrier in
 * a loop) for the whole group.  The forward's online softmax takes 16 keys at a time (their
 * scores in registers: one rescale per 16 keys).  Rows whose logits are all at most -1e30 and
 * that have masked keys (skipped tiles miss their -1e30 scores) are recomputed by their
 * work-item over all keys, as in attention.cl.  Sums run in a fixed order; no atomics.
 *
 * Specialized by the lowering (functrace/backends/opencl/attention.py), which defines before
 * this file and #undefs after it:
 *     AF_REAL  float | double     AF_HD  head dim     AF_NH  number of heads
 *     AF_WG    work-items per group (queries / keys per group)
 *     AF_BK    rows per local tile (a multiple of 16)
 *     AF_SUF   kernel-name suffix, e.g. f32_h64_n4_k64
 * Plain OpenCL C 1.2 (no builtins, no native functions).
 */
#ifndef FT_CAT
#define FT_CAT_(a, b) a##b
#define FT_CAT(a, b) FT_CAT_(a, b)
#endif

#define AF_KN(name) FT_CAT(name, FT_CAT(_, AF_SUF))
#define AF_RS ((long)AF_NH * AF_HD)             /* stride between sequence positions */
#define AF_NEG ((AF_REAL)(-1e30))
#define AF_BC 16                                /* keys per online-softmax step (forward) */
#define AF_MS (AF_BK + 4)                       /* row stride of a local mask tile: AF_BK / 4 + 1 words,
                                                   odd, so the rows' words fall in distinct banks */
/* acc = the dot product of a and b (AF_HD values each) in the order every kernel uses, so the
 * backward's logits are the forward's bits (a * b + c: the compiler contracts it alike everywhere) */
#define AF_DOT(acc, a, b) do { acc = 0; for (int h_ = 0; h_ < AF_HD; h_++) acc = (a)[h_] * (b)[h_] + acc; } while (0)

/* P = exp(logit - lse - bias), the logit rounded before the subtraction (see attention.cl) */
inline AF_REAL AF_KN(af_prob)(const AF_REAL dot, const AF_REAL scale, const AF_REAL lse, const AF_REAL bias)
{
    #pragma OPENCL FP_CONTRACT OFF
    return exp(dot * scale - lse - bias);
}

/* P of a masked pair in a row with this lse and bias: 0, NaN in a NaN row, 1 / count in a dead row */
inline AF_REAL AF_KN(af_masked_prob)(const AF_REAL lse, const AF_REAL bias)
{
    return exp(AF_NEG - lse - bias);
}

/* The group loads mask[tq0 ... tq0+AF_WG-1, j0 ... j0+nk-1] (rows past T: the last row; keys past
 * nk: 0) into ml, coalesced: neighbouring work-items read neighbouring bytes of a row. */
inline void AF_KN(af_load_mask)(__global const uchar* mb, __local uchar* ml, const int tq0, const int T,
                                const long S, const int j0, const int nk, const int lid)
{
    for (int e = lid; e < AF_WG * AF_BK; e += AF_WG) {
        const int r = e / AF_BK, j = e % AF_BK;
        ml[r * AF_MS + j] = j < nk ? mb[min(tq0 + r, T - 1) * S + j0 + j] : 0;
    }
}

/* row lid of the local mask tile as bits (bit j: key j0 + j kept) */
inline ulong AF_KN(af_row_bits)(__local const uchar* ml, const int lid)
{
    ulong bits = 0;
    for (int j = 0; j < AF_BK; j++) bits |= (ulong)(ml[lid * AF_MS + j] != 0) << j;
    return bits;
}

/* the OR of the group's flags of this tile */
inline uchar AF_KN(af_group_flags)(__local const uchar* fl)
{
    uchar any = 0;
    for (int i = 0; i < AF_WG; i++) any |= fl[i];
    return any;
}

/* ------------------------------------------------------------------ forward
 * Group (tb, bn): queries tb*AF_WG + lid of batch*head bn; online softmax over K/V tiles. */
__kernel __attribute__((reqd_work_group_size(AF_WG, 1, 1)))
void AF_KN(attention_tiled_fwd)(__global const AF_REAL* restrict q, __global const AF_REAL* restrict k,
                                __global const AF_REAL* restrict v, __global const uchar* restrict mask,
                                __global AF_REAL* restrict out, __global AF_REAL* restrict lse,
                                const int T, const int S, const AF_REAL scale)
{
    __local AF_REAL kt[AF_BK * AF_HD], vt[AF_BK * AF_HD];
    __local uchar fl[2][AF_WG], ml[AF_WG * AF_MS];
    const int lid = get_local_id(0);
    const int tq0 = get_group_id(0) * AF_WG, t = tq0 + lid;
    const int live = t < T;
    const long tr = live ? t : T - 1;           /* work-items past T read the last row, store nothing */
    const long bn = get_global_id(1);
    const long b = bn / AF_NH, n = bn % AF_NH;
    __global const AF_REAL* qr = q + ((b * T + tr) * AF_NH + n) * AF_HD;
    __global const AF_REAL* kb = k + (b * S * AF_NH + n) * AF_HD;
    __global const AF_REAL* vb = v + (b * S * AF_NH + n) * AF_HD;
    __global const uchar* mr = mask + (bn * T + tr) * (long)S;   /* this query's mask row */

    AF_REAL qv[AF_HD], acc[AF_HD];
    for (int h = 0; h < AF_HD; h++) {
        qv[h] = qr[h];
        acc[h] = 0;
    }
    AF_REAL m = -INFINITY, l = 0;

    int it = 0;
    for (int j0 = 0; j0 < S; j0 += AF_BK, it ^= 1) {
        const int nk = min(AF_BK, S - j0);
        AF_KN(af_load_mask)(mask + bn * T * (long)S, ml, tq0, T, S, j0, nk, lid);
        barrier(CLK_LOCAL_MEM_FENCE);   /* (every work-item is done with the previous tile) */
        const ulong bits = AF_KN(af_row_bits)(ml, lid);   /* this row's keys of the tile */
        const int kept = bits != 0;
        uchar bad = 0;
        for (int e = lid; e < nk * AF_HD; e += AF_WG)
            bad |= !isfinite(vb[(long)(j0 + e / AF_HD) * AF_RS + e % AF_HD]);
        fl[it][lid] = (live && kept ? 1 : 0) | (bad ? 2 : 0);
        barrier(CLK_LOCAL_MEM_FENCE);   /* also: every work-item has read its row of ml */
        const uchar any = AF_KN(af_group_flags)(fl[it]);
        if (any == 0) continue;         /* no row keeps a key here and v is finite: adds exact zeros */
        for (int e = lid; e < AF_BK * AF_HD; e += AF_WG) {
            const int j = e / AF_HD, in = j < nk;
            const long off = (long)(j0 + (in ? j : 0)) * AF_RS + e % AF_HD;
            kt[e] = in ? kb[off] : 0;
            vt[e] = in ? vb[off] : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* every work-item computes (past T: a copy of the last row, not stored) */
        for (int c = 0; c < nk; c += AF_BC) {
            AF_REAL s[AF_BC];
            for (int j = 0; j < AF_BC; j++) {
                AF_REAL d;
                AF_DOT(d, qv, kt + (c + j) * AF_HD);
                /* keys past S (zero rows of the tile) weigh exp(-inf) = 0 */
                s[j] = c + j >= nk ? (AF_REAL)(-INFINITY) : ((bits >> (c + j)) & 1 ? d * scale : AF_NEG);
            }
            AF_REAL mx = s[0];
            for (int j = 1; j < AF_BC; j++) mx = fmax(mx, s[j]);
            const AF_REAL mnew = fmax(m, mx);
            /* the shift: 0 while the max is -inf, so exp(-inf - shift) = 0, not NaN */
            const AF_REAL ms = mnew == -INFINITY ? (AF_REAL)0 : mnew;
            const AF_REAL alpha = exp(m - ms);
            l = l * alpha;
            for (int j = 0; j < AF_BC; j++) {
                s[j] = exp(s[j] - ms);
                l += s[j];
            }
            for (int h = 0; h < AF_HD; h++) {
                AF_REAL a = acc[h] * alpha;
                for (int j = 0; j < AF_BC; j++) a = s[j] * vt[(c + j) * AF_HD + h] + a;
                acc[h] = a;
            }
            m = mnew;
        }
    }
    if (!live) return;
    /* a row with no score above -1e30 (and not NaN): if it has masked keys, whose -1e30 scores
     * skipped tiles left out, the reference's max is -1e30 and the masked keys and the scores of
     * exactly -1e30 weigh 1, lower ones 0 -- recomputed over all S keys */
    if (m <= AF_NEG && l == l) {
        uchar masked_any = 0;
        for (int j = 0; j < S; j++) masked_any |= !mr[j];
        if (masked_any) {
            AF_REAL cnt = 0;
            for (int h = 0; h < AF_HD; h++) acc[h] = 0;
            for (int j = 0; j < S; j++) {
                __global const AF_REAL* kr = kb + (long)j * AF_RS;
                __global const AF_REAL* vr = vb + (long)j * AF_RS;
                AF_REAL d;
                AF_DOT(d, qv, kr);
                const AF_REAL w = (!mr[j] || d * scale == AF_NEG) ? (AF_REAL)1 : (AF_REAL)0;
                cnt += w;
                for (int h = 0; h < AF_HD; h++) acc[h] = w * vr[h] + acc[h];
            }
            l = cnt;
            m = AF_NEG;
        }
    }
    /* l = 0: every score -inf and no key masked; the reference's exp(-inf - -inf) makes it NaN */
    if (l == 0) l = NAN;
    const AF_REAL inv = (AF_REAL)1 / l;
    __global AF_REAL* orow = out + ((b * T + t) * AF_NH + n) * AF_HD;
    for (int h = 0; h < AF_HD; h++) orow[h] = acc[h] * inv;
    lse[bn * T + t] = m + log(l);
}

/* ------------------------------------------------------------------ backward: dQ (and delta)
 * Group (tb, bn): queries tb*AF_WG + lid; streams over K/V tiles.  Also writes delta, bias and
 * which rows' masked pairs weigh nothing (P = 0, q and g finite) for the dK/dV kernel. */
__kernel __attribute__((reqd_work_group_size(AF_WG, 1, 1)))
void AF_KN(attention_tiled_dq)(__global const AF_REAL* restrict q, __global const AF_REAL* restrict k,
                               __global const AF_REAL* restrict v, __global const uchar* restrict mask,
                               __global const AF_REAL* restrict out, __global const AF_REAL* restrict lse,
                               __global const AF_REAL* restrict g, __global AF_REAL* restrict dq,
                               __global AF_REAL* restrict delta, __global AF_REAL* restrict bias,
                               __global uchar* restrict weightless, const int T, const int S,
                               const AF_REAL scale)
{
    __local AF_REAL kt[AF_BK * AF_HD], vt[AF_BK * AF_HD];
    __local uchar fl[2][AF_WG], ml[AF_WG * AF_MS];
    const int lid = get_local_id(0);
    const int tq0 = get_group_id(0) * AF_WG, t = tq0 + lid;
    const int live = t < T;
    const long tr = live ? t : T - 1;
    const long bn = get_global_id(1);
    const long b = bn / AF_NH, n = bn % AF_NH;
    const long qoff = ((b * T + tr) * AF_NH + n) * AF_HD;
    __global const AF_REAL* kb = k + (b * S * AF_NH + n) * AF_HD;
    __global const AF_REAL* vb = v + (b * S * AF_NH + n) * AF_HD;
    __global const uchar* mr = mask + (bn * T + tr) * (long)S;

    AF_REAL qv[AF_HD], gv[AF_HD], dqa[AF_HD];
    AF_REAL dl = 0;
    int finite = 1, exact = 1;      /* exact: g . out is the reference's sum_j P_j dP_j */
    for (int h = 0; h < AF_HD; h++) {
        const AF_REAL gx = g[qoff + h], qx = q[qoff + h], ox = out[qoff + h];
        qv[h] = qx;
        gv[h] = gx;
        dqa[h] = 0;
        dl = gx * ox + dl;
        finite &= isfinite(gx) & isfinite(qx);
        exact &= isfinite(gx) & isfinite(ox);
    }
    const AF_REAL ls = lse[bn * T + tr];
    /* is all of v finite?  The group checks its (b, n) values together */
    uchar vbad = 0;
    for (long e = lid; e < (long)S * AF_HD; e += AF_WG) vbad |= !isfinite(vb[(e / AF_HD) * AF_RS + e % AF_HD]);
    fl[0][lid] = vbad ? 1 : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    vbad = AF_KN(af_group_flags)(fl[0]);        /* the tiles below start with fl[1] */

    /* bias: log(count of keys masked or scoring exactly -1e30) in rows whose lse is -1e30 */
    AF_REAL bs = 0;
    if (ls <= AF_NEG) {
        AF_REAL count = 0;
        for (int j = 0; j < S; j++) {
            AF_REAL d;
            AF_DOT(d, qv, kb + (long)j * AF_RS);
            count += (!mr[j] || d * scale == AF_NEG) ? (AF_REAL)1 : (AF_REAL)0;
        }
        bs = count > 0 ? log(count) : (AF_REAL)0;
    }
    if (!exact || vbad) {   /* the reference's delta = sum_j P_j dP_j over all keys */
        const AF_REAL masked_p = AF_KN(af_masked_prob)(ls, bs);
        dl = 0;
        for (int j = 0; j < S; j++) {
            AF_REAL d, dp;
            AF_DOT(d, qv, kb + (long)j * AF_RS);
            AF_DOT(dp, gv, vb + (long)j * AF_RS);
            const AF_REAL p = mr[j] ? AF_KN(af_prob)(d, scale, ls, bs) : masked_p;
            dl = p * dp + dl;
        }
    }
    if (live) {
        delta[bn * T + t] = dl;
        bias[bn * T + t] = bs;
        weightless[bn * T + t] = finite && AF_KN(af_masked_prob)(ls, bs) == 0;
    }

    int it = 1;
    for (int j0 = 0; j0 < S; j0 += AF_BK, it ^= 1) {
        const int nk = min(AF_BK, S - j0);
        AF_KN(af_load_mask)(mask + bn * T * (long)S, ml, tq0, T, S, j0, nk, lid);
        barrier(CLK_LOCAL_MEM_FENCE);   /* (every work-item is done with the previous tile) */
        const ulong bits = AF_KN(af_row_bits)(ml, lid);   /* this row's keys of the tile */
        const int kept = bits != 0;
        uchar bad = 0;
        for (int e = lid; e < nk * AF_HD; e += AF_WG)
            bad |= !isfinite(kb[(long)(j0 + e / AF_HD) * AF_RS + e % AF_HD]);
        fl[it][lid] = (live && kept ? 1 : 0) | (bad ? 2 : 0);
        barrier(CLK_LOCAL_MEM_FENCE);
        const uchar any = AF_KN(af_group_flags)(fl[it]);
        if (any == 0) continue;         /* dQ += 0 * k there, exactly */
        for (int e = lid; e < AF_BK * AF_HD; e += AF_WG) {
            const int j = e / AF_HD, in = j < nk;
            const long off = (long)(j0 + (in ? j : 0)) * AF_RS + e % AF_HD;
            kt[e] = in ? kb[off] : 0;
            vt[e] = in ? vb[off] : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = 0; j < nk; j++) {
            __local const AF_REAL* kr = kt + j * AF_HD;
            AF_REAL d, dp;
            AF_DOT(d, qv, kr);
            AF_DOT(dp, gv, vt + j * AF_HD);
            /* masked pairs: dS = 0 exactly, even where dP - delta is NaN */
            const AF_REAL ds = (bits >> j) & 1 ? AF_KN(af_prob)(d, scale, ls, bs) * (dp - dl) * scale : (AF_REAL)0;
            for (int h = 0; h < AF_HD; h++) dqa[h] = ds * kr[h] + dqa[h];
        }
    }
    if (!live) return;
    __global AF_REAL* r = dq + qoff;
    for (int h = 0; h < AF_HD; h++) r[h] = dqa[h];
}

/* ------------------------------------------------------------------ backward: dK, dV
 * Group (sb, bn): keys sb*AF_WG + lid; streams over Q/G tiles (with their lse, delta, bias). */
__kernel __attribute__((reqd_work_group_size(AF_WG, 1, 1)))
void AF_KN(attention_tiled_dkdv)(__global const AF_REAL* restrict q, __global const AF_REAL* restrict k,
                                 __global const AF_REAL* restrict v, __global const uchar* restrict mask,
                                 __global const AF_REAL* restrict lse, __global const AF_REAL* restrict g,
                                 __global const AF_REAL* restrict delta, __global const AF_REAL* restrict bias,
                                 __global const uchar* restrict weightless, __global AF_REAL* restrict dk,
                                 __global AF_REAL* restrict dv, const int T, const int S, const AF_REAL scale)
{
    __local AF_REAL qt[AF_BK * AF_HD], gt[AF_BK * AF_HD], lt[AF_BK], dt[AF_BK], bt[AF_BK];
    __local uchar fl[2][AF_WG];
    const int lid = get_local_id(0);
    const int s = get_group_id(0) * AF_WG + lid;
    const int live = s < S;
    const long sr = live ? s : S - 1;
    const long bn = get_global_id(1);
    const long b = bn / AF_NH, n = bn % AF_NH;
    const long koff = ((b * S + sr) * AF_NH + n) * AF_HD;
    __global const AF_REAL* qb = q + (b * T * AF_NH + n) * AF_HD;
    __global const AF_REAL* gb = g + (b * T * AF_NH + n) * AF_HD;
    __global const uchar* mc = mask + bn * T * (long)S + sr;      /* this key's mask column */

    AF_REAL kv[AF_HD], vv[AF_HD], dka[AF_HD], dva[AF_HD];
    for (int h = 0; h < AF_HD; h++) {
        kv[h] = k[koff + h];
        vv[h] = v[koff + h];
        dka[h] = 0;
        dva[h] = 0;
    }

    int it = 0;
    for (int t0 = 0; t0 < T; t0 += AF_BK, it ^= 1) {
        const int nq = min(AF_BK, T - t0);
        uchar heavy = 0;               /* heavy: a row of the tile whose masked pairs weigh something */
        ulong bits = 0;                /* bit r: query t0 + r keeps this key (loads coalesced across the group) */
        for (int r = 0; r < nq; r++) bits |= (ulong)(mc[(long)(t0 + r) * S] != 0) << r;
        const int kept = bits != 0;
        for (int r = lid; r < nq; r += AF_WG) heavy |= !weightless[bn * T + t0 + r];
        fl[it][lid] = (live && kept ? 1 : 0) | (heavy ? 2 : 0);
        barrier(CLK_LOCAL_MEM_FENCE);
        const uchar any = AF_KN(af_group_flags)(fl[it]);
        if (any == 0) continue;   /* dK += 0 * q, dV += 0 * g: exact (P = 0, q and g finite) */
        for (int e = lid; e < AF_BK * AF_HD; e += AF_WG) {
            const int r = e / AF_HD, in = r < nq;
            const long off = (long)(t0 + (in ? r : 0)) * AF_RS + e % AF_HD;
            qt[e] = in ? qb[off] : 0;
            gt[e] = in ? gb[off] : 0;
        }
        for (int r = lid; r < AF_BK; r += AF_WG) {
            const int in = r < nq;
            const long row = bn * T + t0 + (in ? r : 0);
            lt[r] = in ? lse[row] : 0;
            dt[r] = in ? delta[row] : 0;
            bt[r] = in ? bias[row] : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = 0; r < nq; r++) {
            __local const AF_REAL* qr = qt + r * AF_HD;
            __local const AF_REAL* gr = gt + r * AF_HD;
            AF_REAL d, dp;
            AF_DOT(d, qr, kv);     /* q . k in the forward's order */
            AF_DOT(dp, gr, vv);
            const int keep = (bits >> r) & 1;
            const AF_REAL p = keep ? AF_KN(af_prob)(d, scale, lt[r], bt[r]) : AF_KN(af_masked_prob)(lt[r], bt[r]);
            const AF_REAL ds = keep ? p * (dp - dt[r]) * scale : (AF_REAL)0;
            for (int h = 0; h < AF_HD; h++) {
                dva[h] = p * gr[h] + dva[h];
                dka[h] = ds * qr[h] + dka[h];
            }
        }
    }
    if (!live) return;
    for (int h = 0; h < AF_HD; h++) {
        dk[koff + h] = dka[h];
        dv[koff + h] = dva[h];
    }
}

#undef AF_KN
#undef AF_RS
#undef AF_NEG
#undef AF_BC
#undef AF_DOT
