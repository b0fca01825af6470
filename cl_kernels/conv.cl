/* Direct N-D convolution (up to 3 spatial dims) in the canonical layout of the
 * conv_general_dilated primitive: lhs (N, C, D, H, W), rhs (O, I, KD, KH, KW), out
 * (NO, O, OD, OH, OW), all row-major; fewer spatial dims are given as leading 1s.
 *
 * One work-item per output element sums over its group's input features and the kernel taps.
 * A tap reads the (virtually) lhs-dilated, padded input at  o * stride + k * rhs_dilation - pad_lo:
 * holes of the dilation and the padding read as 0 (skipped).  The lowering
 * (functrace/backends/opencl/conv.py) #defines the geometry before this file and #undefs it after:
 *   CV_REAL, CV_KN           element type; kernel name
 *   CV_N CV_C CV_D CV_H CV_W lhs sizes;  CV_O CV_I CV_KD CV_KH CV_KW rhs sizes
 *   CV_NO CV_OD CV_OH CV_OW  output sizes (batch and spatial)
 *   CV_S{D,H,W} strides, CV_P{D,H,W} low paddings, CV_L{D,H,W} lhs dilations, CV_R{D,H,W} rhs dilations
 *   CV_FG CV_BG              feature / batch group counts (one of them is 1)
 * Constants make the index arithmetic fold at compile time.
 */

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
    CV_REAL acc = 0;
    for (long kd = 0; kd < CV_KD; ++kd) {
        long id = od * CV_SD + kd * CV_RD - CV_PD;
        if (id < 0 || id % CV_LD != 0 || id / CV_LD >= CV_D) continue;
        id /= CV_LD;
        for (long kh = 0; kh < CV_KH; ++kh) {
            long ih = oh * CV_SH + kh * CV_RH - CV_PH;
            if (ih < 0 || ih % CV_LH != 0 || ih / CV_LH >= CV_H) continue;
            ih /= CV_LH;
            for (long kw = 0; kw < CV_KW; ++kw) {
                long iw = ow * CV_SW + kw * CV_RW - CV_PW;
                if (iw < 0 || iw % CV_LW != 0 || iw / CV_LW >= CV_W) continue;
                iw /= CV_LW;
                __global const CV_REAL* x = lhs + ((batch * CV_C + c0) * CV_D + id) * (CV_H * CV_W) + ih * CV_W + iw;
                __global const CV_REAL* w = rhs + o * (CV_I * CV_KD * CV_KH * CV_KW) + (kd * CV_KH + kh) * CV_KW + kw;
                for (long ci = 0; ci < CV_I; ++ci)
                    acc += x[ci * (CV_D * CV_H * CV_W)] * w[ci * (CV_KD * CV_KH * CV_KW)];
            }
        }
    }
    out[get_global_id(0)] = acc;
}
