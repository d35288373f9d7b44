/* The static decoder's C kernels for bf16 on a CPU: decode attention and RMSNorm. Built by
 * ascent/rollout/native.py with the machine's own compiler (-march=native) and run on
 * torch's OpenMP threads.
 *
 * decode_attention: one decode step of attention for a Llama-family model, one call a
 * layer: rotate the step's queries and key (rotary embedding), write the key and value into
 * the row's cache, and attend over the row's prompt (held once for its group of sampled
 * completions) and the row's own tokens, in float32 throughout.
 *
 * Why C: in eager PyTorch this is some twenty small operations a layer (cache copies for the
 * bf16 products, group reshapes, four batched products of 3 x 64 by 64 x t, a softmax,
 * conversions), each costing more in dispatch and thread synchronisation on 2 cores than in
 * arithmetic. Here each (row, key/value head) is one task: its keys are read a tile of 32
 * positions at a time with the group's queries held in registers, its values once for all
 * of the group's query heads, and the next task's cache is prefetched meanwhile.
 *
 * Layouts (all contiguous; bf16 as raw uint16):
 *   qkv      (B, heads + 2 kv, d)     this step's projections, before the rotary embedding
 *   cos, sin (B, d) float32           sin with rotate_half's sign folded in (negative in
 *                                     the first half), so that the rotated
 *                                     x[i] = x[i] cos[i] + x[(i + d/2) % d] sin[i]
 *   pk       (U, kv, Pp / 32, d, 32)  prompt keys in tiles of 32 positions, each tile
 *                                     transposed (d rows of 32 positions), so a block of
 *                                     scores reads one contiguous tile; Pp >= P, a multiple
 *                                     of 32 (what lies past P is never used)
 *   pv       (U, kv, P, d)            prompt values
 *   ok       (R, kv, Tp / 32, d, 32)  each row's own keys, tiled the same way; Tp >= T
 *   ov       (R, kv, T, d)            each row's own values
 *   phys     (B,)                     each active row's place among the R = U n rows
 *   start    (U,)                     each prompt's first position that is not padding
 *                                     (prompts are left-padded)
 *   out      (B, heads d)             the attention output, bf16
 *   scratch  (threads, g (Pp + Tp))   float32
 * Query head h reads key/value head h / g, g = heads / kv (grouped-query attention).
 */
#include <stdint.h>
#include <string.h>
#include <omp.h>

/* Positions go in blocks of 32: 32 bf16 values load as 16 32-bit words, whose high halves
 * are the odd elements as float32 (mask the low bits) and whose low halves, shifted up, are
 * the even ones: two float32 vectors for two operations, no shuffles. Scores of a block are
 * kept in that order, the 16 even positions then the 16 odd ones (`slot`). */
#define BLOCK 32
typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef uint32_t vu __attribute__((vector_size(64)));

static inline void load_pairs(const uint16_t *p, vf *even, vf *odd) {
    vu u;
    memcpy(&u, p, sizeof u);
    *even = (vf)(u << 16);
    *odd = (vf)(u & 0xffff0000u);
}

/* bf16 bits of x, rounded to nearest (ties to even), in the high half of each word */
static inline vu round_high(vf x) {
    vu u = (vu)x;
    vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    vu nan = (vu)(x != x);
    return (r & ~nan) | (0x7fc00000u & nan);
}

typedef uint16_t vh __attribute__((vector_size(32)));

static inline vf load16(const uint16_t *p) {
    vh h;
    memcpy(&h, p, sizeof h);
    return (vf)(__builtin_convertvector(h, vu) << 16);
}

static inline void store16(uint16_t *p, vf x) {
    vh h = __builtin_convertvector(round_high(x) >> 16, vh);
    memcpy(p, &h, sizeof h);
}

/* 32 bf16 values from their even and odd elements */
static inline void store_pairs(uint16_t *p, vf even, vf odd) {
    vu u = round_high(odd) | (round_high(even) >> 16);
    memcpy(p, &u, sizeof u);
}

static inline float bf16_to_f32(uint16_t x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (f != f) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline vf broadcast(float x) { return (vf){0} + x; }

static inline vf select(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }

/* exp(x) for x <= 0: x = k ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor series to
 * degree 7 (relative error below 1e-8), 2^k built in the exponent bits. Below -87 the
 * result is clamped to about 1.6e-38 (against a row maximum of exp(0) = 1: nothing). */
static inline vf exp_nonpositive(vf x) {
    x = select(x < -87.0f, broadcast(-87.0f), x);
    vf k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln2) */
    vf r = x - k * 0.693145751953125f - k * 1.428606820309417232e-6f;
    vf p = r * (1.0f / 5040) + (1.0f / 720);
    p = p * r + (1.0f / 120);
    p = p * r + (1.0f / 24);
    p = p * r + (1.0f / 6);
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    vi e = (__builtin_convertvector(k, vi) + 127) << 23;
    return p * (vf)e;
}

static inline float hmax(vf x) {
    float m = x[0];
    for (int l = 1; l < 16; l++) m = x[l] > m ? x[l] : m;
    return m;
}

static inline float hsum(vf x) {
    float s = 0;
    for (int l = 0; l < 16; l++) s += x[l];
    return s;
}

/* which lanes of half `odd` of the block at `base` hold a position in [lo, hi) */
static inline vi in_range(int64_t base, int odd, int64_t lo, int64_t hi) {
    const vi even = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const vi idx = even + (int32_t)(base + odd);
    return (idx >= (int32_t)lo) & (idx < (int32_t)hi);
}

/* where position p's score sits */
static inline int64_t slot(int64_t p) {
    return (p & ~(int64_t)31) + ((p & 1) << 4) + ((p & 31) >> 1);
}

/* y = scale (x cos + roll(x, D / 2) sin): the rotary embedding, rotate_half's sign in sin */
static inline __attribute__((always_inline)) void rotate(
    const uint16_t *x, const float *c, const float *sn, float scale, float *y, const int64_t D) {
    const int64_t half = D / 2;
    for (int64_t i = 0; i < half; i++)
        y[i] = (bf16_to_f32(x[i]) * c[i] + bf16_to_f32(x[i + half]) * sn[i]) * scale;
    for (int64_t i = half; i < D; i++)
        y[i] = (bf16_to_f32(x[i]) * c[i] + bf16_to_f32(x[i - half]) * sn[i]) * scale;
}

/* Memory to bring into cache while computing: the next task's own keys and values. With
 * the caches of 30 layers far larger than the last-level cache the kernel otherwise waits on
 * memory about as long as it computes (measured on 2 cores: 22 ms a step against 11 with a
 * single layer's caches hot). One line per step of the inner loops, so that the requests
 * spread over the task instead of filling the line-fill buffers at once. */
typedef struct {
    const char *at[2], *end[2]; /* up to 2 ranges, in order */
    int i, count;
} ahead_t;

static inline void ahead_add(ahead_t *f, const void *p, int64_t bytes) {
    f->at[f->count] = (const char *)p;
    f->end[f->count++] = (const char *)p + bytes;
}

static inline void fetch_ahead(ahead_t *f) {
    while (f->i < f->count && f->at[f->i] >= f->end[f->i]) f->i++;
    if (f->i == f->count) return;
    __builtin_prefetch(f->at[f->i], 0, 3);
    f->at[f->i] += 64;
}

/* Scores of G queries (q: G x D, float32) against keys in tiles (., D, 32), for the blocks
 * covering positions [first, end), into s (G rows of `row` floats, by slot). NB blocks at a
 * time, so that at least 6 independent sums are in flight to cover a multiply-add's
 * latency. */
static inline __attribute__((always_inline)) void scores(
    const float *q, const uint16_t *keys, int64_t first, int64_t end, float *s, int64_t row,
    ahead_t *ahead, const int G, const int64_t D) {
    const int NB = G == 1 ? 4 : G == 2 ? 2 : 1;
    int64_t p = first & ~(int64_t)(BLOCK - 1);
    for (; p < end; p += NB * BLOCK) {
        const int nb = p + (NB - 1) * BLOCK < end ? NB : 1;
        vf acc[2 * 4 * 8];
        for (int x = 0; x < 2 * G * NB; x++) acc[x] = broadcast(0.0f);
        for (int64_t i = 0; i < D; i++) {
            fetch_ahead(ahead);
            for (int c = 0; c < nb; c++) {
                vf even, odd;
                load_pairs(keys + (p + c * BLOCK) * D + i * BLOCK, &even, &odd);
                for (int h = 0; h < G; h++) {
                    acc[(h * NB + c) * 2] += q[h * D + i] * even;
                    acc[(h * NB + c) * 2 + 1] += q[h * D + i] * odd;
                }
            }
        }
        for (int h = 0; h < G; h++)
            for (int c = 0; c < nb; c++)
                memcpy(s + h * row + p + c * BLOCK, &acc[(h * NB + c) * 2], 2 * sizeof(vf));
        if (nb != NB) p -= (NB - 1) * BLOCK; /* one block done, not NB */
    }
}

/* m[h] = max(m[h], the largest score of row h over positions [lo, hi)) */
static inline __attribute__((always_inline)) void row_max(
    const float *s, int64_t row, int64_t lo, int64_t hi, float *m, const int G) {
    for (int h = 0; h < G; h++) {
        vf best = broadcast(-3.0e38f);
        for (int64_t p = lo & ~(int64_t)(BLOCK - 1); p < hi; p += BLOCK) {
            for (int odd = 0; odd < 2; odd++) {
                vf x;
                memcpy(&x, s + h * row + p + 16 * odd, sizeof x);
                x = select(in_range(p, odd, lo, hi), x, broadcast(-3.0e38f));
                best = select(x > best, x, best);
            }
        }
        float b = hmax(best);
        m[h] = b > m[h] ? b : m[h];
    }
}

/* s = exp(s - m) over positions [lo, hi) (whole blocks written: zero outside the range), and
 * each row's sum added to sums */
static inline __attribute__((always_inline)) void exponentiate(
    float *s, int64_t row, int64_t lo, int64_t hi, const float *m, float *sums, const int G) {
    for (int h = 0; h < G; h++) {
        vf total = broadcast(0.0f);
        for (int64_t p = lo & ~(int64_t)(BLOCK - 1); p < hi; p += BLOCK) {
            for (int odd = 0; odd < 2; odd++) {
                vf x;
                memcpy(&x, s + h * row + p + 16 * odd, sizeof x);
                vi keep = in_range(p, odd, lo, hi);
                x = (vf)((vi)exp_nonpositive(select(keep, x - m[h], broadcast(-87.0f))) & keep);
                memcpy(s + h * row + p + 16 * odd, &x, sizeof x);
                total += x;
            }
        }
        sums[h] += hsum(total);
    }
}

/* acc += sum over positions [lo, hi) of w[h][slot(p)] values[p], values laid out (., D);
 * acc holds G x D / 32 pairs of (even, odd) vectors */
static inline __attribute__((always_inline)) void weigh(
    vf *acc, const float *w, int64_t row, const uint16_t *values, int64_t lo, int64_t hi,
    ahead_t *ahead, const int G, const int64_t D) {
    for (int64_t p = lo; p < hi; p++) {
        fetch_ahead(ahead);
        const uint16_t *v = values + p * D;
        const int64_t at = slot(p);
        for (int64_t c = 0; c < D / BLOCK; c++) {
            vf even, odd;
            load_pairs(v + c * BLOCK, &even, &odd);
            for (int h = 0; h < G; h++) {
                acc[(h * (D / BLOCK) + c) * 2] += w[h * row + at] * even;
                acc[(h * (D / BLOCK) + c) * 2 + 1] += w[h * row + at] * odd;
            }
        }
    }
}

typedef struct {
    const uint16_t *qkv;
    const float *cos, *sin;
    const uint16_t *pk, *pv;
    uint16_t *ok, *ov;
    const int64_t *phys, *start;
    uint16_t *out;
    float *scratch;
    int64_t rows, n, heads, kv, P, Pp, T, Tp, t;
    float scale;
} args_t;

/* one row's key/value head j: its cache write and the attention of its G query heads */
static inline __attribute__((always_inline)) void task(
    const args_t *a, int64_t b, int64_t j, float *scratch, const int G, const int64_t D) {
    const int64_t r = a->phys[b], u = r / a->n, first = a->start[u], t = a->t;
    ahead_t ahead = {.i = 0, .count = 0};
    if (j + 1 < a->kv || b + 1 < a->rows) { /* the next task's data, positions 0..t */
        const int64_t nb = j + 1 < a->kv ? b : b + 1, nj = j + 1 < a->kv ? j + 1 : 0;
        const int64_t own = a->phys[nb] * a->kv + nj;
        ahead_add(&ahead, a->ok + own * a->Tp * D, ((t | (BLOCK - 1)) + 1) * D * 2);
        ahead_add(&ahead, a->ov + own * a->T * D, (t + 1) * D * 2);
    }
    const uint16_t *in = a->qkv + b * (a->heads + 2 * a->kv) * D;
    const float *c = a->cos + b * D, *sn = a->sin + b * D;

    /* the step's key, rotated, and its value into the row's cache at position t */
    uint16_t *own_keys = a->ok + (r * a->kv + j) * a->Tp * D;
    uint16_t *own_values = a->ov + (r * a->kv + j) * a->T * D;
    float key[128];
    rotate(in + (a->heads + j) * D, c, sn, 1.0f, key, D);
    uint16_t *tile = own_keys + (t & ~(int64_t)(BLOCK - 1)) * D + (t & (BLOCK - 1));
    for (int64_t i = 0; i < D; i++) tile[i * BLOCK] = f32_to_bf16(key[i]);
    memcpy(own_values + t * D, in + (a->heads + a->kv + j) * D, D * sizeof(uint16_t));

    /* the group's queries, rotated and scaled, in float32 */
    float q[8 * 128];
    for (int h = 0; h < G; h++) rotate(in + (j * G + h) * D, c, sn, a->scale, q + h * D, D);

    float *sp = scratch, *so = scratch + G * a->Pp; /* prompt and own scores */
    const uint16_t *pk = a->pk + (u * a->kv + j) * a->Pp * D;
    const uint16_t *pv = a->pv + (u * a->kv + j) * a->P * D;
    scores(q, pk, first, a->P, sp, a->Pp, &ahead, G, D);
    scores(q, own_keys, 0, t + 1, so, a->Tp, &ahead, G, D);

    float m[8], sums[8];
    for (int h = 0; h < G; h++) m[h] = -3.0e38f, sums[h] = 0.0f;
    row_max(sp, a->Pp, first, a->P, m, G);
    row_max(so, a->Tp, 0, t + 1, m, G);
    exponentiate(sp, a->Pp, first, a->P, m, sums, G);
    exponentiate(so, a->Tp, 0, t + 1, m, sums, G);

    vf acc[8 * (128 / 16)];
    for (int64_t x = 0; x < G * (D / 16); x++) acc[x] = broadcast(0.0f);
    weigh(acc, sp, a->Pp, pv, first, a->P, &ahead, G, D);
    weigh(acc, so, a->Tp, own_values, 0, t + 1, &ahead, G, D);

    uint16_t *o = a->out + b * a->heads * D + j * G * D;
    for (int h = 0; h < G; h++) {
        const float inv = 1.0f / sums[h];
        for (int64_t cc = 0; cc < D / BLOCK; cc++) {
            const int64_t x = (h * (D / BLOCK) + cc) * 2;
            store_pairs(o + h * D + cc * BLOCK, acc[x] * inv, acc[x + 1] * inv);
        }
    }
}

#define CASE(G, D)                                                                           \
    if (g == G && d == D) {                                                                  \
        _Pragma("omp parallel for schedule(static) num_threads(threads)")                   \
        for (int64_t i = 0; i < rows * kv; i++)                                              \
            task(&a, i / kv, i % kv, scratch + omp_get_thread_num() * per_thread, G, D);     \
        return 0;                                                                            \
    }

/* Returns 0, or -1 for a shape this build has no kernel for (the caller then uses torch). */
int decode_attention(
    const uint16_t *qkv, const float *cos, const float *sin, const uint16_t *pk,
    const uint16_t *pv, uint16_t *ok, uint16_t *ov, const int64_t *phys, const int64_t *start,
    uint16_t *out, float *scratch, int64_t rows, int64_t n, int64_t heads, int64_t kv,
    int64_t d, int64_t P, int64_t Pp, int64_t T, int64_t Tp, int64_t t, float scale,
    int threads) {
    if (kv <= 0 || heads % kv || Pp % BLOCK || Tp % BLOCK || Pp < P || Tp < T || t >= T)
        return -1;
    const args_t a = {qkv, cos, sin, pk, pv, ok, ov, phys, start, out, scratch,
                      rows, n, heads, kv, P, Pp, T, Tp, t, scale};
    const int64_t g = heads / kv, per_thread = g * (Pp + Tp);
    CASE(1, 64) CASE(2, 64) CASE(3, 64) CASE(4, 64) CASE(5, 64) CASE(6, 64) CASE(7, 64)
    CASE(8, 64) CASE(1, 128) CASE(2, 128) CASE(3, 128) CASE(4, 128) CASE(5, 128)
    CASE(6, 128) CASE(7, 128) CASE(8, 128) CASE(1, 32) CASE(2, 32) CASE(3, 32) CASE(4, 32)
    CASE(5, 32) CASE(6, 32) CASE(7, 32) CASE(8, 32)
    return -1;
}

/* The Llama RMSNorm of each row of x (rows x H, bf16) times its weight (H, bf16), into out:
 * statistics and products in float32, one rounding to bf16 at the end. Torch's bf16
 * rms_norm costs about 50 us a call at (128, 576) on 2 cores, some 3 ms a decode step. */
void rms_norm(const uint16_t *x, const uint16_t *weight, uint16_t *out, int64_t rows, int64_t H,
              float eps, int threads) {
    const int64_t whole = H & ~(int64_t)15;
#pragma omp parallel for schedule(static) num_threads(threads) if (rows * H >= 16384)
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *in = x + r * H;
        uint16_t *o = out + r * H;
        vf squares = broadcast(0.0f);
        float sum = 0.0f;
        for (int64_t i = 0; i < whole; i += 16) {
            const vf v = load16(in + i);
            squares += v * v;
        }
        for (int64_t i = whole; i < H; i++) sum += bf16_to_f32(in[i]) * bf16_to_f32(in[i]);
        const float inv = 1.0f / __builtin_sqrtf((hsum(squares) + sum) / (float)H + eps);
        for (int64_t i = 0; i < whole; i += 16)
            store16(o + i, load16(in + i) * inv * load16(weight + i));
        for (int64_t i = whole; i < H; i++)
            o[i] = f32_to_bf16(bf16_to_f32(in[i]) * inv * bf16_to_f32(weight[i]));
    }
}

/* One token per row of bf16 logits (rows x V) with probability softmax(logits / T), by the
 * inverse of its cumulative distribution at the row's uniform draw u[r] in [0, 1): the first
 * token whose cumulative weight exceeds u times the total. Or, with `greedy`, the first of
 * the largest logits. tokens[r] gets the token and logp[r] its log-probability
 * logits / T - log-sum-exp(logits / T). Three passes over a row's bf16 logits (its largest,
 * the weights' sums by blocks of 256, the block the draw falls in), where torch's sampler
 * takes a float32 copy and five passes over it: about 5 ms a decode step at 128 rows and a
 * 49k vocabulary. `sums` is scratch of rows x ceil(V / 256) floats. */
void sample_rows(const uint16_t *logits, int64_t rows, int64_t V, float inv_temperature,
                 const float *u, int greedy, int64_t *tokens, float *logp, float *sums,
                 int threads) {
    enum { SPAN = 256 };
    const int64_t spans = (V + SPAN - 1) / SPAN, whole = V & ~(int64_t)15;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *row = logits + r * V;
        float *span_sum = sums + r * spans;
        vf best = broadcast(-3.0e38f);
        for (int64_t i = 0; i < whole; i += 16) {
            const vf x = load16(row + i);
            best = select(x > best, x, best);
        }
        float top = hmax(best);
        for (int64_t i = whole; i < V; i++) top = bf16_to_f32(row[i]) > top ? bf16_to_f32(row[i]) : top;
        const float shift = top * inv_temperature;
        float total = 0.0f;
        for (int64_t s = 0; s < spans; s++) {
            const int64_t lo = s * SPAN, hi = lo + SPAN < V ? lo + SPAN : V;
            float part = 0.0f;
            if (hi - lo == SPAN) {
                vf acc = broadcast(0.0f);
                for (int64_t i = lo; i < hi; i += 16)
                    acc += exp_nonpositive(load16(row + i) * inv_temperature - shift);
                part = hsum(acc);
            } else {
                for (int64_t i = lo; i < hi; i++) {
                    vf x = broadcast(bf16_to_f32(row[i]) * inv_temperature - shift);
                    part += exp_nonpositive(x)[0];
                }
            }
            span_sum[s] = part;
            total += part;
        }
        int64_t token = 0;
        if (greedy) {
            while (bf16_to_f32(row[token]) != top) token++;
        } else {
            const float target = u[r] * total;
            float before = 0.0f;
            int64_t s = 0;
            while (s + 1 < spans && before + span_sum[s] <= target) before += span_sum[s++];
            const int64_t lo = s * SPAN, hi = lo + SPAN < V ? lo + SPAN : V;
            token = hi - 1; /* where rounding would step past the span's last token */
            for (int64_t i = lo; i < hi; i++) {
                vf x = broadcast(bf16_to_f32(row[i]) * inv_temperature - shift);
                before += exp_nonpositive(x)[0];
                if (before > target) {
                    token = i;
                    break;
                }
            }
        }
        tokens[r] = token;
        logp[r] = bf16_to_f32(row[token]) * inv_temperature - shift - __builtin_logf(total);
    }
}
