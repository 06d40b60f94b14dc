/* Standalone check of _qdot.c's row functions at every level this CPU has (on AArch64: scalar,
 * neon, dotprod), without Python: built for AArch64 with a cross compiler and run under
 * qemu-aarch64 on an x86 machine (see README.md), or natively anywhere.
 *
 * For each block type, shape and m in {1, 2, 3, 4, 8, 16, 32} it checks that
 *   (a) every level's outputs are bit-identical to the scalar level's (the ARM levels keep the
 *       scalar float order; the x86 levels do not, so on x86 pass --bound B to require only
 *       |out - scalar| <= B * max|scalar|; test_intdot.py has the real per-output bounds),
 *   (b) every activation row computed among m rows is bit-identical to it computed alone,
 *   (c) the rows split into two calls (r0 > 0) give the same outputs as one call,
 * (d) on x86, the avxvnni level's outputs are bit-identical to the avx2 level's (the same
 *     rows with vpdpbusd/vpdpwssd in place of vpmaddubsw/vpmaddwd + add: the same integers);
 *     run under qemu-x86_64 with a CPU model that has AVX-VNNI and no AVX-512 it checks the
 *     VEX-encoded rows, which a CPU with AVX-512 VNNI alone cannot run (README.md),
 * and prints a hash of the scalar level's outputs per type: built with the same flags it is the
 * same on x86 and AArch64 (IEEE float, no FMA contraction under -std=c99), which ties the ARM
 * levels to the x86 scalar level that tests/engine/test_intdot.py checks against float math.
 * Blocks are random bytes with sane float16 scales (every bit pattern of the other fields is a
 * valid block); activations are random floats quantized by the file's own quantizers.
 * It also checks the decode attention kernel (_attend.c) at every level: against a double
 * computation within the bound of tests/engine/test_attend_kernel.py, batched == alone bit for
 * bit, and the float16 store (check_attend).
 * Exit status 0 when every check passed; one line per failure otherwise. */
#define S2Q_NO_PYTHON 1
#include "../../s2studio/engine/kernels/_qdot.c"

#include <stdio.h>
#include <stdlib.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {  /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}
static float rndf(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

/* a float16 of magnitude 2^-10 .. 2^-2 with a random mantissa and sign */
static void put_f16(uint8_t *p) {
    uint16_t h = (uint16_t)(((5 + rnd() % 9) << 10) | (rnd() & 0x3ff) | ((rnd() & 1) << 15));
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

typedef struct { const char *name; int type, bb, per, f16[2], nf16, i16; } tinfo;
static const tinfo TYPES[] = {
    {"Q4_K", T_Q4_K, 144, 256, {0, 2}, 2, 0}, {"Q5_K", T_Q5_K, 176, 256, {0, 2}, 2, 0},
    {"Q6_K", T_Q6_K, 210, 256, {208, 0}, 1, 0}, {"Q3_K", T_Q3_K, 110, 256, {108, 0}, 1, 0},
    {"Q2_K", T_Q2_K, 84, 256, {80, 82}, 2, 0}, {"Q8_0", T_Q8_0, 34, 32, {0, 0}, 1, 0},
    {"Q8_0_I16", T_Q8_0_I16, 34, 32, {0, 0}, 1, 1},
};

static int failures = 0;
static uint64_t hash;  /* FNV-1a of the scalar level's outputs of one type */
static double bound = -1.0;  /* levels vs scalar (--bound): < 0: bit-identical required */

/* bnd < 0: bit-identical required; else |got - ref| <= bnd * max|ref| */
static void compare(const char *what, const tinfo *t, int lv, int64_t rows, int64_t cols, int64_t m,
                    const float *ref, const float *got, int64_t n, double bnd) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) amax = fabsf(ref[i]) > amax ? fabsf(ref[i]) : amax;
    for (int64_t i = 0; i < n; i++) {
        int bad = bnd < 0 ? memcmp(ref + i, got + i, 4) != 0 : fabsf(ref[i] - got[i]) > bnd * amax;
        if (bad) {
            printf("FAIL %s %s level=%s rows=%lld cols=%lld m=%lld at %lld: %.9g vs %.9g\n", what, t->name,
                   LEVEL_NAMES[lv], (long long)rows, (long long)cols, (long long)m, (long long)i, ref[i], got[i]);
            failures++;
            return;
        }
    }
}

/* weights: rows x wcols (wcols a multiple of the type's block); activations padded to cols */
static void check_shape(const tinfo *t, int64_t rows, int64_t wcols, int64_t *n_checks) {
    int64_t cols = (wcols + QK - 1) / QK * QK, nblk = wcols / t->per, row_bytes = nblk * t->bb;
    uint8_t *raw = malloc((size_t)(rows * row_bytes));
    for (int64_t i = 0; i < rows * row_bytes; i++) raw[i] = (uint8_t)rnd();
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < nblk; b++)
            for (int f = 0; f < t->nf16; f++) put_f16(raw + r * row_bytes + b * t->bb + t->f16[f]);
    const int64_t MS[] = {1, 2, 3, 4, 8, 16, 32};
    for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
        int64_t m = MS[mi], nc = cols / QK;
        float *x = calloc((size_t)(m * cols), 4), *xd = malloc((size_t)(m * nc) * 4);
        for (int64_t i = 0; i < m; i++)
            for (int64_t c = 0; c < wcols; c++) x[i * cols + c] = rndf() * (1.0f + (float)(c % 7));
        int8_t *xq = malloc((size_t)(m * cols) * 2);  /* int16 for Q8_0_I16 */
        int16_t *xbs = malloc((size_t)(m * cols / 16) * 2);
        if (t->i16) s2q_quantize_i16((int64_t)(intptr_t)x, m * cols, (int64_t)(intptr_t)xq, (int64_t)(intptr_t)xd);
        else s2q_quantize_q8k((int64_t)(intptr_t)x, m * cols, (int64_t)(intptr_t)xq, (int64_t)(intptr_t)xd,
                              (int64_t)(intptr_t)xbs, 0);
        int64_t xbytes = t->i16 ? 2 : 1;
        float *ref = malloc((size_t)(m * rows) * 4), *out = malloc((size_t)(m * rows) * 4);
        float *one = malloc((size_t)rows * 4), *avx2 = malloc((size_t)(m * rows) * 4);
        for (int lv = 0; lv < N_LEVELS; lv++) {
            if (!level_offered[lv]) continue;
            float *dst = lv == 0 ? ref : out;
            /* (c): two calls, rows [0, h) and [h, rows) */
            int64_t h = rows / 2;
            ROWS[lv][t->type](raw, row_bytes, 0, h, xq, xd, xbs, m, cols, dst, rows);
            ROWS[lv][t->type](raw, row_bytes, h, rows, xq, xd, xbs, m, cols, dst, rows);
            if (lv == 0)
                for (size_t i = 0; i < (size_t)(m * rows) * 4; i++) hash = (hash ^ ((uint8_t *)ref)[i]) * 0x100000001b3ull;
            if (lv > 0) compare("level-vs-scalar", t, lv, rows, wcols, m, ref, out, m * rows, bound);
            (*n_checks)++;
#if defined(S2Q_X86)
            if (lv == L_AVX2) memcpy(avx2, out, (size_t)(m * rows) * 4);
            if (lv == L_AVXVNNI) {
                compare("avxvnni-vs-avx2", t, lv, rows, wcols, m, avx2, out, m * rows, -1.0);
                (*n_checks)++;
            }
#endif
            /* (b): each activation row alone */
            for (int64_t i = 0; i < m; i++) {
                ROWS[lv][t->type](raw, row_bytes, 0, rows, xq + i * cols * xbytes, xd + i * nc,
                                  xbs + i * (cols / 16), 1, cols, one, rows);
                compare("row-alone-vs-among", t, lv, rows, wcols, m, dst + i * rows, one, rows, -1.0);
                (*n_checks)++;
            }
        }
        int nonzero = 0;
        for (int64_t i = 0; i < m * rows; i++) nonzero |= ref[i] != 0.0f;
        if (!nonzero) { printf("FAIL %s: all outputs zero\n", t->name); failures++; }
        free(x); free(xd); free(xq); free(xbs); free(ref); free(out); free(one); free(avx2);
    }
    free(raw);
}

/* Decode attention (_attend.c) at every level: against a double-precision computation within
 * 2 float32 ulps of max|v| (1 + max |qs||k|) (tests/engine/test_attend_kernel.py's bound),
 * two requests in one call bit-identical to each alone, and the fused store's float16 rounding
 * against the portable conversion. f16: the cache holds float16. */
static void check_attend(int lv, int64_t h, int64_t hkv, int64_t hd, int64_t pos0, int f16, int64_t *n_checks) {
    int64_t cap = pos0 + 2, g = h / hkv;
    float *q = malloc(sizeof(float) * h * hd * 2), *kn = malloc(sizeof(float) * hkv * hd * 2);
    float *vn = malloc(sizeof(float) * hkv * hd * 2), *out = malloc(sizeof(float) * h * hd * 2);
    float *one = malloc(sizeof(float) * h * hd);
    size_t esz = f16 ? 2 : 4;
    unsigned char *kc = malloc(esz * hkv * cap * 2 * hd), *vc = malloc(esz * hkv * cap * 2 * hd);
    for (int64_t i = 0; i < h * hd * 2; i++) q[i] = rndf() * 2.0f;
    for (int64_t i = 0; i < hkv * hd * 2; i++) { kn[i] = rndf(); vn[i] = rndf(); }
    for (int64_t i = 0; i < hkv * cap * 2 * hd; i++) {
        float a = rndf(), b = rndf();
        if (f16) { ((uint16_t *)kc)[i] = s2a_f32_to_f16(a); ((uint16_t *)vc)[i] = s2a_f32_to_f16(b); }
        else { ((float *)kc)[i] = a; ((float *)vc)[i] = b; }
    }
    /* request r: q/k/v rows r of 2 (k/v as layer_forward's (hkv, 2, hd)), its own cache half */
    int64_t table[2][S2A_FIELDS];
    for (int r = 0; r < 2; r++) {
        int64_t t[S2A_FIELDS] = {(int64_t)(intptr_t)(q + r * h * hd), (int64_t)(intptr_t)(kn + r * hd),
                                 (int64_t)(intptr_t)(vn + r * hd), (int64_t)(intptr_t)(kc + r * esz * hkv * cap * hd),
                                 (int64_t)(intptr_t)(vc + r * esz * hkv * cap * hd),
                                 (int64_t)(intptr_t)(out + r * h * hd), pos0 + r, cap * hd, 2 * hd, 0};
        memcpy(table[r], t, sizeof t);
    }
    level = lv;
    if (s2q_attend_all((int64_t)(intptr_t)table, 2, h, hkv, hd, f16) != 0) {
        printf("FAIL attend %s: refused h=%lld hd=%lld\n", LEVEL_NAMES[lv], (long long)h, (long long)hd);
        failures++;
    }
    for (int r = 0; r < 2; r++) {
        int64_t p0 = pos0 + r, t1[S2A_FIELDS];
        memcpy(t1, table[r], sizeof t1);
        t1[5] = (int64_t)(intptr_t)one;
        s2q_attend_all((int64_t)(intptr_t)t1, 1, h, hkv, hd, f16);
        if (memcmp(one, out + r * h * hd, sizeof(float) * h * hd) != 0) {
            printf("FAIL attend %s: batched != alone (h=%lld hd=%lld pos0=%lld)\n", LEVEL_NAMES[lv], (long long)h,
                   (long long)hd, (long long)p0);
            failures++;
        }
        const unsigned char *kr = kc + r * esz * hkv * cap * hd, *vr = vc + r * esz * hkv * cap * hd;
        for (int64_t i = 0; i < h; i++) {
            int64_t kh = i / g;
            double sc[4200], mx = -1e300, sum = 0.0, maxv = 0.0, reach = 0.0, qn = 0.0;
            float scale = (float)(1.0 / sqrt((double)hd));
            for (int64_t d = 0; d < hd; d++) { double x = (double)(q[r * h * hd + i * hd + d] * scale); qn += x * x; }
            for (int64_t j = 0; j <= p0; j++) {
                double dot = 0.0, kk = 0.0;
                for (int64_t d = 0; d < hd; d++) {
                    double kv = j < p0 ? (f16 ? f16_to_f32(((const uint16_t *)kr)[(kh * cap + j) * hd + d])
                                              : ((const float *)kr)[(kh * cap + j) * hd + d])
                                       : kn[kh * 2 * hd + r * hd + d];
                    dot += (double)(q[r * h * hd + i * hd + d] * scale) * kv;
                    kk += kv * kv;
                }
                sc[j] = dot;
                mx = dot > mx ? dot : mx;
                reach = sqrt(qn * kk) > reach ? sqrt(qn * kk) : reach;
            }
            for (int64_t j = 0; j <= p0; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
            for (int64_t d = 0; d < hd; d++) {
                double o = 0.0;
                for (int64_t j = 0; j <= p0; j++) {
                    double vv = j < p0 ? (f16 ? f16_to_f32(((const uint16_t *)vr)[(kh * cap + j) * hd + d])
                                              : ((const float *)vr)[(kh * cap + j) * hd + d])
                                       : vn[kh * 2 * hd + r * hd + d];
                    o += sc[j] / sum * vv;
                    maxv = fabs(vv) > maxv ? fabs(vv) : maxv;
                }
                sc[p0 + 1 + d] = o;  /* after the scores: kept for the comparison below */
            }
            double tol = 2.0 * ldexp(1.0, -23) * maxv * (1.0 + reach);
            for (int64_t d = 0; d < hd; d++) {
                double err = fabs(out[r * h * hd + i * hd + d] - sc[p0 + 1 + d]);
                if (!(err <= tol)) {
                    printf("FAIL attend %s: h=%lld hd=%lld pos0=%lld f16=%d head %lld: error %.3g > %.3g\n",
                           LEVEL_NAMES[lv], (long long)h, (long long)hd, (long long)p0, f16, (long long)i, err, tol);
                    failures++;
                    break;
                }
            }
            (*n_checks)++;
        }
    }
    /* the fused store: rounded to float16 as the portable conversion does */
    int64_t st[S2A_FIELDS];
    memcpy(st, table[0], sizeof st);
    st[9] = 2;
    s2q_attend_all((int64_t)(intptr_t)st, 1, h, hkv, hd, f16);
    for (int64_t kh = 0; kh < hkv; kh++)
        for (int64_t d = 0; d < hd; d++) {
            uint16_t want = s2a_f32_to_f16(kn[kh * 2 * hd + d]);
            int ok = f16 ? ((const uint16_t *)kc)[(kh * cap + pos0) * hd + d] == want
                         : ((const float *)kc)[(kh * cap + pos0) * hd + d] == f16_to_f32(want);
            if (!ok) {
                printf("FAIL attend %s: stored k differs (hd=%lld f16=%d)\n", LEVEL_NAMES[lv], (long long)hd, f16);
                failures++;
                kh = hkv;
                break;
            }
        }
    free(q); free(kn); free(vn); free(out); free(one); free(kc); free(vc);
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--bound") == 0) bound = atof(argv[2]);
    init_tables();
    printf("levels:");
    for (int lv = 0; lv < N_LEVELS; lv++)
        if (level_offered[lv]) printf(" %s", LEVEL_NAMES[lv]);
#if defined(S2Q_X86)
    if (level_offered[L_AVXVNNI]) printf(" (avxvnni %s-encoded)", avxvnni_vex ? "VEX" : "EVEX");
#endif
    printf("\n");
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        const tinfo *t = &TYPES[ti];
        printf("%s own functions:", t->name);
        for (int lv = 1; lv < N_LEVELS; lv++)
            if (level_offered[lv]) printf(" %s=%s", LEVEL_NAMES[lv], ROWS[lv][t->type] != ROWS[0][t->type] ? "yes" : "no(scalar)");
        int64_t n = 0;
        hash = 0xcbf29ce484222325ull;
        const int64_t shapes[][2] = {{1, 256}, {5, 512}, {17, 1280}, {8, 2560}};
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) check_shape(t, shapes[si][0], shapes[si][1], &n);
        if (t->per == 32) {  /* Q8_0 matrices whose cols are not a multiple of 256 (padded activations) */
            const int64_t odd[][2] = {{3, 32}, {6, 96}, {9, 288}, {4, 800}};
            for (size_t si = 0; si < sizeof odd / sizeof odd[0]; si++) check_shape(t, odd[si][0], odd[si][1], &n);
        }
        printf("  %lld comparisons; scalar outputs hash %016llx\n", (long long)n, (unsigned long long)hash);
    }
    int64_t na = 0;
    const int64_t ashapes[][3] = {{32, 8, 128}, {4, 2, 16}, {6, 3, 12}, {8, 2, 40}};
    const int64_t apos[] = {1, 5, 70, 300};
    for (int lv = 0; lv < N_LEVELS; lv++) {
        if (!level_offered[lv]) continue;
        for (size_t si = 0; si < sizeof ashapes / sizeof ashapes[0]; si++)
            for (size_t pi = 0; pi < sizeof apos / sizeof apos[0]; pi++)
                for (int f16 = 0; f16 < 2; f16++)
                    check_attend(lv, ashapes[si][0], ashapes[si][1], ashapes[si][2], apos[pi], f16, &na);
    }
    level = best_level;
    printf("attention: %lld heads checked\n", (long long)na);
    printf(failures ? "FAILED: %d\n" : "OK\n", failures);
    return failures ? 1 : 0;
}
