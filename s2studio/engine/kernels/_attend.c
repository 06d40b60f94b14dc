/* Decode attention (one query row per request) over a KV cache: included by _qdot.c, which
 * provides the levels (``level``), the target macros and f16_to_f32; built with it.
 *
 * Why C: at one query row, transformer.attend is ~15 small torch calls per layer (scaling, two
 * score GEMMs, cat, softmax, two value GEMMs, ...) whose dispatch, not their bytes, is ~12 % of
 * a frame, and in a batched step it is paid once per request (docs/performance.md, "Decode
 * attention in C"). Here one call computes every head of every request of the step.
 *
 * What it computes, per request and query head i (KV head i / g, g = H / Hkv), exactly the
 * maths of transformer.attend for n = 1 (docs/spec/engine.md §9):
 *   qs    = q_i * (float)(1 / sqrt(hd))                         (float32, as torch's scalar mul)
 *   s_j   = qs . K[j]   for the cached positions j < pos0   (float16 or float32 cache)
 *   s_pos = qs . k_new  (the current position's fresh float32 key, never rounded)
 *   p     = softmax(s)  (max subtracted, float32)
 *   out_i = sum_j p_j V[j] + p_pos v_new
 * Not bit-identical to torch (other summation order, another exp): within a few float32 ulps of
 * the scores' scale (tests/engine/test_attend_kernel.py states the bounds).
 *
 * Determinism: a task is one (request, KV head): its g query heads, computed by one thread in
 * a fixed order that depends on nothing else (not on the thread count, the other requests, or
 * which thread claims it). So a request's output is the same alone and batched, with 1 or N
 * threads. The levels differ from each other (FMA, lane order, exp), each is deterministic.
 *
 * Levels: scalar (portable C, libm expf; what AArch64 runs, vectorized by the compiler where it
 * can), AVX2+FMA+F16C (the avx2 and avxvnni levels), AVX-512F (the avx512 levels), with a
 * polynomial exp (Cephes' expf: ~1 ulp on the softmax's range). A head size that is not a
 * multiple of a level's vector width (only tiny test models) takes the next narrower path.
 *
 * Store: after attending, the task may write its KV head's fresh k/v at position pos0 of the
 * cache, as KVCache.store does (rounded to float16 with torch's .half() bits, or as is): no
 * task of the call reads that position (they read 0..pos0-1 and the fresh rows).
 */

#define S2A_MAX_HD 512     /* head sizes above this go to torch (S2 Pro: 128; tiny models: 16) */
#define S2A_STACK_KEYS 4096 /* scores on the stack up to this many positions, else malloc */
#define S2A_FIELDS 10       /* int64 per request in the descriptor table: see s2a_task */

#include <stdlib.h>

typedef void (*s2a_store_fn)(void *dst, int f16, const float *src, int64_t hd, int64_t mode);
typedef void (*s2a_head_fn)(const float *q, const void *kc, const void *vc, int f16, const float *kn,
                            const float *vn, int64_t pos0, int64_t hd, float scale, float *s, float *out);

/* ---- portable C -------------------------------------------------------------------------- */

/* One cached row as float32 (float16 converted, float32 as is). */
static const float *s2a_row(const void *base, int f16, int64_t j, int64_t hd, float *tmp) {
    if (!f16) return (const float *)base + j * hd;
    const uint16_t *h = (const uint16_t *)base + j * hd;
    for (int64_t d = 0; d < hd; d++) tmp[d] = f16_to_f32(h[d]);
    return tmp;
}

/* 8 partial sums (lane d % 8), summed pairwise at the end: the compiler can vectorize it
 * without reassociating anything (-std=c99: no contraction, the same on every platform). */
static float s2a_dot_scalar(const float *a, const float *b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t d = 0;
    for (; d + 8 <= n; d += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[d + l] * b[d + l];
    for (int l = 0; d < n; d++, l++) acc[l] += a[d] * b[d];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void s2a_head_scalar(const float *q, const void *kc, const void *vc, int f16, const float *kn,
                            const float *vn, int64_t pos0, int64_t hd, float scale, float *s, float *out) {
    float qs[S2A_MAX_HD], tmp[S2A_MAX_HD];
    for (int64_t d = 0; d < hd; d++) qs[d] = q[d] * scale;
    float mx = -INFINITY;
    for (int64_t j = 0; j <= pos0; j++) {
        const float *k = j < pos0 ? s2a_row(kc, f16, j, hd, tmp) : kn;
        s[j] = s2a_dot_scalar(qs, k, hd);
        mx = s[j] > mx ? s[j] : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j <= pos0; j++) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    float inv = 1.0f / sum;
    for (int64_t d = 0; d < hd; d++) out[d] = 0.0f;
    for (int64_t j = 0; j <= pos0; j++) {
        const float *v = j < pos0 ? s2a_row(vc, f16, j, hd, tmp) : vn;
        float p = s[j] * inv;
        for (int64_t d = 0; d < hd; d++) out[d] += p * v[d];
    }
}

/* float32 -> float16, round to nearest even, as torch's .half() (the FP16 library's
 * fp16_ieee_from_fp32_value, which torch's scalar conversion is; F16C's vcvtps2ph, its vector
 * one, gives the same bits for every number). */
static uint16_t s2a_f32_to_f16(float f) {
    const float to_inf = 5.192296858534828e+33f /* 2^112 */, to_zero = 7.703719777548943e-34f /* 2^-110 */;
    uint32_t w, bits;
    float base = (fabsf(f) * to_inf) * to_zero;
    memcpy(&w, &f, 4);
    uint32_t shl1 = w + w, sign = w & 0x80000000u, bias = shl1 & 0xff000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    uint32_t bb = (bias >> 1) + 0x07800000u;
    float b;
    memcpy(&b, &bb, 4);
    base = b + base;
    memcpy(&bits, &base, 4);
    uint32_t nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
    return (uint16_t)((sign >> 16) | (shl1 > 0xff000000u ? 0x7e00u : nonsign));
}

/* The fresh k or v row of one KV head into the cache at its position, as KVCache.store
 * writes it: mode 1 as the cache holds it (float32 as is, or float16), mode 2 rounded to
 * float16 (into a float32 cache: the values s2.cpp's F16 cache would hold). */
static void s2a_store_scalar(void *dst, int f16, const float *src, int64_t hd, int64_t mode) {
    for (int64_t d = 0; d < hd; d++) {
        if (f16) ((uint16_t *)dst)[d] = s2a_f32_to_f16(src[d]);
        else ((float *)dst)[d] = mode == 2 ? f16_to_f32(s2a_f32_to_f16(src[d])) : src[d];
    }
}

#ifdef S2Q_X86
/* ---- AVX2 + FMA + F16C (8 lanes) --------------------------------------------------------- */

/* Cephes' expf (the constants of its single-precision exp): ~1 ulp for the softmax's
 * arguments (x <= 0); below the smallest normal result it returns 0 (such a term changes no
 * float32 sum that holds the maximum's 1). */
S2Q_TARGET(AVX2_T) S2Q_INLINE __m256 s2a_exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3365448f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

S2Q_TARGET(AVX2_T) S2Q_INLINE float s2a_hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

S2Q_TARGET(AVX2_T) S2Q_INLINE __m256 s2a_ld8(const void *base, int f16, int64_t at) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + at)));
    return _mm256_loadu_ps((const float *)base + at);
}

/* A key's dot product: chunks of 8 alternate between two accumulators (even, odd), then the
 * two are added and the lanes summed: the same order whether a key is done alone or in 4s. */
S2Q_TARGET(AVX2_T) S2Q_INLINE float s2a_dot8(const float *qs, const void *k, int f16, int64_t at, int64_t hd) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 16 <= hd; d += 16) {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(qs + d), s2a_ld8(k, f16, at + d), a);
        b = _mm256_fmadd_ps(_mm256_loadu_ps(qs + d + 8), s2a_ld8(k, f16, at + d + 8), b);
    }
    if (d < hd) a = _mm256_fmadd_ps(_mm256_loadu_ps(qs + d), s2a_ld8(k, f16, at + d), a);
    return s2a_hsum8(_mm256_add_ps(a, b));
}

S2Q_TARGET(AVX2_T) S2Q_INLINE void s2a_head_avx2_t(const float *q, const void *kc, const void *vc, const int f16,
                                                   const float *kn, const float *vn, int64_t pos0, int64_t hd,
                                                   float scale, float *s, float *out) {
    float qs[S2A_MAX_HD];
    __m256 vs = _mm256_set1_ps(scale);
    for (int64_t d = 0; d < hd; d += 8) _mm256_storeu_ps(qs + d, _mm256_mul_ps(_mm256_loadu_ps(q + d), vs));
    /* scores: four keys at a time (four independent chains), each key in s2a_dot8's order */
    int64_t j = 0;
    for (; j + 4 <= pos0; j += 4) {
        __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
        int64_t d = 0;
        for (; d + 16 <= hd; d += 16) {
            __m256 x = _mm256_loadu_ps(qs + d), y = _mm256_loadu_ps(qs + d + 8);
            a0 = _mm256_fmadd_ps(x, s2a_ld8(kc, f16, j * hd + d), a0);
            b0 = _mm256_fmadd_ps(y, s2a_ld8(kc, f16, j * hd + d + 8), b0);
            a1 = _mm256_fmadd_ps(x, s2a_ld8(kc, f16, (j + 1) * hd + d), a1);
            b1 = _mm256_fmadd_ps(y, s2a_ld8(kc, f16, (j + 1) * hd + d + 8), b1);
            a2 = _mm256_fmadd_ps(x, s2a_ld8(kc, f16, (j + 2) * hd + d), a2);
            b2 = _mm256_fmadd_ps(y, s2a_ld8(kc, f16, (j + 2) * hd + d + 8), b2);
            a3 = _mm256_fmadd_ps(x, s2a_ld8(kc, f16, (j + 3) * hd + d), a3);
            b3 = _mm256_fmadd_ps(y, s2a_ld8(kc, f16, (j + 3) * hd + d + 8), b3);
        }
        if (d < hd) {
            __m256 x = _mm256_loadu_ps(qs + d);
            a0 = _mm256_fmadd_ps(x, s2a_ld8(kc, f16, j * hd + d), a0);
            a1 = _mm256_fmadd_ps(x, s2a_ld8(kc, f16, (j + 1) * hd + d), a1);
            a2 = _mm256_fmadd_ps(x, s2a_ld8(kc, f16, (j + 2) * hd + d), a2);
            a3 = _mm256_fmadd_ps(x, s2a_ld8(kc, f16, (j + 3) * hd + d), a3);
        }
        s[j] = s2a_hsum8(_mm256_add_ps(a0, b0));
        s[j + 1] = s2a_hsum8(_mm256_add_ps(a1, b1));
        s[j + 2] = s2a_hsum8(_mm256_add_ps(a2, b2));
        s[j + 3] = s2a_hsum8(_mm256_add_ps(a3, b3));
    }
    for (; j < pos0; j++) s[j] = s2a_dot8(qs, kc, f16, j * hd, hd);
    s[pos0] = s2a_dot8(qs, kn, 0, 0, hd);
    /* softmax: lane-wise max and sum over blocks of 8, then the lanes; the tail one at a time */
    int64_t n = pos0 + 1, n8 = n & ~(int64_t)7;
    __m256 vmx = _mm256_set1_ps(-INFINITY);
    for (j = 0; j < n8; j += 8) vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(s + j));
    float m8[8], mx = -INFINITY;
    _mm256_storeu_ps(m8, vmx);
    for (int l = 0; l < 8; l++) mx = m8[l] > mx ? m8[l] : mx;
    for (j = n8; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    __m256 vm = _mm256_set1_ps(mx), vsum = _mm256_setzero_ps();
    for (j = 0; j < n8; j += 8) {
        __m256 e = s2a_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float sum = s2a_hsum8(vsum);
    if (j < n) {  /* the tail through the same exp, in one padded vector */
        float t[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        for (int64_t i = j; i < n; i++) t[i - j] = s[i] - mx;
        _mm256_storeu_ps(t, s2a_exp8(_mm256_loadu_ps(t)));
        for (int64_t i = j; i < n; i++) {
            s[i] = t[i - j];
            sum += s[i];
        }
    }
    __m256 vinv = _mm256_set1_ps(1.0f / sum);
    for (j = 0; j < n8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), vinv));
    for (j = n8; j < n; j++) s[j] *= 1.0f / sum;
    /* values: each output lane sums p_j v_j over j in order; 64 outputs (8 vectors) at a time */
    int64_t d = 0;
    for (; d + 64 <= hd; d += 64) {
        __m256 o[8];
        for (int c = 0; c < 8; c++) o[c] = _mm256_setzero_ps();
        for (j = 0; j < pos0; j++) {
            __m256 p = _mm256_set1_ps(s[j]);
            for (int c = 0; c < 8; c++) o[c] = _mm256_fmadd_ps(p, s2a_ld8(vc, f16, j * hd + d + 8 * c), o[c]);
        }
        __m256 p = _mm256_set1_ps(s[pos0]);
        for (int c = 0; c < 8; c++) _mm256_storeu_ps(out + d + 8 * c, _mm256_fmadd_ps(p, _mm256_loadu_ps(vn + d + 8 * c), o[c]));
    }
    for (; d < hd; d += 8) {
        __m256 o = _mm256_setzero_ps();
        for (j = 0; j < pos0; j++) o = _mm256_fmadd_ps(_mm256_set1_ps(s[j]), s2a_ld8(vc, f16, j * hd + d), o);
        _mm256_storeu_ps(out + d, _mm256_fmadd_ps(_mm256_set1_ps(s[pos0]), _mm256_loadu_ps(vn + d), o));
    }
}

S2Q_TARGET(AVX2_T) static void s2a_head_avx2(const float *q, const void *kc, const void *vc, int f16,
                                             const float *kn, const float *vn, int64_t pos0, int64_t hd, float scale,
                                             float *s, float *out) {
    if (f16) s2a_head_avx2_t(q, kc, vc, 1, kn, vn, pos0, hd, scale, s, out);
    else s2a_head_avx2_t(q, kc, vc, 0, kn, vn, pos0, hd, scale, s, out);
}

/* s2a_store_scalar with F16C (the same bits: both round to nearest even). */
S2Q_TARGET(AVX2_T) static void s2a_store_f16c(void *dst, int f16, const float *src, int64_t hd, int64_t mode) {
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (f16) _mm_storeu_si128((__m128i *)((uint16_t *)dst + d), h);
        else _mm256_storeu_ps((float *)dst + d, mode == 2 ? _mm256_cvtph_ps(h) : _mm256_loadu_ps(src + d));
    }
    if (d < hd) s2a_store_scalar(f16 ? (void *)((uint16_t *)dst + d) : (void *)((float *)dst + d), f16, src + d,
                                 hd - d, mode);
}

/* ---- AVX-512F (16 lanes) ----------------------------------------------------------------- */

#define S2A_AVX512_T "avx2,fma,f16c,avx512f"

S2Q_TARGET(S2A_AVX512_T) S2Q_INLINE __m512 s2a_exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3365448f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_max_ps(x, lo);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    return _mm512_maskz_mov_ps((__mmask16)~under, y);
}

/* 16 lanes summed in a fixed order (halves, then s2a_hsum8). */
S2Q_TARGET(S2A_AVX512_T) S2Q_INLINE float s2a_hsum16(__m512 a) {
    __m256 lo = _mm512_castps512_ps256(a);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    return s2a_hsum8(_mm256_add_ps(lo, hi));
}

S2Q_TARGET(S2A_AVX512_T) S2Q_INLINE __m512 s2a_ld16(const void *base, int f16, int64_t at) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + at)));
    return _mm512_loadu_ps((const float *)base + at);
}

S2Q_TARGET(S2A_AVX512_T) S2Q_INLINE float s2a_dot16(const float *qs, const void *k, int f16, int64_t at, int64_t hd) {
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    int64_t d = 0;
    for (; d + 32 <= hd; d += 32) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(qs + d), s2a_ld16(k, f16, at + d), a);
        b = _mm512_fmadd_ps(_mm512_loadu_ps(qs + d + 16), s2a_ld16(k, f16, at + d + 16), b);
    }
    if (d < hd) a = _mm512_fmadd_ps(_mm512_loadu_ps(qs + d), s2a_ld16(k, f16, at + d), a);
    return s2a_hsum16(_mm512_add_ps(a, b));
}

S2Q_TARGET(S2A_AVX512_T) S2Q_INLINE void s2a_head_avx512_t(const float *q, const void *kc, const void *vc,
                                                           const int f16, const float *kn, const float *vn,
                                                           int64_t pos0, int64_t hd, float scale, float *s,
                                                           float *out) {
    float qs[S2A_MAX_HD];
    __m512 vs = _mm512_set1_ps(scale);
    for (int64_t d = 0; d < hd; d += 16) _mm512_storeu_ps(qs + d, _mm512_mul_ps(_mm512_loadu_ps(q + d), vs));
    int64_t j = 0;
    for (; j + 4 <= pos0; j += 4) {
        __m512 a0 = _mm512_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
        int64_t d = 0;
        for (; d + 32 <= hd; d += 32) {
            __m512 x = _mm512_loadu_ps(qs + d), y = _mm512_loadu_ps(qs + d + 16);
            a0 = _mm512_fmadd_ps(x, s2a_ld16(kc, f16, j * hd + d), a0);
            b0 = _mm512_fmadd_ps(y, s2a_ld16(kc, f16, j * hd + d + 16), b0);
            a1 = _mm512_fmadd_ps(x, s2a_ld16(kc, f16, (j + 1) * hd + d), a1);
            b1 = _mm512_fmadd_ps(y, s2a_ld16(kc, f16, (j + 1) * hd + d + 16), b1);
            a2 = _mm512_fmadd_ps(x, s2a_ld16(kc, f16, (j + 2) * hd + d), a2);
            b2 = _mm512_fmadd_ps(y, s2a_ld16(kc, f16, (j + 2) * hd + d + 16), b2);
            a3 = _mm512_fmadd_ps(x, s2a_ld16(kc, f16, (j + 3) * hd + d), a3);
            b3 = _mm512_fmadd_ps(y, s2a_ld16(kc, f16, (j + 3) * hd + d + 16), b3);
        }
        if (d < hd) {
            __m512 x = _mm512_loadu_ps(qs + d);
            a0 = _mm512_fmadd_ps(x, s2a_ld16(kc, f16, j * hd + d), a0);
            a1 = _mm512_fmadd_ps(x, s2a_ld16(kc, f16, (j + 1) * hd + d), a1);
            a2 = _mm512_fmadd_ps(x, s2a_ld16(kc, f16, (j + 2) * hd + d), a2);
            a3 = _mm512_fmadd_ps(x, s2a_ld16(kc, f16, (j + 3) * hd + d), a3);
        }
        s[j] = s2a_hsum16(_mm512_add_ps(a0, b0));
        s[j + 1] = s2a_hsum16(_mm512_add_ps(a1, b1));
        s[j + 2] = s2a_hsum16(_mm512_add_ps(a2, b2));
        s[j + 3] = s2a_hsum16(_mm512_add_ps(a3, b3));
    }
    for (; j < pos0; j++) s[j] = s2a_dot16(qs, kc, f16, j * hd, hd);
    s[pos0] = s2a_dot16(qs, kn, 0, 0, hd);
    /* softmax: masked vectors cover the tail, so every score goes through the same exp */
    int64_t n = pos0 + 1;
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    for (j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        vmx = _mm512_mask_max_ps(vmx, m, vmx, _mm512_maskz_loadu_ps(m, s + j));
    }
    float mx = _mm512_reduce_max_ps(vmx);
    __m512 vm = _mm512_set1_ps(mx), vsum = _mm512_setzero_ps();
    for (j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 e = _mm512_maskz_mov_ps(m, s2a_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vm)));
        _mm512_mask_storeu_ps(s + j, m, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    __m512 vinv = _mm512_set1_ps(1.0f / s2a_hsum16(vsum));
    for (j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        _mm512_mask_storeu_ps(s + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), vinv));
    }
    int64_t d = 0;
    for (; d + 128 <= hd; d += 128) {
        __m512 o[8];
        for (int c = 0; c < 8; c++) o[c] = _mm512_setzero_ps();
        for (j = 0; j < pos0; j++) {
            __m512 p = _mm512_set1_ps(s[j]);
            for (int c = 0; c < 8; c++) o[c] = _mm512_fmadd_ps(p, s2a_ld16(vc, f16, j * hd + d + 16 * c), o[c]);
        }
        __m512 p = _mm512_set1_ps(s[pos0]);
        for (int c = 0; c < 8; c++)
            _mm512_storeu_ps(out + d + 16 * c, _mm512_fmadd_ps(p, _mm512_loadu_ps(vn + d + 16 * c), o[c]));
    }
    for (; d < hd; d += 16) {
        __m512 o = _mm512_setzero_ps();
        for (j = 0; j < pos0; j++) o = _mm512_fmadd_ps(_mm512_set1_ps(s[j]), s2a_ld16(vc, f16, j * hd + d), o);
        _mm512_storeu_ps(out + d, _mm512_fmadd_ps(_mm512_set1_ps(s[pos0]), _mm512_loadu_ps(vn + d), o));
    }
}

S2Q_TARGET(S2A_AVX512_T) static void s2a_head_avx512(const float *q, const void *kc, const void *vc, int f16,
                                                     const float *kn, const float *vn, int64_t pos0, int64_t hd,
                                                     float scale, float *s, float *out) {
    if (f16) s2a_head_avx512_t(q, kc, vc, 1, kn, vn, pos0, hd, scale, s, out);
    else s2a_head_avx512_t(q, kc, vc, 0, kn, vn, pos0, hd, scale, s, out);
}
#endif /* S2Q_X86 */

/* The head function of the current level for head size hd (a size the level's vectors do not
 * divide takes the portable one). */
static s2a_store_fn s2a_pick_store(void) {
#ifdef S2Q_X86
    if (level >= L_AVX2) return s2a_store_f16c;
#endif
    return s2a_store_scalar;
}

static s2a_head_fn s2a_pick(int64_t hd) {
#ifdef S2Q_X86
    if (level >= L_AVX512 && hd % 16 == 0) return s2a_head_avx512;
    if (level >= L_AVX2 && hd % 8 == 0) return s2a_head_avx2;
#endif
    (void)hd;
    return s2a_head_scalar;
}

/* Task t of a step: request t / hkv, KV head t % hkv (its g = h / hkv query heads).
 * ``seqs``: per request S2A_FIELDS int64:
 *   q (h, hd) float32, k_new and v_new (hkv rows of hd float32, new_stride apart), k_cache and
 *   v_cache (hkv, stride) float16 (f16 = 1) or float32 with positions hd apart, out (h, hd)
 *   float32, pos0 (the cached positions, >= 0), stride (elements between the cache's KV heads:
 *   its capacity * hd), new_stride (elements between k_new's KV heads: hd for one request,
 *   B * hd for request b of a batched step's (hkv, B, hd) rows), store (0: leave the cache as it
 *   is; 1: write k_new/v_new at position pos0 as the cache holds them; 2: rounded to float16,
 *   as KVCache.store with round_f16; the cache must then have room for position pos0). */
static void s2a_task(const int64_t *seqs, int64_t t, int64_t h, int64_t hkv, int64_t hd, int64_t f16,
                     float scale, s2a_head_fn head, s2a_store_fn store, float *s) {
    int64_t r = t / hkv, kh = t % hkv, g = h / hkv;
    const int64_t *f = seqs + r * S2A_FIELDS;
    const float *q = (const float *)(intptr_t)f[0], *kn = (const float *)(intptr_t)f[1];
    const float *vn = (const float *)(intptr_t)f[2];
    int64_t esz = f16 ? 2 : 4, pos0 = f[6], stride = f[7], nstride = f[8];
    const char *kc = (const char *)(intptr_t)f[3] + kh * stride * esz;
    const char *vc = (const char *)(intptr_t)f[4] + kh * stride * esz;
    float *out = (float *)(intptr_t)f[5];
    for (int64_t i = kh * g; i < (kh + 1) * g; i++)
        head(q + i * hd, kc, vc, (int)f16, kn + kh * nstride, vn + kh * nstride, pos0, hd, scale, s, out + i * hd);
    if (f[9]) {  /* then this KV head's fresh k/v into the cache at pos0 (read by no task of this call) */
        store((char *)kc + pos0 * hd * esz, (int)f16, kn + kh * nstride, hd, f[9]);
        store((char *)vc + pos0 * hd * esz, (int)f16, vn + kh * nstride, hd, f[9]);
    }
}

/* The tasks of a step: all of them in order (next == NULL), or those claimed from *next. */
static int s2a_run(const int64_t *seqs, int64_t n_seqs, int64_t h, int64_t hkv, int64_t hd, int64_t f16,
                   int64_t *next) {
    if (hd < 1 || hd > S2A_MAX_HD || hkv < 1 || h % hkv || n_seqs < 1) return -1;
    int64_t max_pos = 0, n_tasks = n_seqs * hkv;
    for (int64_t r = 0; r < n_seqs; r++) {
        const int64_t *f = seqs + r * S2A_FIELDS;
        int64_t p = f[6];
        if (p < 0 || f[9] < 0 || f[9] > 2 || (f[9] && p >= f[7] / hd)) return -1;  /* no room at pos0 */
        max_pos = p > max_pos ? p : max_pos;
    }
    float stack_s[S2A_STACK_KEYS + 16];
    float *s = stack_s;
    if (max_pos + 16 > S2A_STACK_KEYS) {
        s = (float *)malloc((size_t)(max_pos + 16) * sizeof(float));
        if (!s) return -1;
    }
    /* torch multiplies by the Python float 1/math.sqrt(hd) converted to float32: the same */
    float scale = (float)(1.0 / sqrt((double)hd));
    s2a_head_fn head = s2a_pick(hd);
    s2a_store_fn store = s2a_pick_store();
    if (next) {
        for (;;) {
            int64_t t = S2Q_CLAIM(next);
            if (t >= n_tasks) break;
            s2a_task(seqs, t, h, hkv, hd, f16, scale, head, store, s);
        }
    } else {
        for (int64_t t = 0; t < n_tasks; t++) s2a_task(seqs, t, h, hkv, hd, f16, scale, head, store, s);
    }
    if (s != stack_s) free(s);
    return 0;
}

/* Every task of a step in this thread. Returns 0, or -1 (bad shape, or out of memory). */
int64_t s2q_attend_all(int64_t seqs, int64_t n_seqs, int64_t h, int64_t hkv, int64_t hd, int64_t f16) {
    return s2a_run((const int64_t *)(intptr_t)seqs, n_seqs, h, hkv, hd, f16, NULL);
}

/* Dynamic scheduling, as s2q_gemv_tasks: every thread of the caller's parallel region calls
 * this once and claims tasks from ``*next`` until none is left; a task's result does not
 * depend on the thread that computes it. A thread that fails (out of memory) claims nothing
 * and sets ``*status`` to -1 (the caller then uses torch). */
void s2q_attend_tasks(int64_t seqs, int64_t n_seqs, int64_t h, int64_t hkv, int64_t hd, int64_t f16, int64_t next,
                      int64_t status) {
    if (s2a_run((const int64_t *)(intptr_t)seqs, n_seqs, h, hkv, hd, f16, (int64_t *)(intptr_t)next) < 0)
        *(int64_t *)(intptr_t)status = -1;
}
