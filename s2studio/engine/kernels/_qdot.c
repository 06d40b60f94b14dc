/* Integer-dot-product GEMV rows for GGUF K-quant blocks (Q4_K, Q5_K, Q6_K, Q3_K, Q2_K) and Q8_0.
 *
 * Why C: the numba kernels convert every weight to float32 and do one FMA per weight, which
 * makes the K-quant GEMVs compute-bound at ~4x the memory-bandwidth floor. Multiplying the
 * 2-6-bit weights as bytes against activations quantized to int8 ("Q8_K": one float scale
 * per 256 values) does 32-64 multiply-adds per instruction (AVX2 vpmaddubsw, AVX-512BW, VNNI
 * vpdpwssd), and LLVM does not produce these instructions from numba loops.
 *
 * Design (written for this project from the GGUF block layouts; see docs/performance.md):
 * - each block of 256 weights is unpacked into 256 unsigned bytes u (in element order), 16
 *   int16 scales S and 16 int16 "mins" M (one per 16 weights), a float d and a float cm, so
 *   that   weight[i] = d * S[i/16] * u[i] + cm * M[i/16]  for every type:
 *     Q4_K/Q5_K: S = 6-bit scale, M = 6-bit min,   cm = -dmin      (u = 4/5-bit value)
 *     Q6_K:      S = M = int8 scale,               cm = -32 d      (u = 6-bit value)
 *     Q3_K:      S = M = 6-bit scale - 32,         cm = -4 d       (u = 3-bit value)
 *     Q2_K:      S = 4-bit scale, M = 4-bit min,   cm = -dmin      (u = 2-bit value)
 * - the activations x are quantized per 256 values to q (int8, |q| <= 127) with a scale dx,
 *   and the sums of q per 16 values are kept (bsum), so that a block's dot product is
 *     dx * (d * sum_s S[s] * sum_{i in s} u[i] q[i]  +  cm * sum_s M[s] * bsum[s]).
 *   u*q pairs are summed by vpmaddubsw into int16 (at most 63*127*2, no saturation), then
 *   multiplied by S and summed into int32 by vpmaddwd (or VNNI vpdpwssd).
 * - Q8_0 (float16 d + 32 int8 per block) needs no unpacking: int8 weights x int8 activations
 *   (vpsignb/masked negation moves w's sign onto x, vpmaddubsw or VNNI vpdpbusd), or, for the
 *   precise mode, x int16 activations (vpmaddwd on the widened weights); one float FMA per
 *   block applies d, one per 256 values the activation scale. Its point is batching: each
 *   weight block is loaded and prepared once for all m activation rows.
 * - every row function keeps per-activation-row accumulators and an operation order that does
 *   not depend on m: a row computed among others is bit-identical to it computed alone (the
 *   server batches requests into one GEMV and a seeded request must not change).
 * - the CPU's best path is chosen once at run time (x86: AVX-512 VNNI, AVX-512BW, AVX2; AArch64:
 *   dotprod (sdot), NEON; else portable C); set_level() lets the tests run every path the CPU
 *   has. The AArch64 rows vectorize only the exact integer parts and keep the portable rows'
 *   float operations, so their outputs are bit-identical to the "scalar" level's (checked
 *   under qemu: tools/qdot_arm_check, tests/engine/test_qdot_arm.py).
 * - threads: every thread that works on a GEMV calls s2q_gemv_tasks, which hands out rows in
 *   small tasks from an atomic counter (dynamic scheduling: see there). Those threads are the
 *   extension's own where _pool.c builds (s2q_pool_gemv, the default schedule), else the
 *   caller's numba prange; nothing touches a Python object.
 *
 * Entry points take every argument as int64 (pointers too): numba calls them as external
 * symbols with a fixed signature on every platform.
 */
#ifndef S2Q_NO_PYTHON /* the standalone ARM check (tools/qdot_arm_check) includes this file */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if !defined(_WIN32)
#include <dlfcn.h>
#define S2Q_DLOPEN 1
#endif
#endif
#include <stdint.h>
#include <string.h>
#include <math.h>

#if defined(__x86_64__) || defined(_M_X64)
#define S2Q_X86 1
#include <immintrin.h>
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#define S2Q_TARGET(x)
#else
#include <cpuid.h>
#define S2Q_TARGET(x) __attribute__((target(x)))
#endif
#endif

/* AArch64 with GCC or clang (MSVC on ARM64 keeps the portable C: its NEON intrinsics are not
 * checked here). S2Q_NO_NEON turns the NEON levels off at compile time. */
#if (defined(__aarch64__) || defined(_M_ARM64)) && !defined(_MSC_VER) && !defined(S2Q_NO_NEON)
#define S2Q_ARM 1
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>
#elif defined(__APPLE__)
#include <sys/types.h>
#include <sys/sysctl.h>
#endif
/* The dot-product instruction (ARMv8.2 DotProd, sdot) per function: GCC >= 10 compiles it under
 * a target attribute whatever -march is; clang's arm_neon.h offers vdotq_s32 only when the whole
 * file targets it (__ARM_FEATURE_DOTPROD, e.g. Apple's default arm64 target), so without that
 * clang builds the "neon" level only. */
#if defined(__ARM_FEATURE_DOTPROD)
#define S2Q_DOTPROD 1
#define S2Q_DOTPROD_TARGET
#elif defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define S2Q_DOTPROD 1
#define S2Q_DOTPROD_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#define S2Q_INLINE static __forceinline
#else
#define S2Q_INLINE static inline __attribute__((always_inline))
#endif

#define QK 256
#define MAX_M 32 /* activation rows per call: 2 x common.MAX_KERNEL_ROWS (two planes) */

enum { T_Q4_K = 0, T_Q5_K = 1, T_Q6_K = 2, T_Q3_K = 3, T_Q2_K = 4, T_Q8_0 = 5, T_Q8_0_I16 = 6,
       N_TYPES = 7 };

/* Levels, weakest first (levels() lists those this CPU offers: level_offered): the x86 or the
 * ARM ones. x86's are not a chain: AVX-VNNI (VEX, 256-bit; Intel client CPUs since 2021, Zen 5)
 * comes without AVX-512 on most CPUs that have it, and AVX-512BW without any VNNI on others. */
#if defined(S2Q_X86)
enum { L_SCALAR = 0, L_AVX2 = 1, L_AVXVNNI = 2, L_AVX512 = 3, L_AVX512VNNI = 4, N_LEVELS = 5 };
static const char *LEVEL_NAMES[N_LEVELS] = {"scalar", "avx2", "avxvnni", "avx512bw", "avx512vnni"};
#elif defined(S2Q_ARM)
enum { L_SCALAR = 0, L_NEON = 1, L_DOTPROD = 2, N_LEVELS = 3 };
static const char *LEVEL_NAMES[N_LEVELS] = {"scalar", "neon", "dotprod"};
#else
enum { L_SCALAR = 0, N_LEVELS = 1 };
static const char *LEVEL_NAMES[N_LEVELS] = {"scalar"};
#endif
static int best_level = L_SCALAR;
static int level = L_SCALAR;
static int level_offered[N_LEVELS] = {1}; /* set by init_tables; the scalar level always */
#if defined(S2Q_X86) || !defined(S2Q_NO_PYTHON)
static int q8_tiled = 1; /* the register-tiled Q8_0 rows where a level has them (set_tiled) */
#endif

typedef struct {
    uint8_t u[QK];
    int16_t S[16];
    int16_t M[16];
    float d, cm;
} kblock;

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    float f;
    if (e == 0) {  /* zero or subnormal: m * 2^-24 */
        f = (float)m * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (e == 31) bits = sign | 0x7f800000u | (m << 13);
    else bits = sign | ((e + 112) << 23) | (m << 13);
    memcpy(&f, &bits, 4);
    return f;
}

S2Q_INLINE uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* ---- unpacking, one function per block type (plain loops: the compiler vectorizes them for
 * the ISA of the function they are inlined into) ---- */

S2Q_INLINE void k4_scales(const uint8_t *sc, kblock *k) {
    uint8_t s[8], mn[8];
    for (int j = 0; j < 4; j++) {
        s[j] = sc[j] & 63;
        mn[j] = sc[j + 4] & 63;
        s[j + 4] = (sc[j + 8] & 15) | ((sc[j] >> 6) << 4);
        mn[j + 4] = (sc[j + 8] >> 4) | ((sc[j + 4] >> 6) << 4);
    }
    for (int i = 0; i < 16; i++) {
        k->S[i] = s[i >> 1];
        k->M[i] = mn[i >> 1];
    }
}

S2Q_INLINE void unpack_q4_k(const uint8_t *b, kblock *k) {
    k->d = f16_to_f32(rd16(b));
    k->cm = -f16_to_f32(rd16(b + 2));
    k4_scales(b + 4, k);
    const uint8_t *q = b + 16;
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
            k->u[p * 64 + l] = q[p * 32 + l] & 15;
            k->u[p * 64 + 32 + l] = q[p * 32 + l] >> 4;
        }
}

S2Q_INLINE void unpack_q5_k(const uint8_t *b, kblock *k) {
    k->d = f16_to_f32(rd16(b));
    k->cm = -f16_to_f32(rd16(b + 2));
    k4_scales(b + 4, k);
    const uint8_t *qh = b + 16, *q = b + 48;
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
            k->u[p * 64 + l] = (uint8_t)((q[p * 32 + l] & 15) | (((qh[l] >> (2 * p)) & 1) << 4));
            k->u[p * 64 + 32 + l] = (uint8_t)((q[p * 32 + l] >> 4) | (((qh[l] >> (2 * p + 1)) & 1) << 4));
        }
}

S2Q_INLINE void unpack_q6_k(const uint8_t *b, kblock *k) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    k->d = f16_to_f32(rd16(b + 208));
    k->cm = -32.0f * k->d;
    for (int i = 0; i < 16; i++) k->S[i] = k->M[i] = sc[i];
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            uint8_t a = ql[h * 64 + l], c = ql[h * 64 + 32 + l], t = qh[h * 32 + l];
            k->u[h * 128 + l] = (uint8_t)((a & 15) | ((t & 3) << 4));
            k->u[h * 128 + 32 + l] = (uint8_t)((c & 15) | (((t >> 2) & 3) << 4));
            k->u[h * 128 + 64 + l] = (uint8_t)((a >> 4) | (((t >> 4) & 3) << 4));
            k->u[h * 128 + 96 + l] = (uint8_t)((c >> 4) | ((t >> 6) << 4));
        }
}

S2Q_INLINE void unpack_q3_k(const uint8_t *b, kblock *k) {
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    k->d = f16_to_f32(rd16(b + 108));
    k->cm = -4.0f * k->d;
    for (int i = 0; i < 4; i++) {
        uint8_t t = sc[8 + i];
        k->S[i] = (int16_t)(((sc[i] & 15) | ((t & 3) << 4)) - 32);
        k->S[4 + i] = (int16_t)(((sc[4 + i] & 15) | (((t >> 2) & 3) << 4)) - 32);
        k->S[8 + i] = (int16_t)(((sc[i] >> 4) | (((t >> 4) & 3) << 4)) - 32);
        k->S[12 + i] = (int16_t)(((sc[4 + i] >> 4) | ((t >> 6) << 4)) - 32);
    }
    for (int i = 0; i < 16; i++) k->M[i] = k->S[i];
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++)
                k->u[h * 128 + s * 32 + l] =
                    (uint8_t)(((qs[h * 32 + l] >> (2 * s)) & 3) | (((hm[l] >> (4 * h + s)) & 1) << 2));
}

S2Q_INLINE void unpack_q2_k(const uint8_t *b, kblock *k) {
    const uint8_t *sc = b, *qs = b + 16;
    k->d = f16_to_f32(rd16(b + 80));
    k->cm = -f16_to_f32(rd16(b + 82));
    for (int i = 0; i < 16; i++) {
        k->S[i] = sc[i] & 15;
        k->M[i] = sc[i] >> 4;
    }
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++)
                k->u[h * 128 + s * 32 + l] = (uint8_t)((qs[h * 32 + l] >> (2 * s)) & 3);
}

/* ---- block dot products per ISA. Each row keeps one float accumulator (vector) per
 * activation row, reduced once at the end of the row. ---- */

typedef struct { float v; } acc_scalar;

S2Q_INLINE void rows_scalar_block(const kblock *k, const int8_t *x, float dx, const int16_t *bs,
                                  acc_scalar *acc) {
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < 16; s++) {
        int32_t t = 0;
        for (int l = 0; l < 16; l++) t += (int32_t)k->u[s * 16 + l] * x[s * 16 + l];
        isum += k->S[s] * t;
        msum += k->M[s] * bs[s];
    }
    acc->v += dx * (k->d * (float)isum + k->cm * (float)msum);
}

#define DEFINE_SCALAR_ROWS(NAME, UNPACK, BB)                                                     \
    static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1,              \
                     const int8_t *xq, const float *xd, const int16_t *xbs, int64_t m,           \
                     int64_t cols, float *out, int64_t out_stride) {                             \
        int64_t nb = cols / QK;                                                                  \
        kblock k;                                                                                \
        for (int64_t r = r0; r < r1; r++) {                                                      \
            acc_scalar acc[MAX_M];                                                               \
            for (int64_t i = 0; i < m; i++) acc[i].v = 0.0f;                                     \
            for (int64_t b = 0; b < nb; b++) {                                                   \
                UNPACK(raw + r * row_bytes + b * BB, &k);                                        \
                for (int64_t i = 0; i < m; i++)                                                  \
                    rows_scalar_block(&k, xq + i * cols + b * QK, xd[i * nb + b],                \
                                      xbs + (i * nb + b) * 16, &acc[i]);                         \
            }                                                                                    \
            for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = acc[i].v;                  \
        }                                                                                        \
    }

DEFINE_SCALAR_ROWS(rows_q4_k_scalar, unpack_q4_k, 144)
DEFINE_SCALAR_ROWS(rows_q5_k_scalar, unpack_q5_k, 176)
DEFINE_SCALAR_ROWS(rows_q6_k_scalar, unpack_q6_k, 210)
DEFINE_SCALAR_ROWS(rows_q3_k_scalar, unpack_q3_k, 110)
DEFINE_SCALAR_ROWS(rows_q2_k_scalar, unpack_q2_k, 84)

/* Q8_0: 34-byte blocks of float16 d and 32 int8 q (weight = d * q): the int8 weights multiply
 * the int8 activations directly. The activations keep one scale dx per 256 values, so a row is
 * a sum over 256-value chunks (8 weight blocks) of dx * sum_j d_j * (integer dot of block j).
 * Matrices whose cols are not a multiple of 256 (tiny test models): the caller pads the
 * activations with zeros to a multiple of 256, so `cols` is the activations' row stride and
 * the number of weight blocks comes from row_bytes; the last chunk then has fewer blocks.
 * Per activation row the float operations are the same whatever m is (each row has its own
 * accumulators and the loops over blocks do not depend on m): a row computed among m rows is
 * bit-identical to it computed alone, which batching relies on. */
#define Q8_BB 34
#define Q8_PER_CHUNK (QK / 32)
/* The x86 rows prefetch the blocks Q8_PF_BYTES ahead (the rows of a call are contiguous): with
 * several activation rows a weight row takes long enough that the hardware prefetcher alone
 * left the kernel waiting on memory (measured, 9728x2560, one thread, 4 rows: 6.8 ms without,
 * ~3 ms with). */
#ifndef Q8_PF_BYTES
#define Q8_PF_BYTES 4096
#endif

static void rows_q8_0_scalar(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1,
                             const int8_t *xq, const float *xd, const int16_t *xbs, int64_t m,
                             int64_t cols, float *out, int64_t out_stride) {
    (void)xbs;
    int64_t nb = row_bytes / Q8_BB, nc = cols / QK;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = raw + r * row_bytes;
        float acc[MAX_M], t[MAX_M];
        for (int64_t i = 0; i < m; i++) acc[i] = 0.0f;
        for (int64_t c = 0; c < nc; c++) {
            int64_t j1 = nb < (c + 1) * Q8_PER_CHUNK ? nb : (c + 1) * Q8_PER_CHUNK;
            for (int64_t i = 0; i < m; i++) t[i] = 0.0f;
            for (int64_t j = c * Q8_PER_CHUNK; j < j1; j++) {
                const uint8_t *blk = row + j * Q8_BB;
                const int8_t *w = (const int8_t *)(blk + 2);
                float d = f16_to_f32(rd16(blk));
                for (int64_t i = 0; i < m; i++) {
                    const int8_t *x = xq + i * cols + j * 32;
                    int32_t s = 0;
                    for (int l = 0; l < 32; l++) s += (int32_t)w[l] * x[l];
                    t[i] += (float)s * d;
                }
            }
            for (int64_t i = 0; i < m; i++) acc[i] += t[i] * xd[i * nc + c];
        }
        for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = acc[i];
    }
}

/* Q8_0 against int16 activations (the precise mode, what two int8 planes are for the
 * K-quants): x quantized per 256 values to q = round(x * 32767 / max|x|), so each value is off
 * by at most 1/65534 of its chunk's largest magnitude (two int8 planes: 1/64516 at worst).
 * For Q8_0 this is cheaper than two planes: the weights are widened to int16 once per block
 * (shared by all activation rows) and vpmaddwd multiplies 32 pairs per 512 bits with no sign
 * handling per row, where two int8 planes cost two sign fixes and two dot products per row.
 * Exact integers throughout: a pair of products is at most 2 * 128 * 32767 < 2^24, so the
 * int32 lanes convert to float exactly. Same chunk structure as the int8 rows above. */
/* I16_LAYOUT: the int16 activations of weight blocks 2g and 2g+1 (64 values) are stored as
 * [2g: 0-15, 2g+1: 0-15, 2g: 16-31, 2g+1: 16-31], so that one 512-bit vpmaddwd yields 8 int32
 * lanes for each of the two blocks and a pair costs one int->float conversion and one FMA.
 * Value l of block j is at I16_AT(j, l). */
#define I16_AT(j, l) (((j) >> 1) * 64 + ((l) >> 4) * 32 + ((j) & 1) * 16 + ((l) & 15))

static void rows_q8_0_i16_scalar(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1,
                                 const int8_t *xq8, const float *xd, const int16_t *xbs, int64_t m,
                                 int64_t cols, float *out, int64_t out_stride) {
    (void)xbs;
    const int16_t *xq = (const int16_t *)xq8;
    int64_t nb = row_bytes / Q8_BB, nc = cols / QK;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = raw + r * row_bytes;
        float acc[MAX_M], t[MAX_M];
        for (int64_t i = 0; i < m; i++) acc[i] = 0.0f;
        for (int64_t c = 0; c < nc; c++) {
            int64_t j1 = nb < (c + 1) * Q8_PER_CHUNK ? nb : (c + 1) * Q8_PER_CHUNK;
            for (int64_t i = 0; i < m; i++) t[i] = 0.0f;
            for (int64_t j = c * Q8_PER_CHUNK; j < j1; j++) {
                const uint8_t *blk = row + j * Q8_BB;
                const int8_t *w = (const int8_t *)(blk + 2);
                float d = f16_to_f32(rd16(blk));
                for (int64_t i = 0; i < m; i++) {
                    const int16_t *x = xq + i * cols;
                    int32_t s = 0;
                    for (int l = 0; l < 32; l++) s += (int32_t)w[l] * x[I16_AT(j, l)];
                    t[i] += (float)s * d;
                }
            }
            for (int64_t i = 0; i < m; i++) acc[i] += t[i] * xd[i * nc + c];
        }
        for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = acc[i];
    }
}

typedef void (*rows_fn)(const uint8_t *, int64_t, int64_t, int64_t, const int8_t *, const float *,
                        const int16_t *, int64_t, int64_t, float *, int64_t);

static rows_fn ROWS[N_LEVELS][N_TYPES] = {
    {rows_q4_k_scalar, rows_q5_k_scalar, rows_q6_k_scalar, rows_q3_k_scalar, rows_q2_k_scalar,
     rows_q8_0_scalar, rows_q8_0_i16_scalar}};

#ifdef S2Q_X86

#define AVX2_T "avx2,fma,f16c"
/* float16 -> float32 by the F16C instruction (every AVX2 CPU has it; checked at dispatch) */
#define F16(p) _cvtsh_ss(rd16(p))

/* A row's 8 float lanes summed, always in this order (the last step of every row function, so
 * a row's result does not depend on the path's other work or on how many rows there are). */
S2Q_TARGET(AVX2_T) S2Q_INLINE float hsum256(__m256 a) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* Unpacking into registers (AVX2: u = 8 x 32 weights in element order; AVX-512: 4 x 64, built
 * at 512 bits directly, below). Writing the bytes to memory and loading them back as vectors
 * stalls on store forwarding; so on x86 each type has an unpacking in intrinsics. Shifts are
 * 16-bit (x86 has no byte shifts); the masks drop the bits that cross into the next byte.
 * Measured on a Sapphire Rapids core (1 thread, in cache, 2 activation rows): building the
 * AVX-512 operands from 256-bit halves (vinserti64x4, a vpermw per chunk for the scales) cost
 * a quarter (2 rows) to a third (1 row) of the Q4_K row's time. */
#define V(p) _mm256_loadu_si256((const __m256i *)(p))
#define SRL(v, n) _mm256_srl_epi16(v, _mm_cvtsi32_si128(n))

S2Q_INLINE uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#define X_ARGS const uint8_t *b, float *d, float *cm, __m256i *S, __m256i *M, __m256i u[8]

/* Q5_K's 5-bit values (its scales: y_k4_head, shared with Q4_K) */
S2Q_TARGET(AVX2_T) S2Q_INLINE void x_q5_k_values(const uint8_t *b, __m256i u[8]) {
    const __m256i lo4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    __m256i qh = V(b + 16);
    for (int p = 0; p < 4; p++) {
        __m256i q = V(b + 48 + 32 * p);
        /* bit 2p (2p+1) of qh -> bit 4, then mask bit 4 */
        __m256i h0 = 2 * p <= 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - 2 * p)) : SRL(qh, 2 * p - 4);
        __m256i h1 = 2 * p + 1 <= 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(3 - 2 * p)) : SRL(qh, 2 * p - 3);
        u[2 * p] = _mm256_or_si256(_mm256_and_si256(q, lo4), _mm256_and_si256(h0, b4));
        u[2 * p + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), lo4), _mm256_and_si256(h1, b4));
    }
}

S2Q_TARGET(AVX2_T) S2Q_INLINE void x_q6_k(X_ARGS) {
    *d = F16(b + 208);
    *cm = -32.0f * *d;
    *S = *M = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
    const __m256i lo4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        __m256i a = V(b + 64 * h), c = V(b + 64 * h + 32), t = V(b + 128 + 32 * h);
        u[4 * h] = _mm256_or_si256(_mm256_and_si256(a, lo4), _mm256_and_si256(_mm256_slli_epi16(t, 4), m30));
        u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(c, lo4), _mm256_and_si256(_mm256_slli_epi16(t, 2), m30));
        u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), lo4), _mm256_and_si256(t, m30));
        u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), lo4),
                                       _mm256_and_si256(_mm256_srli_epi16(t, 2), m30));
    }
}

/* Q3_K's 16 6-bit scales minus 32, as int16 */
S2Q_TARGET(AVX2_T) S2Q_INLINE __m256i q3_scales(const uint8_t *sc) {
    uint32_t a0 = rd32(sc), a1 = rd32(sc + 4), t = rd32(sc + 8);
    const uint32_t m4 = 0x0F0F0F0Fu, m2 = 0x03030303u;
    __m128i sv = _mm_set_epi32((int)(((a1 >> 4) & m4) | (((t >> 6) & m2) << 4)),
                               (int)(((a0 >> 4) & m4) | (((t >> 4) & m2) << 4)),
                               (int)((a1 & m4) | (((t >> 2) & m2) << 4)), (int)((a0 & m4) | ((t & m2) << 4)));
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(sv), _mm256_set1_epi16(32));
}

S2Q_TARGET(AVX2_T) S2Q_INLINE void x_q3_k(X_ARGS) {
    *d = F16(b + 108);
    *cm = -4.0f * *d;
    *S = *M = q3_scales(b + 96);
    const __m256i m3 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
    __m256i hm = V(b);
    for (int h = 0; h < 2; h++) {
        __m256i q = V(b + 32 + 32 * h);
        for (int s = 0; s < 4; s++) {
            int hb = 4 * h + s; /* hmask bit -> bit 2 */
            __m256i hh = hb <= 2 ? _mm256_sll_epi16(hm, _mm_cvtsi32_si128(2 - hb)) : SRL(hm, hb - 2);
            u[4 * h + s] = _mm256_or_si256(_mm256_and_si256(SRL(q, 2 * s), m3), _mm256_and_si256(hh, b2));
        }
    }
}

S2Q_TARGET(AVX2_T) S2Q_INLINE void x_q2_k(X_ARGS) {
    *d = F16(b + 80);
    *cm = -F16(b + 82);
    __m128i sc = _mm_loadu_si128((const __m128i *)b), lo4 = _mm_set1_epi8(15);
    *S = _mm256_cvtepu8_epi16(_mm_and_si128(sc, lo4));
    *M = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), lo4));
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        __m256i q = V(b + 16 + 32 * h);
        for (int s = 0; s < 4; s++) u[4 * h + s] = _mm256_and_si256(SRL(q, 2 * s), m3);
    }
}

/* Software prefetch of the blocks K_PF_BYTES ahead, every 64-byte line of them (the rows of a
 * call are contiguous, so this runs on into the next rows): as for Q8_0 (Q8_PF_BYTES), the
 * hardware prefetcher alone leaves the rows waiting on memory. 0 turns it off (to measure). */
#ifndef K_PF_BYTES
#define K_PF_BYTES 4096
#endif
#if K_PF_BYTES > 0
#define K_PREFETCH(blk, BB)                                                                      \
    for (int o_ = 0; o_ < (BB); o_ += 64) _mm_prefetch((const char *)(blk) + K_PF_BYTES + o_, _MM_HINT_T0)
#else
#define K_PREFETCH(blk, BB) ((void)0)
#endif

/* The operands of the AVX2 rows from the generic unpacking: sc[c] holds the int16 scales of
 * chunk c of 32 weights, S[2c] in the low 128-bit lane, S[2c+1] in the high one. */
#define DEFINE_Y_UNPACK(YNAME, XNAME)                                                            \
    S2Q_TARGET(AVX2_T) S2Q_INLINE void YNAME(const uint8_t *b, __m256i pick, float *d, float *cm, \
                                             __m256i *M, __m256i sc[8], __m256i u[8]) {          \
        __m256i S;                                                                               \
        XNAME(b, d, cm, &S, M, u);                                                               \
        for (int c = 0; c < 8; c++)                                                              \
            sc[c] = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(S, _mm256_set1_epi32(c)), pick); \
    }

DEFINE_Y_UNPACK(y_q6_k, x_q6_k)
DEFINE_Y_UNPACK(y_q3_k, x_q3_k)
DEFINE_Y_UNPACK(y_q2_k, x_q2_k)

/* Q4_K/Q5_K's own: their 8 scales and 8 mins as bytes in two 64-bit integers, from which each
 * vector is one vpshufb (one scale per 32 weights: the generic route's 16 int16 scales cost two
 * shuffles per chunk of 32); d and dmin converted together. Same values in the same lanes. */
S2Q_TARGET(AVX2_T) S2Q_INLINE void k4_scale_bytes(const uint8_t *sc, uint64_t *s, uint64_t *mn) {
    uint32_t u0 = rd32(sc), u1 = rd32(sc + 4), u2 = rd32(sc + 8);
    const uint32_t m6 = 0x3F3F3F3Fu, m4 = 0x0F0F0F0Fu, m2 = 0x30303030u;
    uint32_t s0 = u0 & m6, s1 = (u2 & m4) | ((u0 >> 2) & m2);         /* sc0..3, sc4..7 */
    uint32_t n0 = u1 & m6, n1 = ((u2 >> 4) & m4) | ((u1 >> 2) & m2);  /* m0..3, m4..7 */
    *s = (uint64_t)s1 << 32 | s0;
    *mn = (uint64_t)n1 << 32 | n0;
}

S2Q_TARGET(AVX2_T) S2Q_INLINE void k4_d_dmin(const uint8_t *b, float *d, float *cm) {
    __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)rd32(b)));
    *d = _mm_cvtss_f32(dd);
    *cm = -_mm_cvtss_f32(_mm_movehdup_ps(dd));
}

/* the 16 mins as int16, each twice (one per 16 weights), from their 8 bytes */
S2Q_TARGET(AVX2_T) S2Q_INLINE __m256i k4_mins(uint64_t mn) {
    const __m256i twice = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
                                           4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    return _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)mn), twice);
}

/* Q4_K/Q5_K: d, dmin, the mins and chunk c's scale vector (s[c] in every int16 lane) */
S2Q_TARGET(AVX2_T) S2Q_INLINE void y_k4_head(const uint8_t *b, float *d, float *cm, __m256i *M, __m256i sc[8]) {
    uint64_t s, mn;
    k4_d_dmin(b, d, cm);
    k4_scale_bytes(b + 4, &s, &mn);
    *M = k4_mins(mn);
    __m256i sv = _mm256_set1_epi64x((long long)s);
    for (int c = 0; c < 8; c++)  /* int16 lanes: low byte scale c, high byte zero (index -1) */
        sc[c] = _mm256_shuffle_epi8(sv, _mm256_set1_epi16((short)(0xFF00 | c)));
}

S2Q_TARGET(AVX2_T) S2Q_INLINE void y_q5_k(const uint8_t *b, __m256i pick, float *d, float *cm, __m256i *M,
                                          __m256i sc[8], __m256i u[8]) {
    (void)pick;
    y_k4_head(b, d, cm, M, sc);
    x_q5_k_values(b, u);
}

S2Q_TARGET(AVX2_T) S2Q_INLINE void y_q4_k(const uint8_t *b, __m256i pick, float *d, float *cm, __m256i *M,
                                          __m256i sc[8], __m256i u[8]) {
    (void)pick;
    y_k4_head(b, d, cm, M, sc);
    const __m256i lo4 = _mm256_set1_epi8(15);
    for (int p = 0; p < 4; p++) {
        __m256i q = V(b + 16 + 32 * p);
        u[2 * p] = _mm256_and_si256(q, lo4);
        u[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
    }
}

/* AVX-512 operands, unpacked straight into 512-bit registers: 4 chunks u[c] of 64 weights
 * (element order) and their scales sc[c], int16 lane j of chunk c holding S[4c + j/8] (the scale
 * of the pair of products in that lane), and the 16 mins M. */
#define AVX512_T "avx2,fma,f16c,avx512f,avx512bw,avx512vl"
#define AVX512VNNI_T "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"

/* Q4_K/Q5_K scales at 512 bits: chunk c's are s[2c] in the low half, s[2c+1] in the high, one
 * vpshufb each from the 8 scale bytes. */
S2Q_TARGET(AVX512_T) S2Q_INLINE void k4_scales512(uint64_t s, __m512i sc[4]) {
    __m512i sv = _mm512_set1_epi64((long long)s);
    for (int c = 0; c < 4; c++)
        sc[c] = _mm512_shuffle_epi8(sv, _mm512_inserti64x4(_mm512_set1_epi16((short)(0xFF00 | (2 * c))),
                                                           _mm256_set1_epi16((short)(0xFF00 | (2 * c + 1))), 1));
}

/* per-half constants of the 512-bit unpacking: lo in the low 256 bits, hi in the high */
#define HALVES16(lo, hi) _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1)
#define HALVES8(lo, hi) _mm512_inserti64x4(_mm512_set1_epi8(lo), _mm256_set1_epi8(hi), 1)

/* Q4_K at 512 bits: chunk c is the 32 bytes q_c's low nibbles (weights 64c..64c+31) then their
 * high nibbles: q_c broadcast to both halves (a load), shifted by 0 / 4 per half, masked. Its
 * scales: s[2c] in the low half, s[2c+1] in the high, one vpshufb of the 8 scale bytes. */
S2Q_TARGET(AVX512_T) S2Q_INLINE void z_q4_k(const uint8_t *b, const __m512i *idx, float *d, float *cm,
                                            __m256i *M, __m512i sc[4], __m512i u[4]) {
    (void)idx;
    uint64_t s, mn;
    k4_d_dmin(b, d, cm);
    k4_scale_bytes(b + 4, &s, &mn);
    *M = k4_mins(mn);
    k4_scales512(s, sc);
    const __m512i lo4 = _mm512_set1_epi8(15);
    const __m512i shift = HALVES16(0, 4);
    for (int c = 0; c < 4; c++) {
        __m512i q = _mm512_broadcast_i64x4(V(b + 16 + 32 * c));
        u[c] = _mm512_and_si512(_mm512_srlv_epi16(q, shift), lo4);
    }
}

/* Q6_K at 512 bits: chunk 2h is the 64 bytes ql[64h..] as they lie (low nibbles: weights
 * 128h..128h+63) and chunk 2h+1 their high nibbles; the two high bits come from the 32 bytes
 * qh[32h..] broadcast to both halves, each half shifted to bring its 2-bit field to bits 4-5. */
S2Q_TARGET(AVX512_T) S2Q_INLINE void z_q6_k(const uint8_t *b, const __m512i *idx, float *d, float *cm,
                                            __m256i *M, __m512i sc[4], __m512i u[4]) {
    *d = F16(b + 208);
    *cm = -32.0f * *d;
    *M = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
    __m512i S = _mm512_castsi256_si512(*M);
    for (int c = 0; c < 4; c++) sc[c] = _mm512_permutexvar_epi16(idx[c], S);
    const __m512i lo4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    /* qh bits 0-1 (2-3) -> 4-5 in the low (high) half of chunk 2h; bits 4-5 (6-7) in chunk 2h+1 */
    const __m512i up = HALVES16(4, 2), down = HALVES16(0, 2);
    for (int h = 0; h < 2; h++) {
        __m512i a = _mm512_loadu_si512((const void *)(b + 64 * h));
        __m512i t = _mm512_broadcast_i64x4(V(b + 128 + 32 * h));
        u[2 * h] = _mm512_or_si512(_mm512_and_si512(a, lo4), _mm512_and_si512(_mm512_sllv_epi16(t, up), m30));
        u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), lo4),
                                       _mm512_and_si512(_mm512_srlv_epi16(t, down), m30));
    }
}

/* Q5_K at 512 bits: Q4_K's nibbles, plus 16 where the weight's bit in qh is set (chunk c: bit
 * 2c in the low half, 2c+1 in the high; vptestmb + a masked add). */
S2Q_TARGET(AVX512_T) S2Q_INLINE void z_q5_k(const uint8_t *b, const __m512i *idx, float *d, float *cm,
                                            __m256i *M, __m512i sc[4], __m512i u[4]) {
    (void)idx;
    uint64_t s, mn;
    k4_d_dmin(b, d, cm);
    k4_scale_bytes(b + 4, &s, &mn);
    *M = k4_mins(mn);
    k4_scales512(s, sc);
    const __m512i lo4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16), shift = HALVES16(0, 4);
    __m512i qh = _mm512_broadcast_i64x4(V(b + 16));
    for (int c = 0; c < 4; c++) {
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(V(b + 48 + 32 * c)), shift), lo4);
        __mmask64 hi = _mm512_test_epi8_mask(qh, HALVES8((char)(1 << (2 * c)), (char)(1 << (2 * c + 1))));
        u[c] = _mm512_mask_add_epi8(q, hi, q, b4);
    }
}

/* Q3_K at 512 bits: chunk c holds the 2-bit fields 2(c%2) and 2(c%2)+1 (one per half) of the
 * 32 bytes qs[32(c/2)..], plus 4 where the weight's hmask bit (4(c/2) + field) is set. */
S2Q_TARGET(AVX512_T) S2Q_INLINE void z_q3_k(const uint8_t *b, const __m512i *idx, float *d, float *cm,
                                            __m256i *M, __m512i sc[4], __m512i u[4]) {
    *d = F16(b + 108);
    *cm = -4.0f * *d;
    *M = q3_scales(b + 96);
    __m512i S = _mm512_castsi256_si512(*M);
    for (int c = 0; c < 4; c++) sc[c] = _mm512_permutexvar_epi16(idx[c], S);
    const __m512i m3 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4);
    const __m512i shift[2] = {HALVES16(0, 2), HALVES16(4, 6)};
    __m512i hm = _mm512_broadcast_i64x4(V(b));
    for (int c = 0; c < 4; c++) {
        int f = 4 * (c >> 1) + 2 * (c & 1); /* hmask bit of the low half's field */
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(V(b + 32 + 32 * (c >> 1))),
                                                       shift[c & 1]), m3);
        __mmask64 hi = _mm512_test_epi8_mask(hm, HALVES8((char)(1 << f), (char)(1 << (f + 1))));
        u[c] = _mm512_mask_add_epi8(q, hi, q, b2);
    }
}

/* Q2_K at 512 bits: as Q3_K's 2-bit fields, without the high bit. */
S2Q_TARGET(AVX512_T) S2Q_INLINE void z_q2_k(const uint8_t *b, const __m512i *idx, float *d, float *cm,
                                            __m256i *M, __m512i sc[4], __m512i u[4]) {
    *d = F16(b + 80);
    *cm = -F16(b + 82);
    __m128i scb = _mm_loadu_si128((const __m128i *)b), lo4 = _mm_set1_epi8(15);
    __m512i S = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(scb, lo4)));
    *M = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), lo4));
    for (int c = 0; c < 4; c++) sc[c] = _mm512_permutexvar_epi16(idx[c], S);
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i shift[2] = {HALVES16(0, 2), HALVES16(4, 6)};
    for (int c = 0; c < 4; c++)
        u[c] = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(V(b + 16 + 32 * (c >> 1))), shift[c & 1]),
                                m3);
}

/* AVX2: 8 chunks of 32 weights; chunk c covers scales 2c (low 128-bit lane of the int16
 * products) and 2c+1 (high lane). */

#define DEFINE_AVX2_ROWS(NAME, UNPACK, BB, TARGET, MADD_ADD)                                               \
    S2Q_TARGET(TARGET) S2Q_INLINE void NAME##_m(const uint8_t *raw, int64_t row_bytes, int64_t r0,      \
                                        int64_t r1, const int8_t *xq, const float *xd,           \
                                        const int16_t *xbs, const int64_t m, int64_t cols,       \
                                        float *out, int64_t out_stride) {                                    \
        int64_t nb = cols / QK;                                                                  \
        /* bytes 0,1 of each 32-bit lane repeated in the low 128 bits, bytes 2,3 in the high */ \
        const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,     \
                                              2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);    \
        for (int64_t r = r0; r < r1; r++) {                                                      \
            __m256 acc[MAX_M];                                                                   \
            for (int64_t i = 0; i < m; i++) acc[i] = _mm256_setzero_ps();                        \
            for (int64_t b = 0; b < nb; b++) {                                                   \
                __m256i sc[8], u[8], M;                                                          \
                float kd, kcm;                                                                   \
                const uint8_t *blk = raw + r * row_bytes + b * BB;                               \
                K_PREFETCH(blk, BB);                                                             \
                UNPACK(blk, pick, &kd, &kcm, &M, sc, u);                                         \
                for (int64_t i = 0; i < m; i++) {                                                \
                    const int8_t *x = xq + i * cols + b * QK;                                    \
                    __m256i isum = _mm256_setzero_si256();                                       \
                    for (int c = 0; c < 8; c++) {                                                \
                        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + 32 * c));          \
                        isum = MADD_ADD(isum, _mm256_maddubs_epi16(u[c], xv), sc[c]);            \
                    }                                                                            \
                    __m256i ms = _mm256_madd_epi16(                                              \
                        M, _mm256_loadu_si256((const __m256i *)(xbs + (i * nb + b) * 16)));      \
                    float dx = xd[i * nb + b];                                                   \
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dx * kd), \
                                             acc[i]);                                            \
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(dx * kcm),  \
                                             acc[i]);                                            \
                }                                                                                \
            }                                                                                    \
            for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = hsum256(acc[i]);           \
        }                                                                                        \
    }                                                                                        \
    /* m = 1, 2, 4 and 8 (one row, or one in two planes: every decode step; 2-4 requests      \
     * batched) get their own copies: with m constant the accumulators stay in registers. */   \
    S2Q_TARGET(TARGET) static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1, \
                                       const int8_t *xq, const float *xd, const int16_t *xbs,   \
                                       int64_t m, int64_t cols, float *out, int64_t out_stride) { \
        if (m == 1)                                                                              \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, 1, cols, out, out_stride);            \
        else if (m == 2)                                                                         \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, 2, cols, out, out_stride);            \
        else if (m == 4)                                                                         \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, 4, cols, out, out_stride);            \
        else if (m == 8)                                                                         \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, 8, cols, out, out_stride);            \
        else                                                                                     \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, m, cols, out, out_stride);            \
    }

/* The int16 products p (pairs of u*x, from vpmaddubsw) times the scales s, summed into acc:
 * vpmaddwd + vpaddd on AVX2; one vpdpwssd with VNNI at 256 bits, VEX-encoded (AVX-VNNI) or
 * EVEX-encoded (AVX-512 VNNI + VL: the same instruction's 256-bit form, so that CPUs with
 * AVX-512 can run the avxvnni level when it is forced, and the tests check it there). The same
 * integers either way (no sum comes near int32's range), hence the same floats as AVX2's. */
#define MADD_ADD_AVX2(acc, p, s) _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
#define MADD_ADD_AVXVNNI(acc, p, s) _mm256_dpwssd_avx_epi32(acc, p, s)
#define MADD_ADD_VNNI256(acc, p, s) _mm256_dpwssd_epi32(acc, p, s)
#define AVXVNNI_T "avx2,fma,f16c,avxvnni"
#define VNNI256_T "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"

DEFINE_AVX2_ROWS(rows_q4_k_avx2, y_q4_k, 144, AVX2_T, MADD_ADD_AVX2)
DEFINE_AVX2_ROWS(rows_q5_k_avx2, y_q5_k, 176, AVX2_T, MADD_ADD_AVX2)
DEFINE_AVX2_ROWS(rows_q6_k_avx2, y_q6_k, 210, AVX2_T, MADD_ADD_AVX2)
DEFINE_AVX2_ROWS(rows_q3_k_avx2, y_q3_k, 110, AVX2_T, MADD_ADD_AVX2)
DEFINE_AVX2_ROWS(rows_q2_k_avx2, y_q2_k, 84, AVX2_T, MADD_ADD_AVX2)
DEFINE_AVX2_ROWS(rows_q4_k_avxvnni, y_q4_k, 144, AVXVNNI_T, MADD_ADD_AVXVNNI)
DEFINE_AVX2_ROWS(rows_q5_k_avxvnni, y_q5_k, 176, AVXVNNI_T, MADD_ADD_AVXVNNI)
DEFINE_AVX2_ROWS(rows_q6_k_avxvnni, y_q6_k, 210, AVXVNNI_T, MADD_ADD_AVXVNNI)
DEFINE_AVX2_ROWS(rows_q3_k_avxvnni, y_q3_k, 110, AVXVNNI_T, MADD_ADD_AVXVNNI)
DEFINE_AVX2_ROWS(rows_q2_k_avxvnni, y_q2_k, 84, AVXVNNI_T, MADD_ADD_AVXVNNI)
DEFINE_AVX2_ROWS(rows_q4_k_vnni256, y_q4_k, 144, VNNI256_T, MADD_ADD_VNNI256)
DEFINE_AVX2_ROWS(rows_q5_k_vnni256, y_q5_k, 176, VNNI256_T, MADD_ADD_VNNI256)
DEFINE_AVX2_ROWS(rows_q6_k_vnni256, y_q6_k, 210, VNNI256_T, MADD_ADD_VNNI256)
DEFINE_AVX2_ROWS(rows_q3_k_vnni256, y_q3_k, 110, VNNI256_T, MADD_ADD_VNNI256)
DEFINE_AVX2_ROWS(rows_q2_k_vnni256, y_q2_k, 84, VNNI256_T, MADD_ADD_VNNI256)

/* Copies for m = 1, 2 (one request, in one or two planes) and 4, 8 (a few batched requests):
 * with m constant the accumulators stay in registers. Same code, so the same float operations
 * per row as the general copy. */
#define Q8_DISPATCH(BODY)                                                                        \
    if (m == 1) BODY(raw, row_bytes, r0, r1, xq, xd, 1, cols, out, out_stride);                 \
    else if (m == 2) BODY(raw, row_bytes, r0, r1, xq, xd, 2, cols, out, out_stride);            \
    else if (m == 4) BODY(raw, row_bytes, r0, r1, xq, xd, 4, cols, out, out_stride);            \
    else if (m == 8) BODY(raw, row_bytes, r0, r1, xq, xd, 8, cols, out, out_stride);            \
    else BODY(raw, row_bytes, r0, r1, xq, xd, m, cols, out, out_stride);

/* Register-tiled Q8_0 rows (the prefill's 16-row calls and batched decode). The per-row loops
 * below (NAME##_1) re-load every activation vector from L1 for each weight row and, where m is
 * not one of their constant copies (1, 2, 4, 8), keep their float accumulators in memory. A tile
 * (NAME##_tile) computes TR weight rows x TM activation rows with every accumulator in a
 * register: each loaded activation vector serves TR weight rows, each prepared weight block
 * (widened, or |w| and its signs, and its scale) TM activation rows. Per (weight row, activation
 * row) a tile does exactly the per-row loops' operations in their order (the same integer dot
 * per block or block pair, t = fma(cvt(p), d, t) over the chunk's blocks in order, acc = fma(t,
 * dx, acc) per chunk, the same horizontal sum at the end), so the outputs are bit-identical to
 * them (tests/engine/test_intdot_tiles.py), and a row among others still equals it alone.
 * Measured (benchmarks/bench_int_rows.py, docs/performance.md): the AVX-512 int16 rows at m = 16
 * went from ~40 to ~57 GMAC/s per core on Zen 4, the rate the per-row loops reach only at m = 4;
 * the tile's shape mattered little (1x8, 2x4 to 4x4 within noise): past the re-loads, the
 * multiply, convert and FMA instructions themselves are the limit (Zen 4 runs 512-bit ones at
 * half rate). AVX2 has 16 vector registers: 1 x 4 there, no spills.
 *
 * q8_tiled = 0 (set_tiled(False): tests, benchmarks) runs the per-row loops for every m.
 *
 * Which m the tiles take (measured: see above): the AVX-512 int16 rows from 3 on (at m = 4 and 8
 * the tile equals or beats the constant copies), the others only where the per-row loops have no
 * constant copy (m = 3, 5-7, 9-16: at 4 and 8 the copies were as fast or faster). m = 1, 2 (one
 * decode request) always run the per-row loops. */
#define Q8_TILE_FROM_3(m) ((m) >= 3)
#define Q8_TILE_NOT_A_COPY(m) ((m) != 1 && (m) != 2 && (m) != 4 && (m) != 8)

/* One tile function (NAME##_tile: TR x TM at most; RB x IB of them this call), shared by the
 * levels: VW the vector width (256 or 512), STEP the blocks per step (1, or 2: a block pair in a
 * 512-bit register). Per step, for each of the RB weight rows, WPREP(k, blk, two) prepares its
 * block(s) into the arrays WDECL(TR) declares (blk: the row's block, two: a second block
 * follows in the chunk); then XDOT(i, DOT) adds activation row i's products with every
 * prepared row into t[k][i]. The skeleton around them (the accumulators, the chunk loop with
 * its activation scale, the prefetch of the next tile's rows, the horizontal sums) is the per-row
 * loops' order, which is what keeps the outputs bit-identical to them. */
#define DEFINE_Q8_TILE_FN(NAME, TARGET, XT, VW, STEP, DOT, TR, TM, WDECL, WPREP, XDOT)                   \
    S2Q_TARGET(TARGET) S2Q_INLINE void NAME##_tile(const uint8_t *row0, int64_t row_bytes, const XT *xq, \
                                                   const float *xd, int64_t cols, const int RB, const int IB, \
                                                   int prefetch, float *out, int64_t out_stride) {   \
        int64_t nb = row_bytes / Q8_BB, nc = cols / QK;                                              \
        __m##VW acc[TR][TM], t[TR][TM];                                                              \
        for (int k = 0; k < RB; k++)                                                                 \
            for (int i = 0; i < IB; i++) acc[k][i] = _mm##VW##_setzero_ps();                         \
        for (int64_t c = 0; c < nc; c++) {                                                           \
            int64_t j1 = nb < (c + 1) * Q8_PER_CHUNK ? nb : (c + 1) * Q8_PER_CHUNK;                  \
            for (int k = 0; k < RB; k++)                                                             \
                for (int i = 0; i < IB; i++) t[k][i] = _mm##VW##_setzero_ps();                       \
            for (int64_t j = c * Q8_PER_CHUNK; j < j1; j += STEP) {                                  \
                int two = j + 1 < j1;                                                                \
                (void)two;                                                                           \
                WDECL(TR)                                                                            \
                for (int k = 0; k < RB; k++) {                                                       \
                    const uint8_t *blk = row0 + k * row_bytes + j * Q8_BB;                           \
                    /* the next tile's rows, once per tile (the first activation group) */          \
                    if (prefetch) _mm_prefetch((const char *)(blk + RB * row_bytes), _MM_HINT_T0);   \
                    WPREP(k, blk, two)                                                               \
                }                                                                                    \
                for (int i = 0; i < IB; i++) {                                                       \
                    XDOT(i, DOT)                                                                     \
                }                                                                                    \
            }                                                                                        \
            for (int i = 0; i < IB; i++) {                                                           \
                __m##VW dx = _mm##VW##_set1_ps(xd[i * nc + c]);                                      \
                for (int k = 0; k < RB; k++) acc[k][i] = _mm##VW##_fmadd_ps(t[k][i], dx, acc[k][i]); \
            }                                                                                        \
        }                                                                                            \
        for (int k = 0; k < RB; k++)                                                                 \
            for (int i = 0; i < IB; i++) out[i * out_stride + k] = hsum##VW(acc[k][i]);              \
    }

/* NAME: the row function over rows [r0, r1): tiles of TR x TM, then a tile of the m % TM
 * activation rows left (of their own constant height), the rows left over (fewer than TR) by
 * the per-row loops. XT: the activations' integer type; WHEN(m): whether m rows take tiles. */
#define DEFINE_Q8_TILED(NAME, TARGET, XT, TR, TM, WHEN)                                          \
    S2Q_TARGET(TARGET) static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1, \
                                        const int8_t *xq8, const float *xd, const int16_t *xbs,  \
                                        int64_t m, int64_t cols, float *out, int64_t out_stride) { \
        if (!q8_tiled || !WHEN(m)) {                                                             \
            NAME##_1(raw, row_bytes, r0, r1, xq8, xd, xbs, m, cols, out, out_stride);            \
            return;                                                                              \
        }                                                                                        \
        const XT *xq = (const XT *)xq8;                                                          \
        int64_t nc = cols / QK, r = r0;                                                          \
        for (; r + TR <= r1; r += TR) {                                                          \
            const uint8_t *row = raw + r * row_bytes;                                            \
            int64_t i = 0;                                                                       \
            for (; i + TM <= m; i += TM)                                                         \
                NAME##_tile(row, row_bytes, xq + i * cols, xd + i * nc, cols, TR, TM, i == 0,    \
                            out + i * out_stride + r, out_stride);                               \
            switch (m - i) { /* the guards keep the cases that cannot occur from being built */  \
    case 7: if (7 < TM) NAME##_tile(row, row_bytes, xq + i * cols, xd + i * nc, cols, TR, 7, i == 0, \
                                       out + i * out_stride + r, out_stride); break;          \
    case 6: if (6 < TM) NAME##_tile(row, row_bytes, xq + i * cols, xd + i * nc, cols, TR, 6, i == 0, \
                                       out + i * out_stride + r, out_stride); break;          \
    case 5: if (5 < TM) NAME##_tile(row, row_bytes, xq + i * cols, xd + i * nc, cols, TR, 5, i == 0, \
                                       out + i * out_stride + r, out_stride); break;          \
    case 4: if (4 < TM) NAME##_tile(row, row_bytes, xq + i * cols, xd + i * nc, cols, TR, 4, i == 0, \
                                       out + i * out_stride + r, out_stride); break;          \
    case 3: if (3 < TM) NAME##_tile(row, row_bytes, xq + i * cols, xd + i * nc, cols, TR, 3, i == 0, \
                                       out + i * out_stride + r, out_stride); break;          \
    case 2: if (2 < TM) NAME##_tile(row, row_bytes, xq + i * cols, xd + i * nc, cols, TR, 2, i == 0, \
                                       out + i * out_stride + r, out_stride); break;          \
    case 1: if (1 < TM) NAME##_tile(row, row_bytes, xq + i * cols, xd + i * nc, cols, TR, 1, i == 0, \
                                       out + i * out_stride + r, out_stride); break;          \
            default: break;                                                                      \
            }                                                                                    \
        }                                                                                        \
        if (r < r1) NAME##_1(raw, row_bytes, r, r1, xq8, xd, xbs, m, cols, out, out_stride);     \
    }

/* Q8_0 on AVX2: per block, |w| (vpabsb) and w's signs moved onto the activations (vpsignb:
 * x where w > 0, -x where w < 0), so vpmaddubsw multiplies unsigned by signed bytes
 * (|w| <= 128, |x| <= 127: a pair sums to at most 32512, no saturation); vpmaddwd by ones sums
 * into 8 int32, converted to float and scaled by d in one FMA. The weight-side work (load,
 * abs, the scale) is done once per block for all m activation rows. With VNNI at 256 bits
 * (avxvnni level) vpdpbusd gives the same 8 int32 in one instruction. */
#define Q8_DOT_AVX2(a, s) _mm256_madd_epi16(_mm256_maddubs_epi16(a, s), _mm256_set1_epi16(1))
#define Q8_DOT_AVXVNNI(a, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), a, s)
#define Q8_DOT_VNNI256(a, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, s)

#define DEFINE_Q8_0_AVX2_ROWS(NAME, TARGET, DOT) \
S2Q_TARGET(TARGET) S2Q_INLINE void NAME##_m(const uint8_t *raw, int64_t row_bytes, int64_t r0,     \
                                                    int64_t r1, const int8_t *xq, const float *xd, \
                                                    const int64_t m, int64_t cols, float *out,     \
                                                    int64_t out_stride) {                          \
    int64_t nb = row_bytes / Q8_BB, nc = cols / QK;                                                \
    for (int64_t r = r0; r < r1; r++) {                                                            \
        const uint8_t *row = raw + r * row_bytes;                                                  \
        __m256 acc[MAX_M], t[MAX_M];                                                               \
        for (int64_t i = 0; i < m; i++) acc[i] = _mm256_setzero_ps();                              \
        for (int64_t c = 0; c < nc; c++) {                                                         \
            int64_t j1 = nb < (c + 1) * Q8_PER_CHUNK ? nb : (c + 1) * Q8_PER_CHUNK;                \
            for (int64_t i = 0; i < m; i++) t[i] = _mm256_setzero_ps();                            \
            for (int64_t j = c * Q8_PER_CHUNK; j < j1; j++) {                                      \
                const uint8_t *blk = row + j * Q8_BB;                                              \
                _mm_prefetch((const char *)(blk + Q8_PF_BYTES), _MM_HINT_T0);                      \
                __m256 dv = _mm256_set1_ps(F16(blk));                                              \
                __m256i w = V(blk + 2), aw = _mm256_abs_epi8(w);                                   \
                for (int64_t i = 0; i < m; i++) {                                                  \
                    __m256i xv = V(xq + i * cols + j * 32);                                        \
                    __m256i p = DOT(aw, _mm256_sign_epi8(xv, w));                                  \
                    t[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dv, t[i]);                       \
                }                                                                                  \
            }                                                                                      \
            for (int64_t i = 0; i < m; i++)                                                        \
                acc[i] = _mm256_fmadd_ps(t[i], _mm256_set1_ps(xd[i * nc + c]), acc[i]);            \
        }                                                                                          \
        for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = hsum256(acc[i]);                 \
    }                                                                                              \
}                                                                                                  \
S2Q_TARGET(TARGET) static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1, \
                                    const int8_t *xq, const float *xd, const int16_t *xbs,         \
                                    int64_t m, int64_t cols, float *out, int64_t out_stride) {     \
    (void)xbs;                                                                                     \
    Q8_DISPATCH(NAME##_m)                                                                          \
}                                                                                                  \

DEFINE_Q8_0_AVX2_ROWS(rows_q8_0_avx2_1, AVX2_T, Q8_DOT_AVX2)
DEFINE_Q8_0_AVX2_ROWS(rows_q8_0_avxvnni_1, AVXVNNI_T, Q8_DOT_AVXVNNI)
DEFINE_Q8_0_AVX2_ROWS(rows_q8_0_vnni256_1, VNNI256_T, Q8_DOT_VNNI256)

/* Q8_0 x int8 on AVX2 and the avxvnni level, tiled (DEFINE_Q8_TILED): per block and weight row
 * w, |w| and the scale; per activation row one load, its signs fixed per weight row. TR x TM:
 * Q8_AVX2_TILE (AVX2 has 16 vector registers). */
#define Q8_AVX2_WDECL(TR) __m256i w[TR], aw[TR]; __m256 dv[TR];
#define Q8_AVX2_WPREP(k, blk, two)                                                                   \
    dv[k] = _mm256_set1_ps(F16(blk));                                                                \
    w[k] = V(blk + 2);                                                                               \
    aw[k] = _mm256_abs_epi8(w[k]);
#define Q8_AVX2_XDOT(i, DOT)                                                                         \
    __m256i xv = V(xq + i * cols + j * 32);                                                          \
    for (int k = 0; k < RB; k++) {                                                                   \
        __m256i p = DOT(aw[k], _mm256_sign_epi8(xv, w[k]));                                          \
        t[k][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dv[k], t[k][i]);                            \
    }
#define DEFINE_Q8_0_AVX2_TILE(NAME, TARGET, DOT, TR, TM)                                             \
    DEFINE_Q8_TILE_FN(NAME, TARGET, int8_t, 256, 1, DOT, TR, TM, Q8_AVX2_WDECL, Q8_AVX2_WPREP, Q8_AVX2_XDOT) \
    DEFINE_Q8_TILED(NAME, TARGET, int8_t, TR, TM, Q8_TILE_NOT_A_COPY)

#ifndef Q8_AVX2_TILE_R
#define Q8_AVX2_TILE_R 1
#endif
#ifndef Q8_AVX2_TILE_M
#define Q8_AVX2_TILE_M 4
#endif
DEFINE_Q8_0_AVX2_TILE(rows_q8_0_avx2, AVX2_T, Q8_DOT_AVX2, Q8_AVX2_TILE_R, Q8_AVX2_TILE_M)
DEFINE_Q8_0_AVX2_TILE(rows_q8_0_avxvnni, AVXVNNI_T, Q8_DOT_AVXVNNI, Q8_AVX2_TILE_R, Q8_AVX2_TILE_M)
DEFINE_Q8_0_AVX2_TILE(rows_q8_0_vnni256, VNNI256_T, Q8_DOT_VNNI256, Q8_AVX2_TILE_R, Q8_AVX2_TILE_M)

/* Q8_0 x int16 activations on AVX2: the block's 32 weights widened to int16 once (two
 * registers), then per row two vpmaddwd and one add into 8 int32 (each a sum of 4 products;
 * x: values 16-31 lie 32 further, I16_AT); VNNI: vpmaddwd + vpdpwssd, the same sums. */
#define I16_DOT_AVX2(w0, x0, w1, x1) _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1))
#define I16_DOT_AVXVNNI(w0, x0, w1, x1) _mm256_dpwssd_avx_epi32(_mm256_madd_epi16(w0, x0), w1, x1)
#define I16_DOT_VNNI256(w0, x0, w1, x1) _mm256_dpwssd_epi32(_mm256_madd_epi16(w0, x0), w1, x1)

#define DEFINE_Q8_0_I16_AVX2_ROWS(NAME, TARGET, DOT) \
S2Q_TARGET(TARGET) S2Q_INLINE void NAME##_m(const uint8_t *raw, int64_t row_bytes, int64_t r0,          \
                                                        int64_t r1, const int8_t *xq8, const float *xd, \
                                                        const int64_t m, int64_t cols, float *out,      \
                                                        int64_t out_stride) {                           \
    const int16_t *xq = (const int16_t *)xq8;                                                           \
    int64_t nb = row_bytes / Q8_BB, nc = cols / QK;                                                     \
    for (int64_t r = r0; r < r1; r++) {                                                                 \
        const uint8_t *row = raw + r * row_bytes;                                                       \
        __m256 acc[MAX_M], t[MAX_M];                                                                    \
        for (int64_t i = 0; i < m; i++) acc[i] = _mm256_setzero_ps();                                   \
        for (int64_t c = 0; c < nc; c++) {                                                              \
            int64_t j1 = nb < (c + 1) * Q8_PER_CHUNK ? nb : (c + 1) * Q8_PER_CHUNK;                     \
            for (int64_t i = 0; i < m; i++) t[i] = _mm256_setzero_ps();                                 \
            for (int64_t j = c * Q8_PER_CHUNK; j < j1; j++) {                                           \
                const uint8_t *blk = row + j * Q8_BB;                                                   \
                _mm_prefetch((const char *)(blk + Q8_PF_BYTES), _MM_HINT_T0);                           \
                __m256 dv = _mm256_set1_ps(F16(blk));                                                   \
                __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 2)));         \
                __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 18)));        \
                for (int64_t i = 0; i < m; i++) {                                                       \
                    const int16_t *x = xq + i * cols + I16_AT(j, 0);                                    \
                    __m256i p = DOT(w0, V(x), w1, V(x + 32));                                           \
                    t[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dv, t[i]);                            \
                }                                                                                       \
            }                                                                                           \
            for (int64_t i = 0; i < m; i++)                                                             \
                acc[i] = _mm256_fmadd_ps(t[i], _mm256_set1_ps(xd[i * nc + c]), acc[i]);                 \
        }                                                                                               \
        for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = hsum256(acc[i]);                      \
    }                                                                                                   \
}                                                                                                       \
S2Q_TARGET(TARGET) static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1,      \
                                    const int8_t *xq, const float *xd, const int16_t *xbs,              \
                                    int64_t m, int64_t cols, float *out, int64_t out_stride) {          \
    (void)xbs;                                                                                          \
    Q8_DISPATCH(NAME##_m)                                                                               \
}                                                                                                       \

DEFINE_Q8_0_I16_AVX2_ROWS(rows_q8_0_i16_avx2_1, AVX2_T, I16_DOT_AVX2)
DEFINE_Q8_0_I16_AVX2_ROWS(rows_q8_0_i16_avxvnni_1, AVXVNNI_T, I16_DOT_AVXVNNI)
DEFINE_Q8_0_I16_AVX2_ROWS(rows_q8_0_i16_vnni256_1, VNNI256_T, I16_DOT_VNNI256)

/* Q8_0 x int16 on AVX2 and the avxvnni level, tiled (DEFINE_Q8_TILED): per block and weight row
 * the two widened halves and the scale; per activation row its two vectors, loaded once. */
#define Q8_I16_AVX2_WDECL(TR) __m256i w0[TR], w1[TR]; __m256 dv[TR];
#define Q8_I16_AVX2_WPREP(k, blk, two)                                                               \
    dv[k] = _mm256_set1_ps(F16(blk));                                                                \
    w0[k] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 2)));                       \
    w1[k] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 18)));
#define Q8_I16_AVX2_XDOT(i, DOT)                                                                     \
    const int16_t *x = xq + i * cols + I16_AT(j, 0);                                                 \
    __m256i x0 = V(x), x1 = V(x + 32);                                                               \
    for (int k = 0; k < RB; k++)                                                                     \
        t[k][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT(w0[k], x0, w1[k], x1)), dv[k], t[k][i]);
#define DEFINE_Q8_0_I16_AVX2_TILE(NAME, TARGET, DOT, TR, TM)                                         \
    DEFINE_Q8_TILE_FN(NAME, TARGET, int16_t, 256, 1, DOT, TR, TM, Q8_I16_AVX2_WDECL, Q8_I16_AVX2_WPREP, \
                      Q8_I16_AVX2_XDOT)                                                              \
    DEFINE_Q8_TILED(NAME, TARGET, int16_t, TR, TM, Q8_TILE_NOT_A_COPY)

DEFINE_Q8_0_I16_AVX2_TILE(rows_q8_0_i16_avx2, AVX2_T, I16_DOT_AVX2, Q8_AVX2_TILE_R, Q8_AVX2_TILE_M)
DEFINE_Q8_0_I16_AVX2_TILE(rows_q8_0_i16_avxvnni, AVXVNNI_T, I16_DOT_AVXVNNI, Q8_AVX2_TILE_R, Q8_AVX2_TILE_M)
DEFINE_Q8_0_I16_AVX2_TILE(rows_q8_0_i16_vnni256, VNNI256_T, I16_DOT_VNNI256, Q8_AVX2_TILE_R, Q8_AVX2_TILE_M)

/* AVX-512: 4 chunks of 64 weights; the int16 product lane j of chunk c belongs to scale
 * 4c + j/8, picked by one vpermw. VNNI fuses vpmaddwd + vpaddd into vpdpwssd. */
#define MADD_ADD_BW(acc, p, s) _mm512_add_epi32(acc, _mm512_madd_epi16(p, s))
#define MADD_ADD_VNNI(acc, p, s) _mm512_dpwssd_epi32(acc, p, s)

#define DEFINE_AVX512_ROWS(NAME, UNPACK, BB, TARGET, MADD_ADD)                                                                 \
    S2Q_TARGET(TARGET) S2Q_INLINE void NAME##_m(const uint8_t *raw, int64_t row_bytes, int64_t r0,      \
                                        int64_t r1, const int8_t *xq, const float *xd,           \
                                        const int16_t *xbs, const int64_t m, int64_t cols,       \
                                        float *out, int64_t out_stride) {                                    \
        int64_t nb = cols / QK;                                                                  \
        __m512i idx[4];                                                                          \
        for (int c = 0; c < 4; c++) {                                                            \
            int16_t t[32];                                                                       \
            for (int j = 0; j < 32; j++) t[j] = (int16_t)(4 * c + j / 8);                        \
            idx[c] = _mm512_loadu_si512((const void *)t);                                        \
        }                                                                                        \
        for (int64_t r = r0; r < r1; r++) {                                                      \
            __m512 acc[MAX_M];                                                                   \
            __m256 accm[MAX_M];                                                                  \
            for (int64_t i = 0; i < m; i++) {                                                    \
                acc[i] = _mm512_setzero_ps();                                                    \
                accm[i] = _mm256_setzero_ps();                                                   \
            }                                                                                    \
            for (int64_t b = 0; b < nb; b++) {                                                   \
                __m512i sc[4], u[4];                                                             \
                __m256i M;                                                                       \
                float kd, kcm;                                                                   \
                const uint8_t *blk = raw + r * row_bytes + b * BB;                               \
                K_PREFETCH(blk, BB);                                                             \
                UNPACK(blk, idx, &kd, &kcm, &M, sc, u);                                          \
                for (int64_t i = 0; i < m; i++) {                                                \
                    const int8_t *x = xq + i * cols + b * QK;                                    \
                    __m512i isum = _mm512_setzero_si512();                                       \
                    for (int c = 0; c < 4; c++) {                                                \
                        __m512i xv = _mm512_loadu_si512((const void *)(x + 64 * c));             \
                        isum = MADD_ADD(isum, _mm512_maddubs_epi16(u[c], xv), sc[c]);            \
                    }                                                                            \
                    __m256i ms = _mm256_madd_epi16(                                              \
                        M, _mm256_loadu_si256((const __m256i *)(xbs + (i * nb + b) * 16)));      \
                    float dx = xd[i * nb + b];                                                   \
                    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dx * kd), \
                                             acc[i]);                                            \
                    accm[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(dx * kcm), \
                                              accm[i]);                                          \
                }                                                                                \
            }                                                                                    \
            for (int64_t i = 0; i < m; i++) {                                                    \
                __m256 a = _mm256_add_ps(accm[i], _mm512_castps512_ps256(acc[i]));               \
                a = _mm256_add_ps(a, _mm256_castpd_ps(_mm512_extractf64x4_pd(                    \
                                         _mm512_castps_pd(acc[i]), 1)));                         \
                out[i * out_stride + r] = hsum256(a);                                            \
            }                                                                                    \
        }                                                                                        \
    }                                                                                        \
    /* m = 1, 2, 4 and 8 (one row, or one in two planes: every decode step; 2-4 requests      \
     * batched) get their own copies: with m constant the accumulators stay in registers. */   \
    S2Q_TARGET(TARGET) static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1, \
                                       const int8_t *xq, const float *xd, const int16_t *xbs,   \
                                       int64_t m, int64_t cols, float *out, int64_t out_stride) { \
        if (m == 1)                                                                              \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, 1, cols, out, out_stride);            \
        else if (m == 2)                                                                         \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, 2, cols, out, out_stride);            \
        else if (m == 4)                                                                         \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, 4, cols, out, out_stride);            \
        else if (m == 8)                                                                         \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, 8, cols, out, out_stride);            \
        else                                                                                     \
            NAME##_m(raw, row_bytes, r0, r1, xq, xd, xbs, m, cols, out, out_stride);            \
    }

DEFINE_AVX512_ROWS(rows_q4_k_avx512, z_q4_k, 144, AVX512_T, MADD_ADD_BW)
DEFINE_AVX512_ROWS(rows_q5_k_avx512, z_q5_k, 176, AVX512_T, MADD_ADD_BW)
DEFINE_AVX512_ROWS(rows_q6_k_avx512, z_q6_k, 210, AVX512_T, MADD_ADD_BW)
DEFINE_AVX512_ROWS(rows_q3_k_avx512, z_q3_k, 110, AVX512_T, MADD_ADD_BW)
DEFINE_AVX512_ROWS(rows_q2_k_avx512, z_q2_k, 84, AVX512_T, MADD_ADD_BW)
DEFINE_AVX512_ROWS(rows_q4_k_vnni, z_q4_k, 144, AVX512VNNI_T, MADD_ADD_VNNI)
DEFINE_AVX512_ROWS(rows_q5_k_vnni, z_q5_k, 176, AVX512VNNI_T, MADD_ADD_VNNI)
DEFINE_AVX512_ROWS(rows_q6_k_vnni, z_q6_k, 210, AVX512VNNI_T, MADD_ADD_VNNI)
DEFINE_AVX512_ROWS(rows_q3_k_vnni, z_q3_k, 110, AVX512VNNI_T, MADD_ADD_VNNI)
DEFINE_AVX512_ROWS(rows_q2_k_vnni, z_q2_k, 84, AVX512VNNI_T, MADD_ADD_VNNI)

/* The two blocks' float16 scales as one vector (lanes 0-7: blk, 8-15: the next block, or zeros
 * where blk is the chunk's lone last block), and a 512-bit row sum: its halves added, then
 * hsum256's fixed order. Shared by the Q8_0 int8 and int16 rows. */
S2Q_TARGET(AVX512_T) S2Q_INLINE __m512 q8_pair_scales512(const uint8_t *blk, int two) {
    __m256 d0 = _mm256_set1_ps(F16(blk));
    __m256 d1 = two ? _mm256_set1_ps(F16(blk + Q8_BB)) : _mm256_setzero_ps();
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(d0)),
                                               _mm256_castps_pd(d1), 1));
}

S2Q_TARGET(AVX512_T) S2Q_INLINE float hsum512(__m512 a) {
    return hsum256(_mm256_add_ps(_mm512_castps512_ps256(a),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))));
}

/* Q8_0 on AVX-512: two blocks per 64-byte register (the last chunk may end on one: the second
 * half is then zero weights). No vpsignb at 512 bits: the activations are negated under the
 * mask of w's sign bits (one masked vpsubb). BW: vpmaddubsw + vpmaddwd by ones; VNNI: vpdpbusd
 * (unsigned x signed bytes straight into int32). */
#define Q8_DOT_BW(a, s) _mm512_madd_epi16(_mm512_maddubs_epi16(a, s), _mm512_set1_epi16(1))
#define Q8_DOT_VNNI(a, s) _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, s)

#define DEFINE_Q8_0_AVX512_ROWS(NAME, TARGET, DOT)                                               \
    S2Q_TARGET(TARGET) S2Q_INLINE void NAME##_m(const uint8_t *raw, int64_t row_bytes, int64_t r0, \
                                                int64_t r1, const int8_t *xq, const float *xd,   \
                                                const int64_t m, int64_t cols, float *out,       \
                                                int64_t out_stride) {                            \
        int64_t nb = row_bytes / Q8_BB, nc = cols / QK;                                          \
        const __m512i zero = _mm512_setzero_si512();                                             \
        for (int64_t r = r0; r < r1; r++) {                                                      \
            const uint8_t *row = raw + r * row_bytes;                                            \
            __m512 acc[MAX_M], t[MAX_M];                                                         \
            for (int64_t i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();                        \
            for (int64_t c = 0; c < nc; c++) {                                                   \
                int64_t j1 = nb < (c + 1) * Q8_PER_CHUNK ? nb : (c + 1) * Q8_PER_CHUNK;          \
                for (int64_t i = 0; i < m; i++) t[i] = _mm512_setzero_ps();                      \
                for (int64_t j = c * Q8_PER_CHUNK; j < j1; j += 2) {                             \
                    const uint8_t *blk = row + j * Q8_BB;                                        \
                    _mm_prefetch((const char *)(blk + Q8_PF_BYTES), _MM_HINT_T0);     \
                    int two = j + 1 < j1;                                                        \
                    __m256i w1 = two ? V(blk + Q8_BB + 2) : _mm256_setzero_si256();             \
                    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(V(blk + 2)), w1, 1);   \
                    __m512i aw = _mm512_abs_epi8(w);                                             \
                    __mmask64 neg = _mm512_movepi8_mask(w);                                      \
                    __m512 dv = q8_pair_scales512(blk, two);                                     \
                    for (int64_t i = 0; i < m; i++) {                                            \
                        /* 64 bytes even for a lone last block: cols is padded to 256 */        \
                        __m512i xv = _mm512_loadu_si512((const void *)(xq + i * cols + j * 32)); \
                        __m512i s = _mm512_mask_sub_epi8(xv, neg, zero, xv);                     \
                        t[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(DOT(aw, s)), dv, t[i]);        \
                    }                                                                            \
                }                                                                                \
                for (int64_t i = 0; i < m; i++)                                                  \
                    acc[i] = _mm512_fmadd_ps(t[i], _mm512_set1_ps(xd[i * nc + c]), acc[i]);      \
            }                                                                                    \
            for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = hsum512(acc[i]);           \
        }                                                                                        \
    }                                                                                            \
    S2Q_TARGET(TARGET) static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1, \
                                        const int8_t *xq, const float *xd, const int16_t *xbs,  \
                                        int64_t m, int64_t cols, float *out, int64_t out_stride) { \
        (void)xbs;                                                                               \
        Q8_DISPATCH(NAME##_m)                                                                    \
    }

DEFINE_Q8_0_AVX512_ROWS(rows_q8_0_avx512_1, AVX512_T, Q8_DOT_BW)
DEFINE_Q8_0_AVX512_ROWS(rows_q8_0_vnni_1, AVX512VNNI_T, Q8_DOT_VNNI)

/* Q8_0 x int8 on AVX-512, tiled (DEFINE_Q8_TILED): per block pair and weight row |w|, the mask
 * of w's signs and the scales; per activation row one load, negated per weight row. */
#define Q8_512_WDECL(TR) __m512i aw[TR]; __mmask64 neg[TR]; __m512 dv[TR];
#define Q8_512_WPREP(k, blk, two)                                                                    \
    __m256i w1 = two ? V(blk + Q8_BB + 2) : _mm256_setzero_si256();                                  \
    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(V(blk + 2)), w1, 1);                       \
    aw[k] = _mm512_abs_epi8(w);                                                                      \
    neg[k] = _mm512_movepi8_mask(w);                                                                 \
    dv[k] = q8_pair_scales512(blk, two);
#define Q8_512_XDOT(i, DOT)                                                                          \
    __m512i xv = _mm512_loadu_si512((const void *)(xq + i * cols + j * 32));                         \
    for (int k = 0; k < RB; k++) {                                                                   \
        __m512i sx = _mm512_mask_sub_epi8(xv, neg[k], _mm512_setzero_si512(), xv);                   \
        t[k][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(DOT(aw[k], sx)), dv[k], t[k][i]);               \
    }
#define DEFINE_Q8_0_AVX512_TILE(NAME, TARGET, DOT, TR, TM)                                           \
    DEFINE_Q8_TILE_FN(NAME, TARGET, int8_t, 512, 2, DOT, TR, TM, Q8_512_WDECL, Q8_512_WPREP, Q8_512_XDOT) \
    DEFINE_Q8_TILED(NAME, TARGET, int8_t, TR, TM, Q8_TILE_NOT_A_COPY)

#ifndef Q8_512_TILE_R
#define Q8_512_TILE_R 2
#endif
#ifndef Q8_512_TILE_M
#define Q8_512_TILE_M 4
#endif
DEFINE_Q8_0_AVX512_TILE(rows_q8_0_avx512, AVX512_T, Q8_DOT_BW, Q8_512_TILE_R, Q8_512_TILE_M)
DEFINE_Q8_0_AVX512_TILE(rows_q8_0_vnni, AVX512VNNI_T, Q8_DOT_VNNI, Q8_512_TILE_R, Q8_512_TILE_M)

/* Q8_0 x int16 activations on AVX-512: a pair of blocks per step (I16_LAYOUT): the first and
 * the second halves of both blocks' weights widened to int16 once (wa, wb), then per row two
 * vpmaddwd (VNNI: vpmaddwd + vpdpwssd) give 8 int32 per block (lanes 0-7: block j, 8-15: j+1),
 * each a sum of 4 products, at most 4 * 128 * 32767 < 2^24: exact in float. A lone last block
 * (odd count, padded activations) pairs with zero weights. */
#define I16_DOT_BW(wa, xa, wb, xb) _mm512_add_epi32(_mm512_madd_epi16(wa, xa), _mm512_madd_epi16(wb, xb))
#define I16_DOT_VNNI(wa, xa, wb, xb) _mm512_dpwssd_epi32(_mm512_madd_epi16(wa, xa), wb, xb)
#define H128(p) _mm_loadu_si128((const __m128i *)(p))

#define DEFINE_Q8_0_I16_AVX512_ROWS(NAME, TARGET, DOT)                                           \
    S2Q_TARGET(TARGET) S2Q_INLINE void NAME##_m(const uint8_t *raw, int64_t row_bytes, int64_t r0, \
                                                int64_t r1, const int8_t *xq8, const float *xd,  \
                                                const int64_t m, int64_t cols, float *out,       \
                                                int64_t out_stride) {                            \
        const int16_t *xq = (const int16_t *)xq8;                                                \
        int64_t nb = row_bytes / Q8_BB, nc = cols / QK;                                          \
        for (int64_t r = r0; r < r1; r++) {                                                      \
            const uint8_t *row = raw + r * row_bytes;                                            \
            __m512 acc[MAX_M], t[MAX_M];                                                         \
            for (int64_t i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();                        \
            for (int64_t c = 0; c < nc; c++) {                                                   \
                int64_t j1 = nb < (c + 1) * Q8_PER_CHUNK ? nb : (c + 1) * Q8_PER_CHUNK;          \
                for (int64_t i = 0; i < m; i++) t[i] = _mm512_setzero_ps();                      \
                for (int64_t j = c * Q8_PER_CHUNK; j < j1; j += 2) {                             \
                    const uint8_t *blk = row + j * Q8_BB;                                        \
                    _mm_prefetch((const char *)(blk + Q8_PF_BYTES), _MM_HINT_T0);                \
                    int two = j + 1 < j1;                                                        \
                    __m128i z = _mm_setzero_si128();                                             \
                    __m512i wa = _mm512_cvtepi8_epi16(_mm256_inserti128_si256(                   \
                        _mm256_castsi128_si256(H128(blk + 2)), two ? H128(blk + Q8_BB + 2) : z, 1)); \
                    __m512i wb = _mm512_cvtepi8_epi16(_mm256_inserti128_si256(                   \
                        _mm256_castsi128_si256(H128(blk + 18)), two ? H128(blk + Q8_BB + 18) : z, 1)); \
                    __m512 dv = q8_pair_scales512(blk, two);                                     \
                    for (int64_t i = 0; i < m; i++) {                                            \
                        const int16_t *x = xq + i * cols + I16_AT(j, 0);                         \
                        __m512i p = DOT(wa, _mm512_loadu_si512((const void *)x), wb,             \
                                        _mm512_loadu_si512((const void *)(x + 32)));             \
                        t[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dv, t[i]);                 \
                    }                                                                            \
                }                                                                                \
                for (int64_t i = 0; i < m; i++)                                                  \
                    acc[i] = _mm512_fmadd_ps(t[i], _mm512_set1_ps(xd[i * nc + c]), acc[i]);      \
            }                                                                                    \
            for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = hsum512(acc[i]);           \
        }                                                                                        \
    }                                                                                            \
    S2Q_TARGET(TARGET) static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1, \
                                        const int8_t *xq, const float *xd, const int16_t *xbs,  \
                                        int64_t m, int64_t cols, float *out, int64_t out_stride) { \
        (void)xbs;                                                                               \
        Q8_DISPATCH(NAME##_m)                                                                    \
    }

DEFINE_Q8_0_I16_AVX512_ROWS(rows_q8_0_i16_avx512_1, AVX512_T, I16_DOT_BW)
DEFINE_Q8_0_I16_AVX512_ROWS(rows_q8_0_i16_vnni_1, AVX512VNNI_T, I16_DOT_VNNI)

/* Q8_0 x int16 on AVX-512, tiled (DEFINE_Q8_TILED): per block pair and weight row the widened
 * weights and scales as in the per-row loops; per activation row its two vectors, loaded once
 * for the tile's TR weight rows. 2 x 4: 8 + 8 accumulators, 2 x 3 operand registers. */
#define Q8_I16_512_WDECL(TR) __m512i wa[TR], wb[TR]; __m512 dv[TR];
#define Q8_I16_512_WPREP(k, blk, two)                                                                \
    wa[k] = _mm512_cvtepi8_epi16(_mm256_inserti128_si256(                                            \
        _mm256_castsi128_si256(H128(blk + 2)), two ? H128(blk + Q8_BB + 2) : _mm_setzero_si128(), 1)); \
    wb[k] = _mm512_cvtepi8_epi16(_mm256_inserti128_si256(                                            \
        _mm256_castsi128_si256(H128(blk + 18)), two ? H128(blk + Q8_BB + 18) : _mm_setzero_si128(), 1)); \
    dv[k] = q8_pair_scales512(blk, two);
#define Q8_I16_512_XDOT(i, DOT)                                                                      \
    const int16_t *x = xq + i * cols + I16_AT(j, 0);                                                 \
    __m512i xa = _mm512_loadu_si512((const void *)x);                                                \
    __m512i xb = _mm512_loadu_si512((const void *)(x + 32));                                         \
    for (int k = 0; k < RB; k++)                                                                     \
        t[k][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(DOT(wa[k], xa, wb[k], xb)), dv[k], t[k][i]);
#define DEFINE_Q8_0_I16_AVX512_TILE(NAME, TARGET, DOT, TR, TM)                                       \
    DEFINE_Q8_TILE_FN(NAME, TARGET, int16_t, 512, 2, DOT, TR, TM, Q8_I16_512_WDECL, Q8_I16_512_WPREP, \
                      Q8_I16_512_XDOT)                                                               \
    DEFINE_Q8_TILED(NAME, TARGET, int16_t, TR, TM, Q8_TILE_FROM_3)

DEFINE_Q8_0_I16_AVX512_TILE(rows_q8_0_i16_avx512, AVX512_T, I16_DOT_BW, 2, 4)
DEFINE_Q8_0_I16_AVX512_TILE(rows_q8_0_i16_vnni, AVX512VNNI_T, I16_DOT_VNNI, 2, 4)

static void cpuid(int leaf, int sub, unsigned r[4]) {
#if defined(_MSC_VER) && !defined(__clang__)
    int t[4];
    __cpuidex(t, leaf, sub);
    for (int i = 0; i < 4; i++) r[i] = (unsigned)t[i];
#else
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#endif
}

static uint64_t xgetbv0(void) {
#if defined(_MSC_VER) && !defined(__clang__)
    return _xgetbv(0);
#else
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
#endif
}

/* The levels this CPU and OS support (the OS must save the wider registers: XCR0), into
 * level_offered; returns the best. The avxvnni level runs VEX-encoded where the CPU has
 * AVX-VNNI (CPUID.(7,1):EAX[4]), else EVEX-encoded where it has AVX-512 VNNI + VL (offered there,
 * below the AVX-512 levels, so that it is only used when forced: tests, benchmarks). */
static int avxvnni_vex = 0;
static int detect_level(void) {
    unsigned r[4];
    cpuid(0, 0, r);
    unsigned max_leaf = r[0];
    cpuid(1, 0, r);
    int osxsave = (r[2] >> 27) & 1, fma = (r[2] >> 12) & 1, f16c = (r[2] >> 29) & 1;
    if (!osxsave || max_leaf < 7) return L_SCALAR;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 6) != 6) return L_SCALAR;  /* no AVX state */
    cpuid(7, 0, r);
    unsigned max_sub7 = r[0];
    int avx2 = (r[1] >> 5) & 1, f = (r[1] >> 16) & 1, bw = (r[1] >> 30) & 1, vl = (r[1] >> 31) & 1;
    int vnni512 = (r[2] >> 11) & 1, vnni_vex = 0;
    if (max_sub7 >= 1) {
        cpuid(7, 1, r);
        vnni_vex = (r[0] >> 4) & 1;
    }
    if (!(avx2 && fma && f16c)) return L_SCALAR;
    int zmm = f && bw && vl && (xcr0 & 0xe6) == 0xe6;  /* AVX-512 state saved too */
    int best = L_AVX2;
    level_offered[L_AVX2] = 1;
    avxvnni_vex = vnni_vex;
    if (vnni_vex || (zmm && vnni512)) level_offered[best = L_AVXVNNI] = 1;
    if (zmm) level_offered[best = vnni512 ? L_AVX512VNNI : L_AVX512] = 1;
    if (zmm && vnni512) level_offered[L_AVX512] = 1;
    return best;
}

static void init_tables(void) {
    rows_fn a[N_TYPES] = {rows_q4_k_avx2, rows_q5_k_avx2, rows_q6_k_avx2, rows_q3_k_avx2, rows_q2_k_avx2,
                          rows_q8_0_avx2, rows_q8_0_i16_avx2};
    rows_fn b[N_TYPES] = {rows_q4_k_avx512, rows_q5_k_avx512, rows_q6_k_avx512, rows_q3_k_avx512,
                          rows_q2_k_avx512, rows_q8_0_avx512,
                          rows_q8_0_i16_avx512};
    rows_fn c[N_TYPES] = {rows_q4_k_vnni, rows_q5_k_vnni, rows_q6_k_vnni, rows_q3_k_vnni, rows_q2_k_vnni,
                          rows_q8_0_vnni, rows_q8_0_i16_vnni};
    rows_fn vex[N_TYPES] = {rows_q4_k_avxvnni, rows_q5_k_avxvnni, rows_q6_k_avxvnni, rows_q3_k_avxvnni,
                            rows_q2_k_avxvnni, rows_q8_0_avxvnni, rows_q8_0_i16_avxvnni};
    rows_fn evex[N_TYPES] = {rows_q4_k_vnni256, rows_q5_k_vnni256, rows_q6_k_vnni256, rows_q3_k_vnni256,
                             rows_q2_k_vnni256, rows_q8_0_vnni256, rows_q8_0_i16_vnni256};
    best_level = detect_level();
    memcpy(ROWS[L_AVX2], a, sizeof a);
    memcpy(ROWS[L_AVXVNNI], avxvnni_vex ? vex : evex, sizeof vex);
    memcpy(ROWS[L_AVX512], b, sizeof b);
    memcpy(ROWS[L_AVX512VNNI], c, sizeof c);
}
#elif !defined(S2Q_ARM)
static void init_tables(void) { best_level = L_SCALAR; }

#endif

#ifdef S2Q_ARM
/* ---- AArch64: NEON (every AArch64 CPU) and the dot-product instruction (sdot: Apple M-series,
 * Graviton2+, Cortex-A76+), chosen at run time like the x86 levels.
 * These rows keep the scalar rows' float operations exactly (same expressions, same order) and
 * only compute the integer parts with vector instructions; integer sums are exact (no lane
 * overflows: bounds at each function), so every output is bit-identical to the "scalar"
 * level's, and hence a row among others is bit-identical to it alone (checked under qemu by
 * tools/qdot_arm_check and tests/engine/test_qdot_arm.py, with GCC and clang). Where the
 * compiler fuses a*b+c into an FMA (clang by default; GCC in GNU C mode, not under setup.py's
 * -std=c99) it fuses the same expressions in both, so that still holds; such a build differs
 * from an x86 build only in that rounding (within the tests' bounds), and with setup.py's GCC
 * flags the outputs equal the x86 scalar level's bit for bit. The weights are unpacked once
 * per block by the portable unpack_* functions (vectorized by the compiler) and shared by
 * the m activation rows. ---- */

/* K-quant block, integer parts: isum = sum_s S[s] * sum_{i in s} u[i] q[i], msum = sum_s M[s] bs[s].
 * u <= 63 as int8, |q| <= 127: vmull/vmlal pair sums |.| <= 2*63*127 fit int16; |S| <= 128. */
S2Q_INLINE void neon_k_msum(const kblock *k, const int16_t *bs, int32_t *msum) {
    int16x8_t m0 = vld1q_s16(k->M), m1 = vld1q_s16(k->M + 8), b0 = vld1q_s16(bs), b1 = vld1q_s16(bs + 8);
    int32x4_t a = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
    a = vmlal_high_s16(a, m0, b0);
    a = vmlal_s16(a, vget_low_s16(m1), vget_low_s16(b1));
    a = vmlal_high_s16(a, m1, b1);
    *msum = vaddvq_s32(a);
}

S2Q_INLINE void neon_k_block(const kblock *k, const int8_t *x, float dx, const int16_t *bs, acc_scalar *acc) {
    int32x4_t a = vdupq_n_s32(0);
    for (int s = 0; s < 16; s++) {
        int8x16_t u = vreinterpretq_s8_u8(vld1q_u8(k->u + s * 16)), q = vld1q_s8(x + s * 16);
        int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(u), vget_low_s8(q)), u, q);
        a = vmlal_n_s16(a, vget_low_s16(p), k->S[s]);
        a = vmlal_high_n_s16(a, p, k->S[s]);
    }
    int32_t isum = vaddvq_s32(a), msum;
    neon_k_msum(k, bs, &msum);
    acc->v += dx * (k->d * (float)isum + k->cm * (float)msum);  /* as rows_scalar_block */
}

#ifdef S2Q_DOTPROD
/* sdot: 4 products per int32 lane (|.| <= 4*63*127), then the lane sums times S[s] */
S2Q_DOTPROD_TARGET S2Q_INLINE void dot_k_block(const kblock *k, const int8_t *x, float dx, const int16_t *bs,
                                               acc_scalar *acc) {
    int32x4_t a = vdupq_n_s32(0);
    for (int s = 0; s < 16; s++) {
        int8x16_t u = vreinterpretq_s8_u8(vld1q_u8(k->u + s * 16)), q = vld1q_s8(x + s * 16);
        a = vmlaq_n_s32(a, vdotq_s32(vdupq_n_s32(0), u, q), k->S[s]);
    }
    int32_t isum = vaddvq_s32(a), msum;
    neon_k_msum(k, bs, &msum);
    acc->v += dx * (k->d * (float)isum + k->cm * (float)msum);  /* as rows_scalar_block */
}
#endif

/* the loops of DEFINE_SCALAR_ROWS with another block function */
#define DEFINE_ARM_ROWS(NAME, UNPACK, BB, TARGET, BLOCK)                                         \
    TARGET static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1,       \
                            const int8_t *xq, const float *xd, const int16_t *xbs, int64_t m,    \
                            int64_t cols, float *out, int64_t out_stride) {                      \
        int64_t nb = cols / QK;                                                                  \
        kblock k;                                                                                \
        for (int64_t r = r0; r < r1; r++) {                                                      \
            acc_scalar acc[MAX_M];                                                               \
            for (int64_t i = 0; i < m; i++) acc[i].v = 0.0f;                                     \
            for (int64_t b = 0; b < nb; b++) {                                                   \
                UNPACK(raw + r * row_bytes + b * BB, &k);                                        \
                for (int64_t i = 0; i < m; i++)                                                  \
                    BLOCK(&k, xq + i * cols + b * QK, xd[i * nb + b], xbs + (i * nb + b) * 16,   \
                          &acc[i]);                                                              \
            }                                                                                    \
            for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = acc[i].v;                  \
        }                                                                                        \
    }

DEFINE_ARM_ROWS(rows_q4_k_neon, unpack_q4_k, 144, , neon_k_block)
DEFINE_ARM_ROWS(rows_q5_k_neon, unpack_q5_k, 176, , neon_k_block)
DEFINE_ARM_ROWS(rows_q6_k_neon, unpack_q6_k, 210, , neon_k_block)
DEFINE_ARM_ROWS(rows_q3_k_neon, unpack_q3_k, 110, , neon_k_block)
DEFINE_ARM_ROWS(rows_q2_k_neon, unpack_q2_k, 84, , neon_k_block)
#ifdef S2Q_DOTPROD
DEFINE_ARM_ROWS(rows_q4_k_dot, unpack_q4_k, 144, S2Q_DOTPROD_TARGET, dot_k_block)
DEFINE_ARM_ROWS(rows_q5_k_dot, unpack_q5_k, 176, S2Q_DOTPROD_TARGET, dot_k_block)
DEFINE_ARM_ROWS(rows_q6_k_dot, unpack_q6_k, 210, S2Q_DOTPROD_TARGET, dot_k_block)
DEFINE_ARM_ROWS(rows_q3_k_dot, unpack_q3_k, 110, S2Q_DOTPROD_TARGET, dot_k_block)
DEFINE_ARM_ROWS(rows_q2_k_dot, unpack_q2_k, 84, S2Q_DOTPROD_TARGET, dot_k_block)
#endif

/* Q8_0 block x int8 activations: |w| <= 128, |q| <= 127, so a pair of products fits int16. */
S2Q_INLINE int32_t neon_q8_dot(const int8_t *w, const int8_t *x) {
    int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16), x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), w0, x0);
    int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), w1, x1);
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
}

#ifdef S2Q_DOTPROD
S2Q_DOTPROD_TARGET S2Q_INLINE int32_t dot_q8_dot(const int8_t *w, const int8_t *x) {
    int32x4_t a = vdotq_s32(vdupq_n_s32(0), vld1q_s8(w), vld1q_s8(x));
    return vaddvq_s32(vdotq_s32(a, vld1q_s8(w + 16), vld1q_s8(x + 16)));
}
#endif

/* the loops of rows_q8_0_scalar with another integer dot */
#define DEFINE_Q8_0_ARM_ROWS(NAME, TARGET, DOT)                                                   \
    TARGET static void NAME(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1,        \
                            const int8_t *xq, const float *xd, const int16_t *xbs, int64_t m,     \
                            int64_t cols, float *out, int64_t out_stride) {                       \
        (void)xbs;                                                                                \
        int64_t nb = row_bytes / Q8_BB, nc = cols / QK;                                           \
        for (int64_t r = r0; r < r1; r++) {                                                       \
            const uint8_t *row = raw + r * row_bytes;                                             \
            float acc[MAX_M], t[MAX_M];                                                           \
            for (int64_t i = 0; i < m; i++) acc[i] = 0.0f;                                        \
            for (int64_t c = 0; c < nc; c++) {                                                    \
                int64_t j1 = nb < (c + 1) * Q8_PER_CHUNK ? nb : (c + 1) * Q8_PER_CHUNK;           \
                for (int64_t i = 0; i < m; i++) t[i] = 0.0f;                                      \
                for (int64_t j = c * Q8_PER_CHUNK; j < j1; j++) {                                 \
                    const uint8_t *blk = row + j * Q8_BB;                                         \
                    const int8_t *w = (const int8_t *)(blk + 2);                                  \
                    float d = f16_to_f32(rd16(blk));                                              \
                    for (int64_t i = 0; i < m; i++) {                                             \
                        int32_t s = DOT(w, xq + i * cols + j * 32);                               \
                        t[i] += (float)s * d;                                                     \
                    }                                                                             \
                }                                                                                 \
                for (int64_t i = 0; i < m; i++) acc[i] += t[i] * xd[i * nc + c];                  \
            }                                                                                     \
            for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = acc[i];                     \
        }                                                                                         \
    }

DEFINE_Q8_0_ARM_ROWS(rows_q8_0_neon, , neon_q8_dot)
#ifdef S2Q_DOTPROD
DEFINE_Q8_0_ARM_ROWS(rows_q8_0_dot, S2Q_DOTPROD_TARGET, dot_q8_dot)
#endif

/* Q8_0 x int16 activations (I16_LAYOUT: block j's values 0-15 at I16_AT(j, 0), 16-31 at
 * I16_AT(j, 16)); the weights are widened to int16 once per block for all rows. Each int32
 * lane sums 8 products |.| <= 128*32767. sdot has no int16 form: the dotprod level uses this. */
static void rows_q8_0_i16_neon(const uint8_t *raw, int64_t row_bytes, int64_t r0, int64_t r1,
                               const int8_t *xq8, const float *xd, const int16_t *xbs, int64_t m,
                               int64_t cols, float *out, int64_t out_stride) {
    (void)xbs;
    const int16_t *xq = (const int16_t *)xq8;
    int64_t nb = row_bytes / Q8_BB, nc = cols / QK;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = raw + r * row_bytes;
        float acc[MAX_M], t[MAX_M];
        for (int64_t i = 0; i < m; i++) acc[i] = 0.0f;
        for (int64_t c = 0; c < nc; c++) {
            int64_t j1 = nb < (c + 1) * Q8_PER_CHUNK ? nb : (c + 1) * Q8_PER_CHUNK;
            for (int64_t i = 0; i < m; i++) t[i] = 0.0f;
            for (int64_t j = c * Q8_PER_CHUNK; j < j1; j++) {
                const uint8_t *blk = row + j * Q8_BB;
                int8x16_t wa = vld1q_s8((const int8_t *)(blk + 2)), wb = vld1q_s8((const int8_t *)(blk + 18));
                int16x8_t w0 = vmovl_s8(vget_low_s8(wa)), w1 = vmovl_high_s8(wa);
                int16x8_t w2 = vmovl_s8(vget_low_s8(wb)), w3 = vmovl_high_s8(wb);
                float d = f16_to_f32(rd16(blk));
                for (int64_t i = 0; i < m; i++) {
                    const int16_t *x = xq + i * cols;
                    int16x8_t x0 = vld1q_s16(x + I16_AT(j, 0)), x1 = vld1q_s16(x + I16_AT(j, 8));
                    int16x8_t x2 = vld1q_s16(x + I16_AT(j, 16)), x3 = vld1q_s16(x + I16_AT(j, 24));
                    int32x4_t a = vmull_s16(vget_low_s16(w0), vget_low_s16(x0));
                    a = vmlal_high_s16(a, w0, x0);
                    a = vmlal_s16(a, vget_low_s16(w1), vget_low_s16(x1));
                    a = vmlal_high_s16(a, w1, x1);
                    a = vmlal_s16(a, vget_low_s16(w2), vget_low_s16(x2));
                    a = vmlal_high_s16(a, w2, x2);
                    a = vmlal_s16(a, vget_low_s16(w3), vget_low_s16(x3));
                    a = vmlal_high_s16(a, w3, x3);
                    int32_t s = vaddvq_s32(a);
                    t[i] += (float)s * d;
                }
            }
            for (int64_t i = 0; i < m; i++) acc[i] += t[i] * xd[i * nc + c];
        }
        for (int64_t i = 0; i < m; i++) out[i * out_stride + r] = acc[i];
    }
}

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif

/* NEON is AArch64's baseline; sdot by the OS's report of the CPU (Linux hwcaps, macOS sysctl). */
static int detect_level(void) {
#if defined(S2Q_DOTPROD) && defined(__ARM_FEATURE_DOTPROD)
    return L_DOTPROD;  /* the whole file targets it */
#elif defined(S2Q_DOTPROD) && defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) ? L_DOTPROD : L_NEON;
#elif defined(S2Q_DOTPROD) && defined(__APPLE__)
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &n, NULL, 0) == 0 && v ? L_DOTPROD : L_NEON;
#else
    return L_NEON;
#endif
}

static void init_tables(void) {
    rows_fn a[N_TYPES] = {rows_q4_k_neon, rows_q5_k_neon, rows_q6_k_neon, rows_q3_k_neon, rows_q2_k_neon,
                          rows_q8_0_neon, rows_q8_0_i16_neon};
    memcpy(ROWS[L_NEON], a, sizeof a);
#ifdef S2Q_DOTPROD
    rows_fn b[N_TYPES] = {rows_q4_k_dot, rows_q5_k_dot, rows_q6_k_dot, rows_q3_k_dot, rows_q2_k_dot,
                          rows_q8_0_dot, rows_q8_0_i16_neon};
    memcpy(ROWS[L_DOTPROD], b, sizeof b);
#else
    memcpy(ROWS[L_DOTPROD], a, sizeof a);  /* not offered by detect_level */
#endif
    best_level = detect_level();
    for (int i = 0; i <= best_level; i++) level_offered[i] = 1;  /* the ARM levels are a chain */
}
#endif /* S2Q_ARM */

/* ---- exported entry points (all-int64 signatures, called from numba) ---- */

/* x float32 (m, cols) -> xq int8 (m, cols), xd float32 (m, cols/256), xbs int16 (m, cols/16):
 * per 256 values q = round(x * 127 / max|x|), dx = max|x| / 127, bsum = sum of q per 16. */
S2Q_INLINE void quantize_body(const float *x, int64_t n_blocks, int8_t *xq, float *xd, int16_t *xbs,
                              float *resid) {
    for (int64_t b = 0; b < n_blocks; b++) {
        const float *v = x + b * QK;
        float amax = 0.0f;
        for (int i = 0; i < QK; i++) {
            float a = fabsf(v[i]);
            amax = a > amax ? a : amax;
        }
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        xd[b] = amax / 127.0f;
        for (int s = 0; s < 16; s++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                /* round half to even by the 1.5*2^23 trick: vectorizes, no libm call */
                int q = (int)((v[s * 16 + l] * id + 12582912.0f) - 12582912.0f);
                xq[b * QK + s * 16 + l] = (int8_t)q;
                sum += q;
            }
            xbs[b * 16 + s] = (int16_t)sum;
        }
        if (resid)  /* what the int8 values missed: |r| <= xd / 2 */
            for (int i = 0; i < QK; i++) resid[b * QK + i] = v[i] - xd[b] * (float)xq[b * QK + i];
    }
}

static void quantize_plain(const float *x, int64_t n_blocks, int8_t *xq, float *xd, int16_t *xbs,
                           float *resid) {
    quantize_body(x, n_blocks, xq, xd, xbs, resid);
}

#ifdef S2Q_X86
S2Q_TARGET(AVX2_T)
static void quantize_avx2(const float *x, int64_t n_blocks, int8_t *xq, float *xd, int16_t *xbs,
                          float *resid) {
    quantize_body(x, n_blocks, xq, xd, xbs, resid);
}
#else
#define quantize_avx2 quantize_plain
#define L_AVX2 1 /* any level: both names are the portable function */
#endif

/* resid: 0, or float32 like x: receives x minus its int8 approximation (the second plane). */
void s2q_quantize_q8k(int64_t x, int64_t n_values, int64_t xq, int64_t xd, int64_t xbs, int64_t resid) {
    (level >= L_AVX2 ? quantize_avx2 : quantize_plain)(
        (const float *)(intptr_t)x, n_values / QK, (int8_t *)(intptr_t)xq, (float *)(intptr_t)xd,
        (int16_t *)(intptr_t)xbs, (float *)(intptr_t)resid);
}

/* x float32 -> xq int16, xd float32 per 256 values: q = round(x * 32767 / max|x|), dx = max|x| / 32767
 * (the activations of the Q8_0_I16 rows), in I16_LAYOUT order. */
S2Q_INLINE void quantize_i16_body(const float *x, int64_t n_blocks, int16_t *xq, float *xd) {
    for (int64_t b = 0; b < n_blocks; b++) {
        const float *v = x + b * QK;
        float amax = 0.0f;
        for (int i = 0; i < QK; i++) {
            float a = fabsf(v[i]);
            amax = a > amax ? a : amax;
        }
        float id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        xd[b] = amax / 32767.0f;
        int16_t q[QK];
        for (int i = 0; i < QK; i++)  /* round half to even, as quantize_body */
            q[i] = (int16_t)(int)((v[i] * id + 12582912.0f) - 12582912.0f);
        /* I16_LAYOUT: per 64 values (blocks 2g, 2g+1): first halves of both, then second halves */
        for (int g = 0; g < QK / 64; g++)
            for (int h = 0; h < 2; h++)
                for (int k = 0; k < 2; k++)
                    memcpy(xq + b * QK + g * 64 + h * 32 + k * 16, q + g * 64 + k * 32 + h * 16, 32);
    }
}

static void quantize_i16_plain(const float *x, int64_t n_blocks, int16_t *xq, float *xd) {
    quantize_i16_body(x, n_blocks, xq, xd);
}

#ifdef S2Q_X86
S2Q_TARGET(AVX2_T) static void quantize_i16_avx2(const float *x, int64_t n_blocks, int16_t *xq, float *xd) {
    quantize_i16_body(x, n_blocks, xq, xd);
}
#else
#define quantize_i16_avx2 quantize_i16_plain
#endif

void s2q_quantize_i16(int64_t x, int64_t n_values, int64_t xq, int64_t xd) {
    (level >= L_AVX2 ? quantize_i16_avx2 : quantize_i16_plain)(
        (const float *)(intptr_t)x, n_values / QK, (int16_t *)(intptr_t)xq, (float *)(intptr_t)xd);
}

/* out[i, r] for r in [r0, r1), i < m (out_stride floats between activation rows). */
void s2q_gemv_rows(int64_t type, int64_t raw, int64_t row_bytes, int64_t r0, int64_t r1, int64_t xq,
                   int64_t xd, int64_t xbs, int64_t m, int64_t cols, int64_t out, int64_t out_stride) {
    if (type < 0 || type >= N_TYPES || m < 1 || m > MAX_M) return;  /* checked by the caller */
    ROWS[level][type]((const uint8_t *)(intptr_t)raw, row_bytes, r0, r1, (const int8_t *)(intptr_t)xq,
                      (const float *)(intptr_t)xd, (const int16_t *)(intptr_t)xbs, m, cols,
                      (float *)(intptr_t)out, out_stride);
}

/* Dynamic scheduling: every thread of the caller's parallel region calls this once, and each
 * claims tasks of ``task_rows`` rows from the shared counter ``*next`` until none is left.
 * With a static split (half the rows per thread of two) every GEMV waits for its slowest
 * thread, and on a desktop where another program shares a core that thread is often the one
 * the OS has descheduled. Claiming small tasks lets the thread that has a core do the rest.
 * Results do not depend on which thread computes a row: each row's arithmetic is the same. */
#if defined(_MSC_VER) && !defined(__clang__)
#define S2Q_CLAIM(p) _InterlockedExchangeAdd64((volatile __int64 *)(p), 1)
#else
#define S2Q_CLAIM(p) __atomic_fetch_add((int64_t *)(p), 1, __ATOMIC_RELAXED)
#endif

void s2q_gemv_tasks(int64_t type, int64_t raw, int64_t row_bytes, int64_t rows, int64_t task_rows,
                    int64_t xq, int64_t xd, int64_t xbs, int64_t m, int64_t cols, int64_t out,
                    int64_t out_stride, int64_t next) {
    if (task_rows < 1) return;
    for (;;) {
        int64_t r0 = S2Q_CLAIM((intptr_t)next) * task_rows;
        if (r0 >= rows) return;
        int64_t r1 = r0 + task_rows < rows ? r0 + task_rows : rows;
        s2q_gemv_rows(type, raw, row_bytes, r0, r1, xq, xd, xbs, m, cols, out, out_stride);
    }
}

/* Decode attention (transformer.attend's one-row case): its own file, built as part of this one. */
#include "_attend.c"

#ifndef S2Q_NO_PYTHON
/* RMSNorm, the QKV split with QK-norm and RoPE (transformer.py's small ops): its own file too,
 * only for the module (the standalone ARM check has no use for it). */
#include "_glue.c"
/* The GEMV's own worker threads (POSIX; S2P_POOL says whether they exist): its own file too. */
#include "_pool.c"
/* ---- Python module: introspection and addresses only; the work is called from numba ---- */

static PyObject *py_level(PyObject *self, PyObject *args) {
    (void)self; (void)args;
    return PyUnicode_FromString(LEVEL_NAMES[level]);
}

static PyObject *py_levels(PyObject *self, PyObject *args) {
    (void)self; (void)args;
    PyObject *l = PyList_New(0);
    if (!l) return NULL;
    for (int i = 0; i < N_LEVELS; i++) {
        if (!level_offered[i]) continue;
        PyObject *s = PyUnicode_FromString(LEVEL_NAMES[i]);
        if (!s || PyList_Append(l, s) < 0) { Py_XDECREF(s); Py_DECREF(l); return NULL; }
        Py_DECREF(s);
    }
    return l;
}

static PyObject *py_set_level(PyObject *self, PyObject *args) {
    (void)self;
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    for (int i = 0; i < N_LEVELS; i++)
        if (level_offered[i] && strcmp(name, LEVEL_NAMES[i]) == 0) { level = i; Py_RETURN_NONE; }
    PyErr_Format(PyExc_ValueError, "kernel level %s is not available on this CPU", name);
    return NULL;
}

static PyObject *py_set_tiled(PyObject *self, PyObject *args) {
    (void)self;
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
    q8_tiled = on;
    Py_RETURN_NONE;
}

static PyObject *py_avxvnni_encoding(PyObject *self, PyObject *args) {
    (void)self; (void)args;
#if defined(S2Q_X86)
    if (level_offered[L_AVXVNNI]) return PyUnicode_FromString(avxvnni_vex ? "vex" : "evex");
#endif
    return PyUnicode_FromString("");
}

/* preload(path, flags): dlopen a shared library with the GIL released, so that the app's
 * worker thread can map torch's and llvmlite's libraries (and run their static initializers:
 * hundreds of ms) while the UI thread keeps running; Python's own import (and ctypes) dlopen
 * them holding the GIL. The later import finds them loaded. Returns whether it loaded;
 * False where there is no dlopen (Windows). */
static PyObject *py_preload(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *path_obj;
    int flags;
    if (!PyArg_ParseTuple(args, "O&i", PyUnicode_FSConverter, &path_obj, &flags)) return NULL;
#ifdef S2Q_DLOPEN
    const char *path = PyBytes_AS_STRING(path_obj);
    void *handle;
    Py_BEGIN_ALLOW_THREADS
    handle = dlopen(path, flags);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (!handle) {
        const char *err = dlerror();
        PyErr_Format(PyExc_OSError, "%s", err ? err : "dlopen failed");
        return NULL;
    }
    /* the handle is kept open on purpose: the import that follows reuses the mapping */
    Py_RETURN_TRUE;
#else
    (void)flags;
    Py_DECREF(path_obj);
    Py_RETURN_FALSE;
#endif
}

/* pool_configure(threads, spin_us): the pool's size (the caller included; 1: no workers) and how
 * long an idle worker spins before it sleeps. Workers start or stop at the next job. */
static PyObject *py_pool_configure(PyObject *self, PyObject *args) {
    (void)self;
    int threads;
    long long spin_us;
    if (!PyArg_ParseTuple(args, "iL", &threads, &spin_us)) return NULL;
    if (threads < 1 || threads > 256 || spin_us < 0 || spin_us > 100000) {
        PyErr_Format(PyExc_ValueError, "pool_configure: threads 1-256 and spin_us 0-100000 (got %d, %lld)",
                     threads, spin_us);
        return NULL;
    }
#if S2P_POOL
    __atomic_store_n(&s2p_wanted, threads, __ATOMIC_RELAXED);
    __atomic_store_n(&s2p.spin_ns, (int64_t)spin_us * 1000, __ATOMIC_RELAXED);
#endif
    Py_RETURN_NONE;
}

/* pool_stats() -> (jobs published, worker joins, workers running, spin_us, sleeps without a spin
 * because the machine was busy); all 0 without a pool. */
static PyObject *py_pool_stats(PyObject *self, PyObject *args) {
    (void)self; (void)args;
#if S2P_POOL
    return Py_BuildValue("(LLiLL)", (long long)s2p.jobs, (long long)__atomic_load_n(&s2p.joined, __ATOMIC_RELAXED),
                         s2p.running, (long long)(s2p.spin_ns / 1000),
                         (long long)__atomic_load_n(&s2p.busy_naps, __ATOMIC_RELAXED));
#else
    return Py_BuildValue("(LLiLL)", 0LL, 0LL, 0, 0LL, 0LL);
#endif
}

static PyObject *py_addresses(PyObject *self, PyObject *args) {
    (void)self; (void)args;
    PyObject *d = Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "s2q_gemv_rows", (unsigned long long)(uintptr_t)&s2q_gemv_rows,
                                "s2q_gemv_tasks", (unsigned long long)(uintptr_t)&s2q_gemv_tasks,
                                "s2q_quantize_q8k", (unsigned long long)(uintptr_t)&s2q_quantize_q8k,
                                "s2q_quantize_i16", (unsigned long long)(uintptr_t)&s2q_quantize_i16,
                                "s2q_attend_tasks", (unsigned long long)(uintptr_t)&s2q_attend_tasks);
#if S2P_POOL
    if (d) {
        PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)&s2q_pool_gemv);
        if (!v || PyDict_SetItemString(d, "s2q_pool_gemv", v) < 0) { Py_XDECREF(v); Py_DECREF(d); return NULL; }
        Py_DECREF(v);
    }
#endif
    return d;
}

/* Integer arguments of a fast call (pointers as ints); -1 with an exception set on a bad one. */
static int int_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, int64_t *out, const char *name) {
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd integer arguments (%zd given)", name, want, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < want; i++) {
        out[i] = (int64_t)PyLong_AsLongLong(args[i]);
        if (out[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

/* attend(q, k_new, v_new, k_cache, v_cache, out, pos0, stride, new_stride, store, h, hkv, hd, f16) -> 0 or -1:
 * one request's decode attention in the calling thread, without the GIL (see _attend.c). */
static PyObject *py_attend(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[14], rc;
    if (int_args(args, nargs, 14, a, "attend") < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = s2q_attend_all((int64_t)(intptr_t)a, 1, a[10], a[11], a[12], a[13]);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong((long long)rc);
}

/* attend_many(seqs, n_seqs, h, hkv, hd, f16) -> 0 or -1: several requests (a table of
 * S2A_FIELDS int64 each at address seqs), in the calling thread, without the GIL. */
static PyObject *py_attend_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[6], rc;
    if (int_args(args, nargs, 6, a, "attend_many") < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = s2q_attend_all(a[0], a[1], a[2], a[3], a[4], a[5]);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong((long long)rc);
}

/* Integer arguments, except one float (eps) at position ``fpos``; -1 with an exception set. */
static int glue_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, Py_ssize_t fpos, int64_t *out,
                     float *eps, const char *name) {
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, want, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < want; i++) {
        if (i == fpos) {
            double e = PyFloat_AsDouble(args[i]);
            if (e == -1.0 && PyErr_Occurred()) return -1;
            *eps = (float)e; /* torch adds a Python float to a float32 tensor as float32 */
            out[i] = 0;
            continue;
        }
        out[i] = (int64_t)PyLong_AsLongLong(args[i]);
        if (out[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

#define P_F32(v) ((float *)(intptr_t)(v))

/* From this many values on (a prefill) a glue call lets other threads run meanwhile; below it
 * (a decode row: ~1 us) it keeps the GIL: handing it over and waiting to get it back could cost
 * more than the call, were another Python thread (the app's UI) busy. */
#define S2G_RELEASE_GIL_VALUES (1 << 16)
#define S2G_CALL(values, stmt)                                     \
    do {                                                          \
        if ((values) >= S2G_RELEASE_GIL_VALUES) {                 \
            Py_BEGIN_ALLOW_THREADS stmt; Py_END_ALLOW_THREADS     \
        } else {                                                  \
            stmt;                                                 \
        }                                                         \
    } while (0)

/* rms_norm(x, xs, w, out, os, n, d, eps): n rows of d (see _glue.c). */
static PyObject *py_rms_norm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[8];
    float eps = 0.0f;
    if (glue_args(args, nargs, 8, 7, a, &eps, "rms_norm") < 0) return NULL;
    S2G_CALL(a[5] * a[6], s2g_rms_rows(P_F32(a[0]), a[1], P_F32(a[2]), P_F32(a[3]), a[4], a[5], a[6], eps));
    Py_RETURN_NONE;
}

/* add_rms_norm(x, y, w, hsum, f, n, d, eps): hsum = x + y, f = RMSNorm(hsum) (see _glue.c). */
static PyObject *py_add_rms_norm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[8];
    float eps = 0.0f;
    if (glue_args(args, nargs, 8, 7, a, &eps, "add_rms_norm") < 0) return NULL;
    S2G_CALL(a[5] * a[6], s2g_add_rms_rows(P_F32(a[0]), P_F32(a[1]), P_F32(a[2]), P_F32(a[3]), P_F32(a[4]), a[5],
                                           a[6], eps));
    Py_RETURN_NONE;
}

/* qkv_heads(qkv, qs, n, h, hkv, hd, qn, kn, eps, cos, sin, q, k, v) -> 0, or -1 for a head
 * size it does not take (see _glue.c); qn/kn 0: no QK-norm. */
static PyObject *py_qkv_heads(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    int64_t a[14];
    float eps = 0.0f;
    if (glue_args(args, nargs, 14, 8, a, &eps, "qkv_heads") < 0) return NULL;
    if (a[5] < 2 || a[5] > S2G_MAX_HD || a[5] % 2) return PyLong_FromLong(-1);
    S2G_CALL(a[2] * (a[3] + 2 * a[4]) * a[5],
             s2g_qkv_heads(P_F32(a[0]), a[1], a[2], a[3], a[4], a[5], P_F32(a[6]), P_F32(a[7]), eps, P_F32(a[9]),
                           P_F32(a[10]), P_F32(a[11]), P_F32(a[12]), P_F32(a[13])));
    return PyLong_FromLong(0);
}

static PyMethodDef METHODS[] = {
    {"level", py_level, METH_NOARGS, "The instruction set the kernels use now."},
    {"levels", py_levels, METH_NOARGS, "The instruction sets this CPU supports, weakest first."},
    {"set_level", py_set_level, METH_VARARGS, "Use one of levels() (tests; the default is the best)."},
    {"set_tiled", py_set_tiled, METH_VARARGS,
     "set_tiled(on): the register-tiled Q8_0 rows (default) or the per-row loops for every m "
     "(tests and benchmarks: the outputs are the same bit for bit)."},
    {"avxvnni_encoding", py_avxvnni_encoding, METH_NOARGS,
     "How the avxvnni level's VNNI instructions are encoded here: 'vex' (AVX-VNNI), 'evex' "
     "(AVX-512 VNNI + VL), '' where the level is not offered."},
    {"preload", py_preload, METH_VARARGS,
     "preload(path, flags): dlopen a shared library with the GIL released (see _qdot.c)."},
    {"addresses", py_addresses, METH_NOARGS, "Entry-point addresses, for numba's linker."},
    {"pool_configure", py_pool_configure, METH_VARARGS,
     "pool_configure(threads, spin_us): the GEMV pool's thread count (the caller included) and how long an "
     "idle worker spins before it sleeps (see _pool.c)."},
    {"pool_stats", py_pool_stats, METH_NOARGS,
     "pool_stats() -> (jobs, worker joins, workers running, spin_us, busy naps) of the GEMV pool (zeros "
     "without one)."},
    {"attend", (PyCFunction)(void (*)(void))py_attend, METH_FASTCALL,
     "attend(q, k_new, v_new, k_cache, v_cache, out, pos0, stride, new_stride, store, h, hkv, hd, f16): one request's "
     "decode attention (addresses as ints; see _attend.c). Returns 0, or -1 for a shape it does not take."},
    {"attend_many", (PyCFunction)(void (*)(void))py_attend_many, METH_FASTCALL,
     "attend_many(seqs, n_seqs, h, hkv, hd, f16): several requests' decode attention (see _attend.c)."},
    {"rms_norm", (PyCFunction)(void (*)(void))py_rms_norm, METH_FASTCALL,
     "rms_norm(x, xs, w, out, os, n, d, eps): RMSNorm of n float32 rows (addresses as ints; see _glue.c)."},
    {"add_rms_norm", (PyCFunction)(void (*)(void))py_add_rms_norm, METH_FASTCALL,
     "add_rms_norm(x, y, w, hsum, f, n, d, eps): hsum = x + y, f = RMSNorm(hsum) (see _glue.c)."},
    {"qkv_heads", (PyCFunction)(void (*)(void))py_qkv_heads, METH_FASTCALL,
     "qkv_heads(qkv, qs, n, h, hkv, hd, qn, kn, eps, cos, sin, q, k, v): the QKV split, QK-norm and RoPE "
     "(see _glue.c). Returns 0, or -1 for a head size it does not take."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_qdot",
                                    "Integer-dot-product K-quant and Q8_0 GEMV rows (see _qdot.c).", -1, METHODS};

PyMODINIT_FUNC PyInit__qdot(void) {
    init_tables();
#if S2P_POOL
    s2p_init_once();
#endif
    level = best_level;
    PyObject *mod = PyModule_Create(&MODULE);
    if (mod) {
        PyModule_AddIntConstant(mod, "MAX_M", MAX_M);
        PyModule_AddIntConstant(mod, "Q4_K", T_Q4_K);
        PyModule_AddIntConstant(mod, "Q5_K", T_Q5_K);
        PyModule_AddIntConstant(mod, "Q6_K", T_Q6_K);
        PyModule_AddIntConstant(mod, "Q3_K", T_Q3_K);
        PyModule_AddIntConstant(mod, "Q2_K", T_Q2_K);
        PyModule_AddIntConstant(mod, "Q8_0", T_Q8_0);
        PyModule_AddIntConstant(mod, "Q8_0_I16", T_Q8_0_I16);
        PyModule_AddIntConstant(mod, "ATTEND_FIELDS", S2A_FIELDS);
        PyModule_AddIntConstant(mod, "ATTEND_MAX_HEAD_DIM", S2A_MAX_HD);
        PyModule_AddIntConstant(mod, "GLUE_MAX_HEAD_DIM", S2G_MAX_HD);
        PyModule_AddIntConstant(mod, "POOL", S2P_POOL);
    }
    return mod;
}
#endif /* S2Q_NO_PYTHON */
