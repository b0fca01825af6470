/* Flash-style scaled dot-product attention, forward and backward, never materializing the
 * T x S logits.
 *
 * Layouts (row-major, contiguous; NH = AT_NH heads, HD = AT_HD head dim): q, out, g, dq
 * (B, T, NH, HD); k, v, dk, dv (B, S, NH, HD); mask (B, NH, T, S) as bytes (nonzero = keep; it
 * already contains the causal mask); lse, delta (B, NH, T).  B is the product of the leading
 * batch axes.
 *
 * Semantics (those of functrace.nn._attention_impl / _attention_bwd_impl): logits are
 * (q . k) * scale, masked logits are -1e30; out = softmax(logits) v, lse = log-sum-exp of the
 * logits (a row whose keys are all masked averages v over all S keys, lse = log(S) - 1e30).
 * Backward from the saved lse: P = exp(logits - lse - bias) (masked pairs: exp(-1e30 - lse - bias),
 * 0 unless the row is NaN or fully masked), delta = rowsum(P * dP) (= rowsum(g * out) where all is
 * finite, which is used then: see at_delta), dV = P^T g,
 * dS = mask ? P * (g v^T - delta) * scale : 0 (a select: 0 * NaN would be NaN), dQ = dS k,
 * dK = dS^T q.  bias is 0 except in rows whose lse is -1e30 (no logit above -1e30: the forward
 * averaged the keys scoring -1e30), where lse = log(count) - 1e30 has rounded to -1e30 and
 * bias = log(count) restores P = 1 / count; the dQ kernel computes it (at_dead_bias) for the
 * dK/dV kernel.
 *
 * Vectorization (PoCL does not vectorize scalar kernels well): a work-item owns W = AT_W rows as
 * the W lanes of a vector -- W query rows in the forward and dQ kernels, W keys in the dK/dV
 * kernel -- and streams over the other side in tiles of 16, one row per scalar broadcast, so
 * the inner loops are W-wide vector a*b+c (no fma(): slow on PoCL) on register accumulators
 * (the 16-wide tile loops are unrolled).  The mask tile of every (W x 16) block is read first:
 * fully masked tiles are skipped (the causal upper triangle, or any block-sparse mask), fully
 * kept tiles need no per-element select.  A masked pair's weight is an exact 0, and 0 * inf or
 * 0 * NaN is NaN in the reference (and in JAX), so a fully masked tile is skipped only when the
 * rows its zeros would multiply are finite (v in the forward, k for dQ, q and g for dK/dV);
 * otherwise it is computed like any other tile.
 *
 * Specialized by the lowering (functrace/backends/opencl/attention.py), which defines before
 * this file and #undefs after it:
 *     AT_REAL   float | double            AT_ITYPE  int | long (same width as AT_REAL, for select)
 *     AT_W      lanes (16 / 8 / 4)        AT_HD     head dim          AT_NH   number of heads
 *     AT_SUF    kernel-name suffix, e.g. f32_h64_n4_w16 (one per specialization)
 */
#ifndef FT_CAT
#define FT_CAT_(a, b) a##b
#define FT_CAT(a, b) FT_CAT_(a, b)
#endif

#define AT_KN(name) FT_CAT(name, FT_CAT(_, AT_SUF))
#define AT_BK 16                                /* keys (forward, dQ) / queries (dK, dV) per tile */
#define AT_RS ((long)AT_NH * AT_HD)             /* stride between sequence positions */
#define AT_NEG ((AT_REAL)(-1e30))
#define AT_RW FT_CAT(AT_REAL, AT_W)             /* W-lane vector of AT_REAL */
#define AT_IW FT_CAT(AT_ITYPE, AT_W)            /* W-lane select mask */
#define AT_CW FT_CAT(char, AT_W)
#define AT_UW FT_CAT(uchar, AT_W)
#define AT_VLOADW FT_CAT(vload, AT_W)
#define AT_VSTOREW FT_CAT(vstore, AT_W)
#define AT_CONVERT_IW FT_CAT(convert_, AT_IW)
/* lanes whose mask byte is zero (as a select mask) */
#define AT_MASKED(bytes) (AT_CONVERT_IW(bytes) == (AT_IW)(0))

/* The running max as the exponent's shift: 0 while it is -inf (no key above -inf yet), so
 * exp(-inf - shift) = 0 rather than exp(-inf - -inf) = NaN. */
inline AT_RW AT_KN(at_shift)(const AT_RW m)
{
    return select(m, (AT_RW)(0), m == (AT_RW)(-INFINITY));
}

/* The lanes (query rows t0 ... t0+AT_W-1, past T the last row) whose mask drops key j. */
inline AT_IW AT_KN(at_key_masked)(__global const uchar* mb, const int t0, const int T, const int S, const int j)
{
    uchar mk[AT_W];
    for (int i = 0; i < AT_W; i++) mk[i] = mb[min(t0 + i, T - 1) * (long)S + j];
    return AT_MASKED(AT_VLOADW(0, mk));
}

/* Whether the AT_BK sequence rows from x (AT_HD values each) are all finite: a fully masked tile
 * may be skipped only then (its zero weights times an inf or NaN would be NaN). */
inline int AT_KN(at_tile_finite)(__global const AT_REAL* x)
{
    int finite = 1;
    for (int r = 0; r < AT_BK; r++)
        for (int h = 0; h < AT_HD; h++) finite &= isfinite(x[r * AT_RS + h]);
    return finite;
}

/* Key row kr's unscaled dot products with the AT_W query rows held transposed in qs. */
inline AT_RW AT_KN(at_key_dot)(const AT_REAL* qs, __global const AT_REAL* kr)
{
    AT_RW sv = (AT_RW)(0);
    for (int h = 0; h < AT_HD; h++) sv = AT_VLOADW(h, qs) * kr[h] + sv;
    return sv;
}

/* ------------------------------------------------------------------ forward
 * Work-item (tb, bn): query rows t0 = tb*AT_W ... t0+AT_W-1 of batch*head bn.  Online softmax over
 * key tiles: m (running max), l (running sum), acc[h] (running numerator), all per lane. */
__kernel void AT_KN(attention_fwd)(__global const AT_REAL* restrict q, __global const AT_REAL* restrict k,
                                   __global const AT_REAL* restrict v, __global const uchar* restrict mask,
                                   __global AT_REAL* restrict out, __global AT_REAL* restrict lse,
                                   const int T, const int S, const AT_REAL scale)
{
    const int t0 = get_global_id(0) * AT_W;
    const long bn = get_global_id(1);
    const long b = bn / AT_NH, n = bn % AT_NH;
    __global const AT_REAL* qb = q + (b * T * AT_NH + n) * AT_HD;
    __global const AT_REAL* kb = k + (b * S * AT_NH + n) * AT_HD;
    __global const AT_REAL* vb = v + (b * S * AT_NH + n) * AT_HD;
    __global const uchar* mb = mask + bn * T * (long)S;

    AT_REAL qs[AT_HD * AT_W];            /* the query block, transposed: qs[h*AT_W + i] = q[t0+i, h] */
    AT_RW acc[AT_HD];
    for (int i = 0; i < AT_W; i++) {
        const long row = min(t0 + i, T - 1);  /* lanes past T duplicate the last row */
        for (int h = 0; h < AT_HD; h++) qs[h * AT_W + i] = qb[row * AT_RS + h];
    }
    for (int h = 0; h < AT_HD; h++) acc[h] = (AT_RW)(0);
    AT_RW m = (AT_RW)(-INFINITY), l = (AT_RW)(0);

    int j0 = 0;
    for (; j0 + AT_BK <= S; j0 += AT_BK) {
        uchar16 mt[AT_W];          /* mask tile: row i = mask[t0+i, j0 ... j0+15] */
        char16 anyv = (char16)(0), allv = (char16)(-1);
        for (int i = 0; i < AT_W; i++) {
            const uchar16 r = vload16(0, mb + min(t0 + i, T - 1) * (long)S + j0);
            mt[i] = r;
            const char16 nz = r != (uchar16)(0);
            anyv |= nz;
            allv &= nz;
        }
        __global const AT_REAL* kt = kb + (long)j0 * AT_RS;
        __global const AT_REAL* vt = vb + (long)j0 * AT_RS;
        if (!any(anyv) && AT_KN(at_tile_finite)(vt)) continue;       /* fully masked tile */
        AT_RW s[AT_BK];
        #pragma unroll
        for (int j = 0; j < AT_BK; j++) s[j] = (AT_RW)(0);
        for (int h = 0; h < AT_HD; h++) {
            const AT_RW qh = AT_VLOADW(h, qs);
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) s[j] = qh * kt[j * AT_RS + h] + s[j];
        }
        if (all(allv)) {
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) s[j] = s[j] * scale;
        } else {
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) {
                uchar mk[AT_W];
                for (int i = 0; i < AT_W; i++) mk[i] = ((const uchar*)mt)[i * AT_BK + j];
                s[j] = select(s[j] * scale, (AT_RW)(AT_NEG), AT_MASKED(AT_VLOADW(0, mk)));
            }
        }
        AT_RW mx = s[0];
        #pragma unroll
        for (int j = 1; j < AT_BK; j++) mx = fmax(mx, s[j]);
        const AT_RW mnew = fmax(m, mx), ms = AT_KN(at_shift)(mnew);
        const AT_RW alpha = exp(m - ms);
        l = l * alpha;
        #pragma unroll
        for (int j = 0; j < AT_BK; j++) {
            s[j] = exp(s[j] - ms);
            l += s[j];
        }
        for (int h = 0; h < AT_HD; h++) {
            AT_RW a = acc[h] * alpha;
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) a = s[j] * vt[j * AT_RS + h] + a;
            acc[h] = a;
        }
        m = mnew;
    }
    for (int j = j0; j < S; j++) {                    /* the keys past the last full tile */
        __global const AT_REAL* kr = kb + (long)j * AT_RS;
        __global const AT_REAL* vr = vb + (long)j * AT_RS;
        const AT_RW sv = select(AT_KN(at_key_dot)(qs, kr) * scale, (AT_RW)(AT_NEG),
                                AT_KN(at_key_masked)(mb, t0, T, S, j));
        const AT_RW mnew = fmax(m, sv), ms = AT_KN(at_shift)(mnew);
        const AT_RW alpha = exp(m - ms);
        const AT_RW p = exp(sv - ms);
        l = l * alpha + p;
        for (int h = 0; h < AT_HD; h++) acc[h] = acc[h] * alpha + p * vr[h];
        m = mnew;
    }
    /* rows with no score above -1e30 and some masked key (fully masked tiles were skipped, so
     * their -1e30 scores are missing): as the reference, the row max is then -1e30, the masked
     * keys and scores of exactly -1e30 weigh 1 and lower scores (-inf) weigh 0.  Recomputed over
     * all S keys.  A row of NaN scores leaves l NaN: it stays NaN. */
    const AT_IW low = (m <= (AT_RW)(AT_NEG)) & (l == l);
    if (any(low)) {
        AT_RW a[AT_HD], cnt = (AT_RW)(0);
        AT_IW masked_any = (AT_IW)(0);
        for (int h = 0; h < AT_HD; h++) a[h] = (AT_RW)(0);
        for (int j = 0; j < S; j++) {
            __global const AT_REAL* kr = kb + (long)j * AT_RS;
            __global const AT_REAL* vr = vb + (long)j * AT_RS;
            const AT_RW sv = AT_KN(at_key_dot)(qs, kr);
            const AT_IW masked = AT_KN(at_key_masked)(mb, t0, T, S, j);
            masked_any |= masked;
            const AT_RW w = select((AT_RW)(0), (AT_RW)(1), masked | (sv * scale == (AT_RW)(AT_NEG)));
            cnt += w;
            for (int h = 0; h < AT_HD; h++) a[h] = w * vr[h] + a[h];
        }
        const AT_IW dead = low & masked_any;
        for (int h = 0; h < AT_HD; h++) acc[h] = select(acc[h], a[h], dead);
        l = select(l, cnt, dead);
        m = select(m, (AT_RW)(AT_NEG), dead);
    }
    /* l = 0: every score -inf and no key masked; the reference's exp(-inf - -inf) makes it NaN */
    l = select(l, (AT_RW)(NAN), l == (AT_RW)(0));
    const AT_RW inv = (AT_REAL)1 / l;
    AT_REAL ls[AT_W];
    AT_VSTOREW(m + log(l), 0, ls);
    for (int h = 0; h < AT_HD; h++) AT_VSTOREW(acc[h] * inv, h, qs);
    for (int i = 0; i < AT_W && t0 + i < T; i++) {
        __global AT_REAL* orow = out + ((b * T + t0 + i) * AT_NH + n) * AT_HD;
        for (int h = 0; h < AT_HD; h++) orow[h] = qs[h * AT_W + i];
        lse[bn * T + t0 + i] = ls[i];
    }
}

/* P = exp(logit - lse - bias) in the backward, the logit (q . k) * scale rounded before the
 * subtraction as the forward rounds it: FP_CONTRACT would otherwise fuse "dot * scale - lse" into
 * one fma, whose unrounded product differs from the forward's logit by up to half its ulp -- P
 * off by 3% at |logit| ~ 1e6 (exactly 1 becomes 0.97). */
inline AT_RW AT_KN(at_prob)(const AT_RW dot, const AT_REAL scale, const AT_RW lse, const AT_RW bias)
{
    #pragma OPENCL FP_CONTRACT OFF
    return exp(dot * scale - lse - bias);
}

/* at_prob where bias is 0 (no fully masked row among the lanes or the tile's rows: the common
 * case, one subtraction less per pair in the tile loops) */
inline AT_RW AT_KN(at_prob_live)(const AT_RW dot, const AT_REAL scale, const AT_RW lse)
{
    #pragma OPENCL FP_CONTRACT OFF
    return exp(dot * scale - lse);
}

/* P of a masked pair in rows with this lse and bias: 0, NaN in a NaN row, 1 / count in a dead row */
inline AT_REAL AT_KN(at_masked_prob)(const AT_REAL lse, const AT_REAL bias)
{
    return exp(AT_NEG - lse - bias);
}

/* bias (see the top) for the AT_W query rows in qs: log of the number of keys that are masked or
 * score exactly -1e30 in rows whose lse is at most -1e30 and that have such keys, else 0.  Costs a
 * pass over the keys only where such a row is among the lanes. */
inline AT_RW AT_KN(at_dead_bias)(const AT_REAL* qs, __global const AT_REAL* kb, __global const uchar* mb,
                                 const int t0, const int T, const int S, const AT_REAL scale, const AT_RW lse)
{
    const AT_IW low = lse <= (AT_RW)(AT_NEG);
    if (!any(low)) return (AT_RW)(0);
    AT_RW count = (AT_RW)(0);
    for (int j = 0; j < S; j++) {
        const AT_RW logit = AT_KN(at_key_dot)(qs, kb + (long)j * AT_RS) * scale;
        count += select((AT_RW)(0), (AT_RW)(1), AT_KN(at_key_masked)(mb, t0, T, S, j) | (logit == (AT_RW)(AT_NEG)));
    }
    return select((AT_RW)(0), log(count), low & (count > (AT_RW)(0)));
}

/* delta = sum_j P_j dP_j of the AT_W query rows (dP_j = g . v_j), over all S keys as the
 * reference's softmax backward sums it: where g, out or v hold an inf or NaN this differs from
 * the flash shortcut g . out (inf - inf is NaN in one, -inf in the other). */
inline AT_RW AT_KN(at_delta)(const AT_REAL* qs, const AT_REAL* gs, __global const AT_REAL* kb,
                             __global const AT_REAL* vb, __global const uchar* mb, const int t0, const int T,
                             const int S, const AT_REAL scale, const AT_RW lse, const AT_RW bias)
{
    const AT_RW masked_p = exp((AT_RW)(AT_NEG) - lse - bias);
    AT_RW acc = (AT_RW)(0);
    for (int j = 0; j < S; j++) {
        const AT_RW p = select(AT_KN(at_prob)(AT_KN(at_key_dot)(qs, kb + (long)j * AT_RS), scale, lse, bias), masked_p,
                               AT_KN(at_key_masked)(mb, t0, T, S, j));
        acc = p * AT_KN(at_key_dot)(gs, vb + (long)j * AT_RS) + acc;
    }
    return acc;
}

/* ------------------------------------------------------------------ backward: dQ (and delta)
 * Work-item (tb, bn): query rows t0 ... t0+AT_W-1 as lanes; streams over key tiles.
 * Also writes delta = rowsum(g * out), bias and the rows whose masked pairs weigh nothing (P = 0,
 * q and g finite) for the dK/dV kernel (enqueued after this one). */
__kernel void AT_KN(attention_bwd_dq)(__global const AT_REAL* restrict q, __global const AT_REAL* restrict k,
                                      __global const AT_REAL* restrict v, __global const uchar* restrict mask,
                                      __global const AT_REAL* restrict out, __global const AT_REAL* restrict lse,
                                      __global const AT_REAL* restrict g, __global AT_REAL* restrict dq,
                                      __global AT_REAL* restrict delta, __global AT_REAL* restrict bias,
                                      __global uchar* restrict weightless, const int T, const int S,
                                      const AT_REAL scale)
{
    const int t0 = get_global_id(0) * AT_W;
    const long bn = get_global_id(1);
    const long b = bn / AT_NH, n = bn % AT_NH;
    const long qoff = (b * T * AT_NH + n) * AT_HD;
    __global const AT_REAL* qb = q + qoff;
    __global const AT_REAL* gb = g + qoff;
    __global const AT_REAL* ob = out + qoff;
    __global const AT_REAL* kb = k + (b * S * AT_NH + n) * AT_HD;
    __global const AT_REAL* vb = v + (b * S * AT_NH + n) * AT_HD;
    __global const uchar* mb = mask + bn * T * (long)S;

    AT_REAL qs[AT_HD * AT_W], gs[AT_HD * AT_W], dl[AT_W], ls[AT_W];
    int finite[AT_W], exact = 1;  /* exact: g . out is the reference's sum_j P_j dP_j (all finite) */
    for (int i = 0; i < AT_W; i++) {
        const long row = min(t0 + i, T - 1);
        AT_REAL d = 0;
        finite[i] = 1;
        for (int h = 0; h < AT_HD; h++) {
            const AT_REAL gv = gb[row * AT_RS + h], qv = qb[row * AT_RS + h], ov = ob[row * AT_RS + h];
            qs[h * AT_W + i] = qv;
            gs[h * AT_W + i] = gv;
            d = gv * ov + d;
            finite[i] &= isfinite(gv) & isfinite(qv);
            exact &= isfinite(gv) & isfinite(ov);
        }
        dl[i] = d;
        ls[i] = lse[bn * T + row];
    }
    const AT_RW lv = AT_VLOADW(0, ls);
    const AT_RW bv = AT_KN(at_dead_bias)(qs, kb, mb, t0, T, S, scale, lv);
    for (int j = 0; j < S && exact; j++)
        for (int h = 0; h < AT_HD; h++) exact &= isfinite(vb[j * AT_RS + h]);
    const AT_RW dlt = exact ? AT_VLOADW(0, dl) : AT_KN(at_delta)(qs, gs, kb, vb, mb, t0, T, S, scale, lv, bv);
    AT_VSTOREW(dlt, 0, dl);
    for (int i = 0; i < AT_W && t0 + i < T; i++) delta[bn * T + t0 + i] = dl[i];
    const int dead_rows = any(bv != (AT_RW)(0));
    AT_VSTOREW(bv, 0, dl);
    for (int i = 0; i < AT_W && t0 + i < T; i++) {
        bias[bn * T + t0 + i] = dl[i];
        /* the dK/dV kernel may skip this row's masked pairs: their P is 0 and q, g are finite */
        weightless[bn * T + t0 + i] = finite[i] && AT_KN(at_masked_prob)(ls[i], dl[i]) == 0;
    }
    AT_RW dqa[AT_HD];
    for (int h = 0; h < AT_HD; h++) dqa[h] = (AT_RW)(0);

    int j0 = 0;
    for (; j0 + AT_BK <= S; j0 += AT_BK) {
        uchar16 mt[AT_W];
        char16 anyv = (char16)(0), allv = (char16)(-1);
        for (int i = 0; i < AT_W; i++) {
            const uchar16 r = vload16(0, mb + min(t0 + i, T - 1) * (long)S + j0);
            mt[i] = r;
            const char16 nz = r != (uchar16)(0);
            anyv |= nz;
            allv &= nz;
        }
        __global const AT_REAL* kt = kb + (long)j0 * AT_RS;
        __global const AT_REAL* vt = vb + (long)j0 * AT_RS;
        if (!any(anyv) && AT_KN(at_tile_finite)(kt)) continue;       /* dQ += 0 * k there */
        AT_RW p[AT_BK], ds[AT_BK];
        #pragma unroll
        for (int j = 0; j < AT_BK; j++) p[j] = (AT_RW)(0);
        for (int h = 0; h < AT_HD; h++) {
            const AT_RW qh = AT_VLOADW(h, qs);
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) p[j] = qh * kt[j * AT_RS + h] + p[j];
        }
        if (dead_rows) {
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) p[j] = AT_KN(at_prob)(p[j], scale, lv, bv);
        } else {
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) p[j] = AT_KN(at_prob_live)(p[j], scale, lv);
        }
        #pragma unroll
        for (int j = 0; j < AT_BK; j++) ds[j] = (AT_RW)(0);
        for (int h = 0; h < AT_HD; h++) {
            const AT_RW gh = AT_VLOADW(h, gs);
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) ds[j] = gh * vt[j * AT_RS + h] + ds[j];
        }
        #pragma unroll
        for (int j = 0; j < AT_BK; j++) ds[j] = p[j] * (ds[j] - dlt) * scale;
        if (!all(allv)) {       /* masked pairs: dS = 0 exactly, even where dP - delta is NaN */
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) {
                uchar mk[AT_W];
                for (int i = 0; i < AT_W; i++) mk[i] = ((const uchar*)mt)[i * AT_BK + j];
                ds[j] = select(ds[j], (AT_RW)(0), AT_MASKED(AT_VLOADW(0, mk)));
            }
        }
        for (int h = 0; h < AT_HD; h++) {
            AT_RW a = dqa[h];
            #pragma unroll
            for (int j = 0; j < AT_BK; j++) a = ds[j] * kt[j * AT_RS + h] + a;
            dqa[h] = a;
        }
    }
    for (int j = j0; j < S; j++) {
        __global const AT_REAL* kr = kb + (long)j * AT_RS;
        __global const AT_REAL* vr = vb + (long)j * AT_RS;
        AT_RW sv = (AT_RW)(0), dp = (AT_RW)(0);
        for (int h = 0; h < AT_HD; h++) {
            sv = AT_VLOADW(h, qs) * kr[h] + sv;
            dp = AT_VLOADW(h, gs) * vr[h] + dp;
        }
        const AT_RW d = select(AT_KN(at_prob)(sv, scale, lv, bv) * (dp - dlt) * scale, (AT_RW)(0),
                               AT_KN(at_key_masked)(mb, t0, T, S, j));
        for (int h = 0; h < AT_HD; h++) dqa[h] = d * kr[h] + dqa[h];
    }
    for (int h = 0; h < AT_HD; h++) AT_VSTOREW(dqa[h], h, qs);
    for (int i = 0; i < AT_W && t0 + i < T; i++) {
        __global AT_REAL* r = dq + qoff + (long)(t0 + i) * AT_RS;
        for (int h = 0; h < AT_HD; h++) r[h] = qs[h * AT_W + i];
    }
}

/* ------------------------------------------------------------------ backward: dK, dV
 * Work-item (sb, bn): keys s0 = sb*AT_W ... s0+AT_W-1 as lanes; streams over query tiles, using the
 * lse and the delta, bias and weightless rows written by the dQ kernel. */
__kernel void AT_KN(attention_bwd_dkdv)(__global const AT_REAL* restrict q, __global const AT_REAL* restrict k,
                                        __global const AT_REAL* restrict v, __global const uchar* restrict mask,
                                        __global const AT_REAL* restrict lse, __global const AT_REAL* restrict g,
                                        __global const AT_REAL* restrict delta, __global const AT_REAL* restrict bias,
                                        __global const uchar* restrict weightless, __global AT_REAL* restrict dk,
                                        __global AT_REAL* restrict dv, const int T, const int S, const AT_REAL scale)
{
    const int s0 = get_global_id(0) * AT_W;
    const long bn = get_global_id(1);
    const long b = bn / AT_NH, n = bn % AT_NH;
    const long koff = (b * S * AT_NH + n) * AT_HD;
    __global const AT_REAL* qb = q + (b * T * AT_NH + n) * AT_HD;
    __global const AT_REAL* gb = g + (b * T * AT_NH + n) * AT_HD;
    __global const AT_REAL* kb = k + koff;
    __global const AT_REAL* vb = v + koff;
    __global const uchar* mb = mask + bn * T * (long)S;
    __global const AT_REAL* lb = lse + bn * T;
    __global const AT_REAL* db = delta + bn * T;
    __global const AT_REAL* bb = bias + bn * T;
    __global const uchar* wb = weightless + bn * T;
    const int full_lanes = s0 + AT_W <= S;

    AT_REAL ks[AT_HD * AT_W], vs[AT_HD * AT_W];   /* ks[h*AT_W + i] = k[s0+i, h] */
    for (int i = 0; i < AT_W; i++) {
        const long key = min(s0 + i, S - 1);
        for (int h = 0; h < AT_HD; h++) {
            ks[h * AT_W + i] = kb[key * AT_RS + h];
            vs[h * AT_W + i] = vb[key * AT_RS + h];
        }
    }
    AT_RW dka[AT_HD], dva[AT_HD];
    for (int h = 0; h < AT_HD; h++) {
        dka[h] = (AT_RW)(0);
        dva[h] = (AT_RW)(0);
    }

    int t0 = 0;
    for (; t0 + AT_BK <= T; t0 += AT_BK) {
        AT_UW mt[AT_BK];        /* mt[r] = mask[t0+r, s0 ... s0+AT_W-1] (0 past S) */
        AT_CW anyv = (AT_CW)(0), allv = (AT_CW)(-1);
        #pragma unroll
        for (int r = 0; r < AT_BK; r++) {
            __global const uchar* mrow = mb + (long)(t0 + r) * S + s0;
            AT_UW mr;
            if (full_lanes) {
                mr = AT_VLOADW(0, mrow);
            } else {
                uchar tmp[AT_W];
                for (int i = 0; i < AT_W; i++) tmp[i] = s0 + i < S ? mrow[i] : 0;
                mr = AT_VLOADW(0, tmp);
            }
            mt[r] = mr;
            const AT_CW nz = mr != (AT_UW)(0);
            anyv |= nz;
            allv &= nz;
        }
        __global const AT_REAL* qt = qb + (long)t0 * AT_RS;
        __global const AT_REAL* gt = gb + (long)t0 * AT_RS;
        if (!any(anyv)) {  /* dK += 0 * q and dV += P g: nothing where every row's P is 0, q, g finite */
            uchar all_weightless = 1;
            for (int r = 0; r < AT_BK; r++) all_weightless &= wb[t0 + r];
            if (all_weightless) continue;
        }
        AT_RW p[AT_BK], ds[AT_BK];
        #pragma unroll
        for (int r = 0; r < AT_BK; r++) p[r] = (AT_RW)(0);
        for (int h = 0; h < AT_HD; h++) {
            const AT_RW kh = AT_VLOADW(h, ks);
            #pragma unroll
            for (int r = 0; r < AT_BK; r++) p[r] = kh * qt[r * AT_RS + h] + p[r];
        }
        int dead_rows = 0;
        for (int r = 0; r < AT_BK; r++) dead_rows |= bb[t0 + r] != 0;
        if (dead_rows) {
            #pragma unroll
            for (int r = 0; r < AT_BK; r++) p[r] = AT_KN(at_prob)(p[r], scale, (AT_RW)(lb[t0 + r]), (AT_RW)(bb[t0 + r]));
        } else {
            #pragma unroll
            for (int r = 0; r < AT_BK; r++) p[r] = AT_KN(at_prob_live)(p[r], scale, (AT_RW)(lb[t0 + r]));
        }
        #pragma unroll
        for (int r = 0; r < AT_BK; r++) ds[r] = (AT_RW)(0);
        for (int h = 0; h < AT_HD; h++) {
            const AT_RW vh = AT_VLOADW(h, vs);
            #pragma unroll
            for (int r = 0; r < AT_BK; r++) ds[r] = vh * gt[r * AT_RS + h] + ds[r];
        }
        #pragma unroll
        for (int r = 0; r < AT_BK; r++) ds[r] = p[r] * (ds[r] - db[t0 + r]) * scale;
        if (!all(allv)) {       /* masked pairs: P as above and dS = 0 exactly (dP - delta may be NaN) */
            #pragma unroll
            for (int r = 0; r < AT_BK; r++) {
                const AT_IW m = AT_MASKED(mt[r]);
                p[r] = select(p[r], (AT_RW)(AT_KN(at_masked_prob)(lb[t0 + r], bb[t0 + r])), m);
                ds[r] = select(ds[r], (AT_RW)(0), m);
            }
        }
        for (int h = 0; h < AT_HD; h++) {
            AT_RW a = dva[h];
            #pragma unroll
            for (int r = 0; r < AT_BK; r++) a = p[r] * gt[r * AT_RS + h] + a;
            dva[h] = a;
        }
        for (int h = 0; h < AT_HD; h++) {
            AT_RW a = dka[h];
            #pragma unroll
            for (int r = 0; r < AT_BK; r++) a = ds[r] * qt[r * AT_RS + h] + a;
            dka[h] = a;
        }
    }
    for (int t = t0; t < T; t++) {                    /* the queries past the last full tile */
        __global const AT_REAL* qr = qb + (long)t * AT_RS;
        __global const AT_REAL* gr = gb + (long)t * AT_RS;
        __global const uchar* mrow = mb + (long)t * S + s0;
        uchar tmp[AT_W];
        for (int i = 0; i < AT_W; i++) tmp[i] = s0 + i < S ? mrow[i] : 0;
        AT_RW sv = (AT_RW)(0), dp = (AT_RW)(0);
        for (int h = 0; h < AT_HD; h++) {
            sv = AT_VLOADW(h, ks) * qr[h] + sv;
            dp = AT_VLOADW(h, vs) * gr[h] + dp;
        }
        const AT_IW m = AT_MASKED(AT_VLOADW(0, tmp));
        const AT_RW p = select(AT_KN(at_prob)(sv, scale, (AT_RW)(lb[t]), (AT_RW)(bb[t])),
                               (AT_RW)(AT_KN(at_masked_prob)(lb[t], bb[t])), m);
        const AT_RW d = select(p * (dp - db[t]) * scale, (AT_RW)(0), m);
        for (int h = 0; h < AT_HD; h++) {
            dva[h] = p * gr[h] + dva[h];
            dka[h] = d * qr[h] + dka[h];
        }
    }
    for (int h = 0; h < AT_HD; h++) {
        AT_VSTOREW(dka[h], h, ks);
        AT_VSTOREW(dva[h], h, vs);
    }
    for (int i = 0; i < AT_W && s0 + i < S; i++) {
        __global AT_REAL* kr = dk + koff + (long)(s0 + i) * AT_RS;
        __global AT_REAL* vr = dv + koff + (long)(s0 + i) * AT_RS;
        for (int h = 0; h < AT_HD; h++) {
            kr[h] = ks[h * AT_W + i];
            vr[h] = vs[h * AT_W + i];
        }
    }
}

#undef AT_KN
#undef AT_BK
#undef AT_RS
#undef AT_NEG
#undef AT_RW
#undef AT_IW
#undef AT_CW
#undef AT_UW
#undef AT_VLOADW
#undef AT_VSTOREW
#undef AT_CONVERT_IW
#undef AT_MASKED
