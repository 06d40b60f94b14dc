/* A decode layer's small float32 ops ("glue") on the CPU: included by _qdot.c, built with it.
 *
 * Why C: at one row (a decode step, each Fast-AR call) RMSNorm, the QKV split, the QK-norm and
 * RoPE are ~25 torch calls per layer whose dispatch (3-30 us each), not their bytes, was ~70 ms
 * of a ~400 ms frame (docs/performance.md, "The decode layer's glue in C"). Here each is one call.
 *
 * The same float32 operations as the torch ops of transformer.py (docs/spec/engine.md §2):
 * - RMSNorm: mean = (float)(sum of x*x in double / d); r = 1.0f / sqrtf(mean + (float)eps);
 *   out = (x * r) * w, each a rounded float32 operation as torch's elementwise kernels do them.
 *   The squares of float32 numbers are exact in double; the double sum's order differs from
 *   torch's (8 lanes here), which shows only if the sum lies within a few double ulps of a float
 *   rounding boundary. Not bit-identical to torch all the same: torch's float32 sqrt on the CPU
 *   is MKL's vector square root (within 1 ulp, not correctly rounded); sqrtf here is IEEE's
 *   (as s2.cpp's ggml takes it), so outputs differ from torch's by up to ~3 ulps (kernels/glue.py:
 *   hence the kernel is the RMSNorm of every CPU path while switched on).
 * - RoPE (ggml "normal" mode, adjacent pairs): out0 = x0*c - x1*s, out1 = x0*s + x1*c, two
 *   rounded products then the sum, as torch computes them: bit-identical, as are the split,
 *   the residual add and the copies.
 * No fused multiply-add anywhere: the file is compiled as ISO C (-std=c99, where GCC does not
 * contract a*b+c) and the pragma below says the same to clang and MSVC; no target attribute
 * here (no FMA instructions on offer), the compiler's own SSE2/NEON vectorization only.
 *
 * Every row is computed alone, in a fixed order: a request's rows are the same in a batched
 * call, in any row count, and in a prefill.
 */

#define S2G_MAX_HD 512 /* head sizes above this go to torch (S2 Pro: 128; tiny models: 16) */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

/* One row's inverse RMS: 1 / sqrt(mean(x^2) + eps), the mean summed in double (8 lanes, summed
 * pairwise: vectorizable without reassociating anything) and rounded to float32 as torch's
 * x.double().square().mean(-1).float() does. */
static float s2g_inv_rms(const float *x, int64_t d, float eps) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= d; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
    for (int l = 0; i < d; i++, l++) acc[l] += (double)x[i] * (double)x[i];
    double sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    float mean = (float)(sum / (double)d);
    return 1.0f / sqrtf(mean + eps);
}

/* out = (x * r) * w for one row of d (out may be x). */
static void s2g_scale_row(const float *x, float r, const float *w, float *out, int64_t d) {
    for (int64_t i = 0; i < d; i++) out[i] = (x[i] * r) * w[i];
}

/* RMSNorm of n rows of d: row i at x + i*xs, written at out + i*os. */
static void s2g_rms_rows(const float *x, int64_t xs, const float *w, float *out, int64_t os, int64_t n, int64_t d,
                         float eps) {
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * xs;
        s2g_scale_row(xr, s2g_inv_rms(xr, d, eps), w, out + r * os, d);
    }
}

/* The residual add and the next RMSNorm of n contiguous rows of d: hsum = x + y, f = RMSNorm(hsum). */
static void s2g_add_rms_rows(const float *x, const float *y, const float *w, float *hsum, float *f, int64_t n,
                             int64_t d, float eps) {
    for (int64_t i = 0; i < n * d; i++) hsum[i] = x[i] + y[i];
    s2g_rms_rows(hsum, d, w, f, d, n, d, eps);
}

/* RoPE of one head (hd values, hd/2 adjacent pairs) with one position's cos/sin (hd/2 each). */
static void s2g_rope_head(const float *x, const float *c, const float *s, float *out, int64_t hd) {
    for (int64_t i = 0; i < hd / 2; i++) {
        float x0 = x[2 * i], x1 = x[2 * i + 1];
        float a = x0 * c[i], b = x1 * s[i];
        float e = x0 * s[i], f = x1 * c[i];
        out[2 * i] = a - b;
        out[2 * i + 1] = e + f;
    }
}

/* The fused projection's n rows (row r at qkv + r*qs: H query heads, then Hkv key heads, then
 * Hkv value heads, hd each) to the layouts layer_forward passes to attention:
 *   q (n, H, hd) contiguous (the caller passes its transpose, (H, n, hd)),
 *   k, v (Hkv, n, hd) contiguous,
 * with, where qn/kn are given (the layer's QK-norm weights, hd each), the RMSNorm of every
 * head (eps) before RoPE; cos/sin: n rows of hd/2 (row r: the position of row r). */
static void s2g_qkv_heads(const float *qkv, int64_t qs, int64_t n, int64_t h, int64_t hkv, int64_t hd,
                          const float *qn, const float *kn, float eps, const float *cos, const float *sin,
                          float *q, float *k, float *v) {
    float tmp[S2G_MAX_HD];
    int64_t half = hd / 2;
    for (int64_t r = 0; r < n; r++) {
        const float *row = qkv + r * qs, *c = cos + r * half, *s = sin + r * half;
        for (int64_t i = 0; i < h + hkv; i++) {
            const float *src = row + i * hd;
            float *dst = i < h ? q + (r * h + i) * hd : k + ((i - h) * n + r) * hd;
            const float *nw = i < h ? qn : kn;
            if (nw) {
                s2g_scale_row(src, s2g_inv_rms(src, hd, eps), nw, tmp, hd);
                src = tmp;
            }
            s2g_rope_head(src, c, s, dst, hd);
        }
        for (int64_t i = 0; i < hkv; i++)
            memcpy(v + (i * n + r) * hd, row + (h + hkv + i) * hd, (size_t)hd * sizeof(float));
    }
}
