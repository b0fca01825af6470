/* matmul_tiled.cl - batched C = op(A) . op(B) (+ bias along N, then activation) for GPUs.
 *
 * Layout and operands as matmul.cl: row-major, contiguous; op(A) is M x K, stored A[M][K] (ta = 0)
 * or A[K][M] (ta = 1); op(B) is K x N, stored B[K][N] (tb = 0) or B[N][K] (tb = 1); batches are
 * consecutive matrices (batch strides as arguments, 3rd grid dimension).
 *
 * Scheme (the classic GPU GEMM: tiles in local memory, a register block per work-item):
 *   a work-group computes one MT_TSM x MT_TSN tile of C with (MT_TSN / MT_WPTN) x (MT_TSM / MT_WPTM)
 *   work-items, each accumulating MT_WPTM x MT_WPTN outputs in registers, rows and columns
 *   interleaved (work-item (tn, tm) owns rows tm + i * RTSM and columns tn + j * RTSN, so
 *   neighbouring work-items store neighbouring columns: coalesced stores).  For each chunk of
 *   MT_TSK along K, the work-group stages op(A)'s MT_TSM x MT_TSK block and op(B)'s MT_TSK x
 *   MT_TSN block in local memory -- two buffers of each, so the loads of the next chunk overlap
 *   the products of this one with one barrier per chunk -- each work-item loading elements that
 *   are consecutive in the operand's memory whatever its transpose (coalesced loads), zeros past
 *   the edges of M, N and K.  Every output sums its K products in order (k = 0, 1, ...) with
 *   fma: the same bits on every run.
 *
 * This file is included once per variant; matmul.py defines before it:
 *   MT_REAL float | double   MT_NAME kernel name   MT_BIAS 0 | 1   MT_ACT 0 none | 1 relu | 2 tanh
 *   MT_TANH(v) (when MT_ACT == 2)   MT_TSM, MT_TSN, MT_TSK, MT_WPTM, MT_WPTN (the tile sizes)
 * and the file #undefs them at its end.
 */

#define MT_RTSM (MT_TSM / MT_WPTM)                /* work-items along M */
#define MT_RTSN (MT_TSN / MT_WPTN)                /* work-items along N */
#define MT_ITEMS (MT_RTSM * MT_RTSN)
#define MT_ZERO ((MT_REAL)0)

#if MT_ACT == 1                                   /* max(v, 0) keeping NaN, as numpy (fmax drops it) */
#  define MT_EPI(v) ((v) < MT_ZERO ? MT_ZERO : (v))
#elif MT_ACT == 2
#  define MT_EPI(v) MT_TANH(v)
#else
#  define MT_EPI(v) (v)
#endif

/* op(A)[m0 + m][k0 + k] and op(B)[k0 + k][n0 + n] of a chunk into local buffer s: element e of the
 * chunk is read by work-item e % MT_ITEMS, and e runs along the operand's contiguous axis */
#define MT_LOAD_CHUNK(s, k0) do {                                                               \
        for (int e = tid; e < MT_TSM * MT_TSK; e += MT_ITEMS) {                                 \
            const int m = ta ? e % MT_TSM : e / MT_TSK, k = ta ? e / MT_TSM : e % MT_TSK;         \
            const int gm = m0 + m, gk = (k0) + k;                                               \
            As[s][k][m] = gm < M && gk < K ? A[ta ? (long)gk * M + gm : (long)gm * K + gk] : MT_ZERO; \
        }                                                                                       \
        for (int e = tid; e < MT_TSN * MT_TSK; e += MT_ITEMS) {                                 \
            const int n = tb ? e / MT_TSK : e % MT_TSN, k = tb ? e % MT_TSK : e / MT_TSN;         \
            const int gn = n0 + n, gk = (k0) + k;                                               \
            Bs[s][k][n] = gn < N && gk < K ? B[tb ? (long)gn * K + gk : (long)gk * N + gn] : MT_ZERO; \
        }                                                                                       \
    } while (0)

__kernel __attribute__((reqd_work_group_size(MT_RTSN, MT_RTSM, 1)))
void MT_NAME(__global const MT_REAL* restrict A, __global const MT_REAL* restrict B,
             __global MT_REAL* restrict C, __global const MT_REAL* restrict bias,
             const int M, const int N, const int K, const int ta, const int tb,
             const long sa, const long sb, const long sc)
{
    /* +1 column: work-items reading one k row at stride RTSM fall in different banks */
    __local MT_REAL As[2][MT_TSK][MT_TSM + 1];
    __local MT_REAL Bs[2][MT_TSK][MT_TSN + 1];
    const int tn = get_local_id(0), tm = get_local_id(1), tid = tm * MT_RTSN + tn;
    const int n0 = get_group_id(0) * MT_TSN, m0 = get_group_id(1) * MT_TSM;
    const long batch = get_global_id(2);
    A += batch * sa;
    B += batch * sb;
    C += batch * sc;

    MT_REAL acc[MT_WPTM][MT_WPTN];
    for (int i = 0; i < MT_WPTM; i++)
        for (int j = 0; j < MT_WPTN; j++)
            acc[i][j] = MT_ZERO;

    const int chunks = (K + MT_TSK - 1) / MT_TSK;
    if (chunks > 0)
        MT_LOAD_CHUNK(0, 0);
    for (int c = 0; c < chunks; c++) {
        const int s = c & 1;
        barrier(CLK_LOCAL_MEM_FENCE);             /* chunk c is in buffer s; buffer 1 - s is free */
        if (c + 1 < chunks)
            MT_LOAD_CHUNK(1 - s, (c + 1) * MT_TSK);
        for (int k = 0; k < MT_TSK; k++) {
            MT_REAL a[MT_WPTM], b[MT_WPTN];
            for (int i = 0; i < MT_WPTM; i++)
                a[i] = As[s][k][tm + i * MT_RTSM];
            for (int j = 0; j < MT_WPTN; j++)
                b[j] = Bs[s][k][tn + j * MT_RTSN];
            for (int i = 0; i < MT_WPTM; i++)
                for (int j = 0; j < MT_WPTN; j++)
                    acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
    }

    for (int i = 0; i < MT_WPTM; i++) {
        const int gm = m0 + tm + i * MT_RTSM;
        if (gm >= M)
            break;
        for (int j = 0; j < MT_WPTN; j++) {
            const int gn = n0 + tn + j * MT_RTSN;
            if (gn < N) {
                MT_REAL v = acc[i][j];
#if MT_BIAS
                v += bias[gn];
#endif
                C[(long)gm * N + gn] = MT_EPI(v);
            }
        }
    }
}

#undef MT_LOAD_CHUNK
#undef MT_EPI
#undef MT_ZERO
#undef MT_ITEMS
#undef MT_RTSN
#undef MT_RTSM
#undef MT_REAL
#undef MT_NAME
#undef MT_BIAS
#undef MT_ACT
#undef MT_TANH
#undef MT_TSM
#undef MT_TSN
#undef MT_TSK
#undef MT_WPTM
#undef MT_WPTN
