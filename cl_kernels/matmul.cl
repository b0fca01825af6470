/* matmul.cl - batched C = op(A) . op(B) (+ bias along N, then activation) for float / double.
 *
 * Layout: row-major, contiguous.  op(A) is M x K, stored either as A[M][K] (ta = 0) or as the
 * transpose A[K][M] (ta = 1); op(B) is K x N, stored as B[K][N] (tb = 0) or B[N][K] (tb = 1).
 * So AB, A^T B, A B^T and A^T B^T (what backward passes need) run without materializing a
 * transpose.  Batches are consecutive matrices (batch strides as arguments, 3rd grid dim).
 *
 * Scheme (BLIS-like, tuned for PoCL's pthread CPU device):
 *   1. matmul_pack_a_*: op(A) -> Ap[batch][M/TM][K][TM]   (TM = 8 rows, zero-padded)
 *      matmul_pack_b_*: op(B) -> Bp[batch][N/TN][K][TN]   (TN = 2 vectors: 32 floats / 16 doubles)
 *      The transposes, the edge padding and every irregular stride are handled here, once,
 *      at memory speed; the compute kernel sees only contiguous, aligned, padded panels.
 *      A narrow row-major B whose width is whole panels is not packed: the compute kernel reads
 *      its panels in place (panel rows ldb = N apart instead of TN; matmul.py decides).  Nor is
 *      an A whose rows are whole micro-tiles: the kernel's scalar reads of A cost the same from
 *      A itself (element (i, k) of a tile at ai * i + ak * k, panels a_panel apart).
 *   2. matmul_*: one work-item (work-group size 1: PoCL runs work-groups on its threads, and a
 *      single work-item with explicit vector types compiles to straight AVX/AVX-512 code)
 *      computes a block of C of mcb x ncb micro-tiles.  Its loops are
 *          for each K chunk of kc (matmul.py):   (Bp micro-panel kc x TN in L1 or L2,
 *            for each TN-column panel:            Ap block (mcb*TM) x kc stays in L2)
 *              for each TM-row micro-tile:
 *                 acc[TM][2] (16 vector registers) = C tile (or 0 on the first chunk)
 *                 for k: acc[i][j] += Ap[i] * Bp[j-vector]     (a*b + c: fma() is slow on PoCL)
 *                 store the tile; on the last chunk, bias + activation on the stored tile
 *      Tiles that cross the M or N edge load/store through a bounds-checked scalar path.
 *   3. matmul_mv_rows_* / matmul_mv_cols_*: matrix-vector products (M == 1 or N == 1), which
 *      would waste most of a packed micro-tile; vectorized along the contiguous axis.
 *
 * This file is included once per variant.  matmul.py defines before it:
 *   MM_REAL  float | double         MM_VW  vector width (16 | 8)     MM_SFX  f32 | f64
 *   MM_NAME  compute kernel name    MM_BIAS 0 | 1                    MM_ACT  0 none | 1 relu | 2 tanh
 *   MM_WITH_MV 0 | 1 (emit the matrix-vector kernels)
 * and the file #undefs them at its end.  The packing and matrix-vector kernels are emitted once
 * per dtype (guarded), the compute kernel once per (dtype, epilogue) variant, so several variants
 * can share a program.
 */

#define MM_PASTE_(a, b) a##b
#define MM_PASTE(a, b) MM_PASTE_(a, b)
#define MM_NAME3_(a, b) a##_##b
#define MM_NAME3(a, b) MM_NAME3_(a, b)

#ifndef MM_WITH_MV
#define MM_WITH_MV 1
#endif

/* a prefetch hint for the line holding *p: the cpu kind's prefix defines it as OpenCL C's prefetch
 * (PoCL's does nothing; a driver that implements it fetches the line); the gpu kind has none */
#ifndef MM_PREFETCH
#  define MM_PREFETCH(p) ((void)0)
#endif

#define MM_TM 8                                   /* fixed: MM_KSTEP below spells out 8 rows */
#define MM_TN (2 * MM_VW)
#define MM_PKW 64                                 /* k rows per packing work-item */
#define MM_VEC MM_PASTE(MM_REAL, MM_VW)           /* float16 / double8 */
#define MM_VEC8 MM_PASTE(MM_REAL, 8)
#define MM_VLOAD MM_PASTE(vload, MM_VW)
#define MM_VSTORE MM_PASTE(vstore, MM_VW)
#define MM_ZERO ((MM_REAL)0)

#if MM_VW == 8
#  ifndef MM_HELPERS_F64
#    define MM_HELPERS_F64
#    define MM_EMIT_HELPERS 1
#  endif
#else
#  ifndef MM_HELPERS_F32
#    define MM_HELPERS_F32
#    define MM_EMIT_HELPERS 1
#  endif
#endif

#ifdef MM_EMIT_HELPERS
/* dst[kk * ld + i] = src[i * lds + k + kk] for i, kk < 8: an 8x8 block transposed in registers in
 * three stages of two-input shuffles (pairs, then pairs of pairs, then halves: 24 shuffles); building
 * each column from all 8 rows at once compiled to element inserts, 2.6x slower than a copy */
#define MM_LO2(x, y) (MM_VEC8)(x.s0, y.s0, x.s1, y.s1, x.s4, y.s4, x.s5, y.s5)
#define MM_HI2(x, y) (MM_VEC8)(x.s2, y.s2, x.s3, y.s3, x.s6, y.s6, x.s7, y.s7)
#define MM_LO4(x, y) (MM_VEC8)(x.s0, x.s1, y.s0, y.s1, x.s4, x.s5, y.s4, y.s5)
#define MM_HI4(x, y) (MM_VEC8)(x.s2, x.s3, y.s2, y.s3, x.s6, x.s7, y.s6, y.s7)
#define MM_LO8(x, y) (MM_VEC8)(x.s0123, y.s0123)
#define MM_HI8(x, y) (MM_VEC8)(x.s4567, y.s4567)
#define MM_TRANSPOSE8(src, lds, k, dst, ld) do {                                               \
        const __global MM_REAL* s_ = (src) + (k);                                              \
        const MM_VEC8 r0 = vload8(0, s_), r1 = vload8(0, s_ + (lds)),                           \
            r2 = vload8(0, s_ + 2 * (long)(lds)), r3 = vload8(0, s_ + 3 * (long)(lds)),          \
            r4 = vload8(0, s_ + 4 * (long)(lds)), r5 = vload8(0, s_ + 5 * (long)(lds)),          \
            r6 = vload8(0, s_ + 6 * (long)(lds)), r7 = vload8(0, s_ + 7 * (long)(lds));          \
        const MM_VEC8 t0 = MM_LO2(r0, r1), t1 = MM_HI2(r0, r1), t2 = MM_LO2(r2, r3),             \
            t3 = MM_HI2(r2, r3), t4 = MM_LO2(r4, r5), t5 = MM_HI2(r4, r5), t6 = MM_LO2(r6, r7),  \
            t7 = MM_HI2(r6, r7);                                                               \
        const MM_VEC8 u0 = MM_LO4(t0, t2), u1 = MM_HI4(t0, t2), u2 = MM_LO4(t1, t3),             \
            u3 = MM_HI4(t1, t3), u4 = MM_LO4(t4, t6), u5 = MM_HI4(t4, t6), u6 = MM_LO4(t5, t7),  \
            u7 = MM_HI4(t5, t7);                                                               \
        __global MM_REAL* d_ = (dst);                                                          \
        vstore8(MM_LO8(u0, u4), 0, d_);                                                        \
        vstore8(MM_LO8(u1, u5), 0, d_ + (ld));                                                 \
        vstore8(MM_LO8(u2, u6), 0, d_ + 2 * (ld));                                             \
        vstore8(MM_LO8(u3, u7), 0, d_ + 3 * (ld));                                             \
        vstore8(MM_HI8(u0, u4), 0, d_ + 4 * (ld));                                             \
        vstore8(MM_HI8(u1, u5), 0, d_ + 5 * (ld));                                             \
        vstore8(MM_HI8(u2, u6), 0, d_ + 6 * (ld));                                             \
        vstore8(MM_HI8(u3, u7), 0, d_ + 7 * (ld));                                             \
    } while (0)

/* Ap[b][mb][k][TM] = op(A)[b][mb*TM + i][k]; rows past M are zero.
 * Grid (ceil(K/PKW), ceil(M/TM), batch): a work-item packs PKW k-rows of one panel. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void MM_NAME3(matmul_pack_a, MM_SFX)(__global const MM_REAL* restrict A, __global MM_REAL* restrict Ap,
                                      const int M, const int K, const int ta, const long sA, const long sAp)
{
    const int kbeg = get_global_id(0) * MM_PKW;
    const int kend = min(kbeg + MM_PKW, K);
    const int m0 = get_global_id(1) * MM_TM;
    const bool full = m0 + MM_TM <= M;
    A += get_global_id(2) * sA;
    __global MM_REAL* dst = Ap + get_global_id(2) * sAp + (long)m0 * K;   /* panel mb: mb*TM*K */
    int k = kbeg;
    if (ta) {                                     /* A[K][M]: the panel's rows are contiguous */
        if (full)
            for (; k < kend; k++) vstore8(vload8(0, A + (long)k * M + m0), k, dst);
    } else if (full) {                            /* A[M][K]: 8x8 transposes in registers */
        const __global MM_REAL* src = A + (long)m0 * K;
        for (; k + 8 <= kend; k += 8) {
            MM_TRANSPOSE8(src, K, k, dst + (long)k * MM_TM, MM_TM);
        }
    }
    for (; k < kend; k++)                         /* edges */
        for (int i = 0; i < MM_TM; i++)
            dst[(long)k * MM_TM + i] = m0 + i >= M ? MM_ZERO : ta ? A[(long)k * M + m0 + i] : A[(long)(m0 + i) * K + k];
}

/* Bp[b][nb][k][TN] = op(B)[b][k][nb*TN + j]; columns past N are zero.
 * Grid (ceil(K/PKW), ceil(N/TN), batch). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void MM_NAME3(matmul_pack_b, MM_SFX)(__global const MM_REAL* restrict B, __global MM_REAL* restrict Bp,
                                      const int N, const int K, const int tb, const long sB, const long sBp)
{
    const int kbeg = get_global_id(0) * MM_PKW;
    const int kend = min(kbeg + MM_PKW, K);
    const int n0 = get_global_id(1) * MM_TN;
    const bool full = n0 + MM_TN <= N;
    B += get_global_id(2) * sB;
    __global MM_REAL* dst = Bp + get_global_id(2) * sBp + (long)n0 * K;   /* panel nb: nb*TN*K */
    int k = kbeg;
    if (!tb) {                                    /* B[K][N]: the panel's rows are contiguous */
        if (full)
            for (; k < kend; k++) {
                const __global MM_REAL* src = B + (long)k * N + n0;
                MM_VSTORE(MM_VLOAD(0, src), 0, dst + (long)k * MM_TN);
                MM_VSTORE(MM_VLOAD(1, src), 1, dst + (long)k * MM_TN);
            }
    } else if (full) {                            /* B[N][K]: 8x8 transposes in registers */
        /* 8 rows at a time: all TN rows at once map to too few L1 sets when K is a power of two */
        const int kfull = kbeg + (kend - kbeg) / 8 * 8;
        const int knext = min(kend + MM_PKW, K);  /* the next work-item's part of these rows */
        for (int j = 0; j < MM_TN; j++)
            for (int c = kend; c < knext; c += MM_VW)
                MM_PREFETCH(B + (long)(n0 + j) * K + c);
        for (int g = 0; g < MM_TN; g += 8)
            for (k = kbeg; k < kfull; k += 8)
                MM_TRANSPOSE8(B + (long)(n0 + g) * K, K, k, dst + (long)k * MM_TN + g, MM_TN);
        k = kfull;
    }
    for (; k < kend; k++)                         /* edges */
        for (int j = 0; j < MM_TN; j++)
            dst[(long)k * MM_TN + j] = n0 + j >= N ? MM_ZERO : tb ? B[(long)(n0 + j) * K + k] : B[(long)k * N + n0 + j];
}

#undef MM_LO2
#undef MM_HI2
#undef MM_LO4
#undef MM_HI4
#undef MM_LO8
#undef MM_HI8
#undef MM_TRANSPOSE8
#undef MM_EMIT_HELPERS
#endif /* MM_EMIT_HELPERS */

#if MM_WITH_MV && MM_VW == 8
#  ifndef MM_MV_F64
#    define MM_MV_F64
#    define MM_EMIT_MV 1
#  endif
#elif MM_WITH_MV
#  ifndef MM_MV_F32
#    define MM_MV_F32
#    define MM_EMIT_MV 1
#  endif
#endif

#ifdef MM_EMIT_MV
/* y[b][m] = sum_k A[b][m][k] * x[b][k]  (rows contiguous along k).  Grid (ceil(M/4), batch). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void MM_NAME3(matmul_mv_rows, MM_SFX)(__global const MM_REAL* restrict A, __global const MM_REAL* restrict x,
                                       __global MM_REAL* restrict y, const int M, const int K,
                                       const long sA, const long sx, const long sy)
{
    const int m0 = get_global_id(0) * 4;
    const long b = get_global_id(1);
    A += b * sA + (long)m0 * K;
    x += b * sx;
    y += b * sy + m0;
    const int rows = min(4, M - m0);
    const int kv = K - K % MM_VW;
    if (rows == 4) {
        MM_VEC s0 = (MM_VEC)MM_ZERO, s1 = s0, s2 = s0, s3 = s0;
        for (int k = 0; k < kv; k += MM_VW) {
            const MM_VEC xv = MM_VLOAD(0, x + k);
            s0 = MM_VLOAD(0, A + k) * xv + s0;
            s1 = MM_VLOAD(0, A + K + k) * xv + s1;
            s2 = MM_VLOAD(0, A + 2 * (long)K + k) * xv + s2;
            s3 = MM_VLOAD(0, A + 3 * (long)K + k) * xv + s3;
        }
        MM_REAL r[4];
        r[0] = MM_ZERO; r[1] = MM_ZERO; r[2] = MM_ZERO; r[3] = MM_ZERO;
        #pragma unroll
        for (int l = 0; l < MM_VW; l++) { r[0] += s0[l]; r[1] += s1[l]; r[2] += s2[l]; r[3] += s3[l]; }
        for (int k = kv; k < K; k++) {
            const MM_REAL xk = x[k];
            r[0] += A[k] * xk; r[1] += A[K + k] * xk; r[2] += A[2 * (long)K + k] * xk; r[3] += A[3 * (long)K + k] * xk;
        }
        y[0] = r[0]; y[1] = r[1]; y[2] = r[2]; y[3] = r[3];
    } else {
        for (int i = 0; i < rows; i++) {
            const __global MM_REAL* a = A + (long)i * K;
            MM_VEC s = (MM_VEC)MM_ZERO;
            for (int k = 0; k < kv; k += MM_VW)
                s = MM_VLOAD(0, a + k) * MM_VLOAD(0, x + k) + s;
            MM_REAL r = MM_ZERO;
            for (int l = 0; l < MM_VW; l++) r += s[l];
            for (int k = kv; k < K; k++) r += a[k] * x[k];
            y[i] = r;
        }
    }
}

/* y[b][n] = sum_k x[b][k] * B[b][k][n]  (rows contiguous along n).  Grid (ceil(N/TN), batch). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void MM_NAME3(matmul_mv_cols, MM_SFX)(__global const MM_REAL* restrict B, __global const MM_REAL* restrict x,
                                       __global MM_REAL* restrict y, const int N, const int K,
                                       const long sB, const long sx, const long sy)
{
    const int n0 = get_global_id(0) * MM_TN;
    const long b = get_global_id(1);
    B += b * sB + n0;
    x += b * sx;
    y += b * sy + n0;
    if (n0 + MM_TN <= N) {
        MM_VEC s0 = (MM_VEC)MM_ZERO, s1 = s0, t0 = s0, t1 = s0;
        int k = 0;
        for (; k + 1 < K; k += 2) {
            const MM_REAL x0 = x[k], x1 = x[k + 1];
            const __global MM_REAL* r0 = B + (long)k * N;
            s0 = x0 * MM_VLOAD(0, r0) + s0;
            s1 = x0 * MM_VLOAD(1, r0) + s1;
            t0 = x1 * MM_VLOAD(0, r0 + N) + t0;
            t1 = x1 * MM_VLOAD(1, r0 + N) + t1;
        }
        if (k < K) {
            const MM_REAL x0 = x[k];
            s0 = x0 * MM_VLOAD(0, B + (long)k * N) + s0;
            s1 = x0 * MM_VLOAD(1, B + (long)k * N) + s1;
        }
        MM_VSTORE(s0 + t0, 0, y);
        MM_VSTORE(s1 + t1, 1, y);
    } else {
        const int cols = N - n0;
        for (int j = 0; j < cols; j++) {
            MM_REAL r = MM_ZERO;
            for (int k = 0; k < K; k++) r += x[k] * B[(long)k * N + j];
            y[j] = r;
        }
    }
}
#undef MM_EMIT_MV
#endif /* MM_EMIT_MV */

#if MM_ACT == 1                                   /* max(v, 0) keeping NaN, as numpy (fmax drops it) */
#  define MM_EPI(v) select((v), (MM_VEC)MM_ZERO, (v) < (MM_VEC)MM_ZERO)
#  define MM_EPI1(v) ((v) < MM_ZERO ? MM_ZERO : (v))
#elif MM_ACT == 2                                 /* MM_TANH: defined by matmul.py */
#  define MM_EPI(v) MM_TANH(v)
#  define MM_EPI1(v) MM_TANH1(v)
#else
#  define MM_EPI(v) (v)
#  define MM_EPI1(v) (v)
#endif

/* one k step of the micro-kernel: 2 vector loads of Bp, 8 broadcasts of Ap, 16 multiply-adds */
#define MM_FMA_ROW(i, off) {                                                                   \
        const MM_REAL av = a[(off) * ak + (i) * ai];                                           \
        c0[i] = av * b0 + c0[i];                                                               \
        c1[i] = av * b1 + c1[i];                                                               \
    }
#define MM_KSTEP(off) {                                                                        \
        const MM_VEC b0 = MM_VLOAD(0, bp + (off) * ldb), b1 = MM_VLOAD(1, bp + (off) * ldb);   \
        MM_FMA_ROW(0, off) MM_FMA_ROW(1, off) MM_FMA_ROW(2, off) MM_FMA_ROW(3, off)            \
        MM_FMA_ROW(4, off) MM_FMA_ROW(5, off) MM_FMA_ROW(6, off) MM_FMA_ROW(7, off)            \
    }

/* The last tile of each Bp panel asks for the next panel's rows while it computes: a training step
 * leaves B in L3, and its first touch (rows ldb apart) stalled the first tile of every panel
 * (measured in an MLP step on Zen 4 with clang's prefetch builtin, which PoCL's prefetch is not:
 * 128x784x512 1.05 -> 1.02 ms, 128x512x512 0.70 -> 0.685 ms; within the noise on a loaded Zen 3). */
#define MM_PREFETCH_B(off) MM_PREFETCH(bp + panel_stride + (off) * ldb); \
                           MM_PREFETCH(bp + panel_stride + (off) * ldb + MM_VW);

/* C[b] (M x N) = epilogue(Ap[b] . Bp[b]).  Grid (ceil(M/(TM*mcb)), ceil(N/(TN*ncb)), batch); each
 * work-item computes mcb x ncb micro-tiles of TM x TN, in K chunks of kc (see the top of the file).
 * bias (length N) is read only when MM_BIAS. */
#define MM_PARAMS __global const MM_REAL* restrict Ap, __global const MM_REAL* restrict Bp,             \
                  __global MM_REAL* restrict C, __global const MM_REAL* restrict bias,                   \
                  const int M, const int N, const int K, const int mcb, const int ncb, const int kc,     \
                  const long sAp, const long sBp, const long sC, const int ldb, const long panel_stride, \
                  const long a_panel
#define MM_ARGS Ap, Bp, C, bias, M, N, K, mcb, ncb, kc, sAp, sBp, sC, ldb, panel_stride, a_panel
inline void MM_PASTE(MM_NAME, _body)(MM_PARAMS, const int ai, const int ak)
{
    const long b = get_global_id(2);
    Ap += b * sAp;
    Bp += b * sBp;
    C += b * sC;
    const int mb_begin = get_global_id(0) * mcb;
    const int mb_end = min(mb_begin + mcb, (M + MM_TM - 1) / MM_TM);
    const int nb_begin = get_global_id(1) * ncb;
    const int nb_end = min(nb_begin + ncb, (N + MM_TN - 1) / MM_TN);
    for (int pc = 0; pc < K; pc += kc) {
        const int kn = min(kc, K - pc);
        const bool first = pc == 0, last = pc + kn >= K;
        for (int nb = nb_begin; nb < nb_end; nb++) {
            const int n0 = nb * MM_TN;
            const __global MM_REAL* bpanel = Bp + (long)nb * panel_stride + (long)pc * ldb;
            for (int mb = mb_begin; mb < mb_end; mb++) {
                const int m0 = mb * MM_TM;
                const bool full = m0 + MM_TM <= M && n0 + MM_TN <= N;
                __global MM_REAL* cp = C + (long)m0 * N + n0;
                MM_VEC c0[MM_TM], c1[MM_TM];
                if (first) {
                    #pragma unroll
                    for (int i = 0; i < MM_TM; i++) { c0[i] = (MM_VEC)MM_ZERO; c1[i] = (MM_VEC)MM_ZERO; }
                } else if (full) {
                    #pragma unroll
                    for (int i = 0; i < MM_TM; i++) {
                        c0[i] = MM_VLOAD(0, cp + (long)i * N);
                        c1[i] = MM_VLOAD(1, cp + (long)i * N);
                    }
                } else {
                    for (int i = 0; i < MM_TM; i++) {
                        MM_REAL t[MM_TN];
                        for (int j = 0; j < MM_TN; j++)
                            t[j] = (m0 + i < M && n0 + j < N) ? cp[(long)i * N + j] : MM_ZERO;
                        c0[i] = MM_VLOAD(0, t);
                        c1[i] = MM_VLOAD(1, t);
                    }
                }
                /* C's lines are asked for while the tile computes: written cold at the end, a
                 * K = 128 product (A^T B of a backward pass) stalled on C's misses, 1.2x slower
                 * than OpenBLAS in a training step on Zen 4 (with clang's write prefetch) */
                if (first && full) {
                    #pragma unroll
                    for (int i = 0; i < MM_TM; i++) {
                        MM_PREFETCH(cp + (long)i * N);
                        MM_PREFETCH(cp + (long)i * N + MM_VW);
                    }
                }
                const __global MM_REAL* a = Ap + (long)mb * a_panel + (long)pc * ak;
                const __global MM_REAL* bp = bpanel;
                int k = 0;
                if (mb == mb_end - 1 && nb + 1 < nb_end) {  /* the panel's last tile: fetch the next panel */
                    for (; k + 4 <= kn; k += 4) {
                        MM_PREFETCH_B(0) MM_PREFETCH_B(1) MM_PREFETCH_B(2) MM_PREFETCH_B(3)
                        MM_KSTEP(0) MM_KSTEP(1) MM_KSTEP(2) MM_KSTEP(3)
                        a += 4 * ak;
                        bp += 4 * ldb;
                    }
                }
                for (; k + 4 <= kn; k += 4) {   /* unrolled by hand: PoCL ignores unroll pragmas here */
                    MM_KSTEP(0) MM_KSTEP(1) MM_KSTEP(2) MM_KSTEP(3)
                    a += 4 * ak;
                    bp += 4 * ldb;
                }
                for (; k < kn; k++) {
                    MM_KSTEP(0)
                    a += ak;
                    bp += ldb;
                }
                if (full) {
                    #pragma unroll
                    for (int i = 0; i < MM_TM; i++) {
                        MM_VSTORE(c0[i], 0, cp + (long)i * N);
                        MM_VSTORE(c1[i], 1, cp + (long)i * N);
                    }
                } else {
                    for (int i = 0; i < MM_TM; i++) {
                        if (m0 + i >= M) break;
                        MM_REAL t[MM_TN];
                        MM_VSTORE(c0[i], 0, t);
                        MM_VSTORE(c1[i], 1, t);
                        for (int j = 0; j < MM_TN && n0 + j < N; j++) cp[(long)i * N + j] = t[j];
                    }
                }
#if MM_BIAS || MM_ACT
                /* epilogue on the tile just stored (in L1): a loop, not the unrolled registers,
                 * keeps the code (and PoCL's compile time) small */
                if (last) {
                    const int rows = min(MM_TM, M - m0), cols = min(MM_TN, N - n0);
                    if (cols == MM_TN) {
  #if MM_BIAS
                        const MM_VEC bias0 = MM_VLOAD(0, bias + n0), bias1 = MM_VLOAD(1, bias + n0);
  #endif
                        for (int i = 0; i < rows; i++) {
                            __global MM_REAL* row = cp + (long)i * N;
                            MM_VEC v0 = MM_VLOAD(0, row), v1 = MM_VLOAD(1, row);
  #if MM_BIAS
                            v0 += bias0;
                            v1 += bias1;
  #endif
                            MM_VSTORE(MM_EPI(v0), 0, row);
                            MM_VSTORE(MM_EPI(v1), 1, row);
                        }
                    } else {
                        for (int i = 0; i < rows; i++)
                            for (int j = 0; j < cols; j++) {
                                MM_REAL v = cp[(long)i * N + j];
  #if MM_BIAS
                                v += bias[n0 + j];
  #endif
                                cp[(long)i * N + j] = MM_EPI1(v);
                            }
                    }
                }
#endif
            }
        }
    }
}

/* The compute kernel for each layout of A: the element strides of A inlined as constants (a
 * runtime stride made the compiler keep 32 row addresses on the stack: 15% slower). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void MM_NAME(MM_PARAMS) { MM_PASTE(MM_NAME, _body)(MM_ARGS, 1, MM_TM); }           /* packed Ap */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void MM_PASTE(MM_NAME, _arows)(MM_PARAMS) { MM_PASTE(MM_NAME, _body)(MM_ARGS, K, 1); }  /* A[M][K] */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void MM_PASTE(MM_NAME, _acols)(MM_PARAMS) { MM_PASTE(MM_NAME, _body)(MM_ARGS, 1, M); }  /* A[K][M] */

#undef MM_PARAMS
#undef MM_ARGS
#undef MM_EPI
#undef MM_EPI1
#undef MM_TANH
#undef MM_TANH1
#undef MM_FMA_ROW
#undef MM_KSTEP
#undef MM_PREFETCH_B                                /* MM_PREFETCH stays: defined once, guarded */
#undef MM_PASTE_
#undef MM_PASTE
#undef MM_NAME3_
#undef MM_NAME3
#undef MM_TM
#undef MM_TN
#undef MM_PKW
#undef MM_VEC
#undef MM_VEC8
#undef MM_VLOAD
#undef MM_VSTORE
#undef MM_ZERO
#undef MM_REAL
#undef MM_VW
#undef MM_SFX
#undef MM_NAME
#undef MM_BIAS
#undef MM_ACT
#undef MM_WITH_MV
