/* vkc_generate: runtime_min/generate.py in C. A decoder bundle whose KV cache is its state takes
 * the token ids (int64 [1, S]) and the cache rows already filled (int64 [1]) and outputs logits
 * [1, S, vocab]; its shape variants are the S it runs. The prompt goes in chunks of the longest S
 * that fits what is left, then one token a run on the S = 1 variant. A step copies back the last
 * row of logits only, or, greedy with a "<logits>_argmax" output, that one int64, or, sampling from
 * the top_k < vocabulary likeliest with "<logits>_topk_values" / "_topk_indices" outputs of at least
 * top_k (vkc compile --top-k-output logits:K), those 2K numbers: the same candidates in the same
 * order, so the same draws as from the row.
 *
 * Sampling is runtime_min's Sampler: from the top_k likeliest tokens (0: all), the fewest whose
 * probability reaches top_p, at `temperature`. Its draws come from xoshiro256** seeded by splitmix64,
 * not numpy's generator: the same seed gives the same tokens here, not runtime_min's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* ---- the random draws ------------------------------------------------------------------------ */

typedef struct rng { uint64_t s[4]; } rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static double uniform(rng *r) {  /* [0, 1), 53 bits */
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(out >> 11) * 0x1.0p-53;
}

/* ---- picking a token from a row of logits ---------------------------------------------------- */

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 31;
    double m = h & 1023, v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return h >> 15 ? -v : v;
}

/* numpy's argmax: the first largest, or the first NaN. */
static int64_t argmax(const double *row, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (isnan(row[i])) return i;
        if (row[i] > row[best]) best = i;
    }
    return best;
}

typedef struct cand { double v; uint32_t i; } cand;

/* np.argsort(-logits, kind="stable"): descending, ties by index, NaN last. */
static int before(const cand *x, const cand *y) {
    int xn = isnan(x->v), yn = isnan(y->v);
    if (xn != yn) return yn;
    if (!xn && x->v != y->v) return x->v > y->v;
    return x->i < y->i;
}

static int by_order(const void *a, const void *b) {
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* The k first of row in that order, sorted, into c: a heap of the best k seen, its worst at the root. */
static void top(const double *row, uint32_t n, uint32_t k, cand *c) {
    uint32_t used = 0;
    for (uint32_t i = 0; i < n; i++) {
        cand x = {row[i], i};
        uint32_t at;
        if (used < k) {  /* sift up past the better ones */
            for (at = used++; at && before(&c[(at - 1) / 2], &x); at = (at - 1) / 2) c[at] = c[(at - 1) / 2];
        } else if (before(&x, &c[0])) {  /* replaces the worst: sift down past the worse ones */
            for (at = 0;;) {
                uint32_t child = 2 * at + 1;
                if (child >= used) break;
                if (child + 1 < used && before(&c[child], &c[child + 1])) child++;
                if (!before(&x, &c[child])) break;
                c[at] = c[child];
                at = child;
            }
        } else {
            continue;
        }
        c[at] = x;
    }
    qsort(c, used, sizeof *c, by_order);
}

/* The draw among the m candidates c, likeliest first: runtime_min's Sampler past its choice of them. */
static vkc_status draw(const cand *c, uint32_t m, const vkc_generate_options *o, double top_p, rng *r, double *p,
                       int64_t *token, vkc_error *err) {
    uint32_t keep;
    double sum = 0, mass = 0, u;
    for (uint32_t i = 0; i < m; i++) sum += p[i] = exp((c[i].v - c[0].v) / o->temperature);
    if (!(sum > 0) || !isfinite(sum))
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "the logits hold NaN or infinity (largest %g); no token can be "
                         "sampled from them: decode greedily, or check the model in float32", c[0].v);
    keep = m;
    for (uint32_t i = 0; top_p < 1 && i < m; i++)  /* the fewest whose probability reaches top_p */
        if ((mass += p[i] / sum) >= top_p) { keep = i + 1; break; }
    sum = 0;
    for (uint32_t i = 0; i < keep; i++) sum += p[i];
    u = uniform(r) * sum;
    for (uint32_t i = 0; i < keep; i++)
        if ((u -= p[i]) < 0 || i == keep - 1) { *token = c[i].i; break; }
    return VKC_OK;
}

/* runtime_min's Sampler at temperature > 0; c holds room for the whole row, p as much. */
static vkc_status sample(const double *row, uint32_t n, const vkc_generate_options *o, double top_p, rng *r,
                         cand *c, double *p, int64_t *token, vkc_error *err) {
    uint32_t m = o->top_k && o->top_k < n ? o->top_k : n;
    if (m < n) {
        top(row, n, m, c);
    } else {
        for (uint32_t i = 0; i < n; i++) {
            c[i].v = row[i];
            c[i].i = i;
        }
        if (top_p < 1) {
            qsort(c, n, sizeof *c, by_order);
        } else {  /* every token is kept: only the first must be the likeliest (the shift of exp) */
            for (uint32_t i = 1; i < n; i++)
                if (before(&c[i], &c[0])) { cand t = c[0]; c[0] = c[i]; c[i] = t; }
        }
    }
    return draw(c, m, o, top_p, r, p, token, err);
}

/* ---- the loop -------------------------------------------------------------------------------- */

/* "['a', 'b']": the model's input (outputs 0) or output names, as Python prints a list. */
static void list_names(const vkc_model *m, int outputs, char *buf, size_t n) {
    uint32_t count = outputs ? vkc_output_count(m) : vkc_input_count(m);
    size_t used = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < count && used < n; i++) {
        vkc_tensor_info t;
        if (outputs) vkc_output_info(m, i, &t);
        else vkc_input_info(m, i, &t);
        used += (size_t)snprintf(buf + used, n - used, "%s'%.60s'", i ? ", " : "", t.name);
    }
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* What generate reads of the bundle: the indices of its inputs and outputs, per variant the ids'
 * length S and where the last row of logits lies. */
typedef struct plan {
    int ids, position, logits, picked;     /* picked: the "<logits>_argmax" output, -1: none or unused */
    int mask;                              /* the attention_mask input fed instead of position, -1: none */
    uint32_t mask_length;                  /* its N, [1, N] in every variant */
    int top_values, top_indices;           /* the "<logits>_topk_*" outputs, -1: none or unused */
    uint32_t n, *length, *rows, vocab;     /* per variant: S, the logits' rows; the vocabulary (largest) */
    uint64_t top_n;                        /* the largest K of the "<logits>_topk_*" outputs */
} plan;

static vkc_status unusable(vkc_error *err, const char *what, const vkc_tensor_info *t, const char *where,
                           const char *want) {
    char shape[160];
    size_t used = (size_t)snprintf(shape, sizeof shape, "%s[", vkc_dtype_name(t->dtype));
    for (uint32_t d = 0; d < t->rank && used < sizeof shape; d++)
        used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (used < sizeof shape) snprintf(shape + used, sizeof shape - used, "]");
    return vkc__fail(err, VKC_ERR_ARGUMENT, "", "generate reads %s '%s' as %s, but variant '%.80s' has %s", what,
                     t->name, want, where, shape);
}

/* Every check runtime_min's generate makes, and those of the tensors' types it leaves to run(). */
static vkc_status make_plan(vkc_model *m, const vkc_generate_options *o, const char *ids, const char *pos,
                            const char *mask, const char *logits, plan *p, vkc_error *err) {
    char picked[300], ins[512], outs[512];
    int decode = 0;
    p->ids = vkc_input_index(m, ids);
    p->position = vkc_input_index(m, pos);
    p->mask = p->position < 0 ? vkc_input_index(m, mask) : -1;
    p->logits = vkc_output_index(m, logits);
    snprintf(picked, sizeof picked, "%s_argmax", logits);
    p->picked = o->temperature == 0 ? vkc_output_index(m, picked) : -1;
    snprintf(picked, sizeof picked, "%s_topk_values", logits);
    p->top_values = o->temperature > 0 && o->top_k ? vkc_output_index(m, picked) : -1;
    snprintf(picked, sizeof picked, "%s_topk_indices", logits);
    p->top_indices = p->top_values >= 0 ? vkc_output_index(m, picked) : -1;
    if (p->top_indices < 0) p->top_values = -1;
    list_names(m, 0, ins, sizeof ins);
    list_names(m, 1, outs, sizeof outs);
    if (p->ids < 0 || (p->position < 0 && p->mask < 0) || p->logits < 0 || !vkc_state_count(m))
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "generate needs a bundle with state, inputs '%s' and '%s' (or '%s') "
                         "and output '%s'; this one has inputs %s, outputs %s and %u state tensor(s).", ids, pos, mask,
                         logits, ins, outs, vkc_state_count(m));
    if (vkc_input_count(m) != 2)
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "generate feeds only the inputs '%s' and '%s'; this bundle takes %s.",
                         ids, p->position >= 0 ? pos : mask, ins);
    p->n = vkc_variant_count(m);
    if (!(p->length = calloc(p->n, sizeof *p->length)) || !(p->rows = calloc(p->n, sizeof *p->rows)))
        return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    for (uint32_t k = 0; k < p->n; k++) {
        vkc_tensor_info t;
        const char *name = vkc_variant_name(m, k);
        vkc_variant_input_info(m, k, (uint32_t)p->ids, &t);
        if (t.dtype != VKC_INT64 || t.rank != 2 || t.shape[0] != 1 || t.shape[1] < 1 || t.shape[1] > UINT32_MAX)
            return unusable(err, "input", &t, name, "int64 [1, S]");
        p->length[k] = (uint32_t)t.shape[1];
        decode |= p->length[k] == 1;
        if (p->position >= 0) {
            vkc_variant_input_info(m, k, (uint32_t)p->position, &t);
            if (t.dtype != VKC_INT64 || t.nbytes != 8) return unusable(err, "input", &t, name, "int64 [1]");
        } else {
            vkc_variant_input_info(m, k, (uint32_t)p->mask, &t);
            if (t.dtype != VKC_INT64 || t.rank != 2 || t.shape[0] != 1 || t.shape[1] < 1 || t.shape[1] > UINT32_MAX ||
                (k && (uint64_t)t.shape[1] != p->mask_length))
                return unusable(err, "input", &t, name, "int64 [1, N], N the same in every variant");
            p->mask_length = (uint32_t)t.shape[1];
        }
        vkc_variant_output_info(m, k, (uint32_t)p->logits, &t);
        if ((t.dtype != VKC_FLOAT32 && t.dtype != VKC_FLOAT16) || t.rank != 3 || t.shape[0] != 1 || t.shape[1] < 1 ||
            t.shape[2] < 1 || t.shape[2] > UINT32_MAX)
            return unusable(err, "output", &t, name, "float32 or float16 [1, S, vocabulary]");
        p->rows[k] = (uint32_t)t.shape[1];
        if ((uint64_t)t.shape[2] > p->vocab) p->vocab = (uint32_t)t.shape[2];
        if (p->picked >= 0) {
            vkc_variant_output_info(m, k, (uint32_t)p->picked, &t);
            if (t.dtype != VKC_INT64 || t.nbytes < 8) return unusable(err, "output", &t, name, "int64");
        }
        if (p->top_values >= 0) {  /* used where every variant's holds at least top_k */
            vkc_tensor_info v;
            vkc_variant_output_info(m, k, (uint32_t)p->top_values, &v);
            vkc_variant_output_info(m, k, (uint32_t)p->top_indices, &t);
            if ((v.dtype != VKC_FLOAT32 && v.dtype != VKC_FLOAT16) || t.dtype != VKC_INT64 || !v.rank ||
                t.nbytes / 8 != v.nbytes / vkc_dtype_size(v.dtype) || v.shape[v.rank - 1] != (int64_t)(t.nbytes / 8))
                return unusable(err, "outputs", &v, name, "float32 or float16 [..., K] with int64 indices of that shape");
            if ((uint64_t)v.shape[v.rank - 1] < o->top_k) p->top_values = -1;
            if ((uint64_t)v.shape[v.rank - 1] > p->top_n) p->top_n = (uint64_t)v.shape[v.rank - 1];
        }
    }
    /* top_k of the whole row draws in the row's order of its own; K past the row is no top-k output */
    if (o->top_k >= p->vocab || p->top_n > p->vocab) p->top_values = -1;
    if (p->top_values < 0) p->top_indices = -1;
    if (!decode) {
        char lengths[512];
        size_t used = (size_t)snprintf(lengths, sizeof lengths, "[");
        for (uint32_t shown = 0, last = UINT32_MAX; used < sizeof lengths; shown++) {  /* distinct, descending */
            uint32_t next = 0;
            for (uint32_t k = 0; k < p->n; k++)
                if (p->length[k] < last && p->length[k] > next) next = p->length[k];
            if (!next) break;
            used += (size_t)snprintf(lengths + used, sizeof lengths - used, "%s%u", shown ? ", " : "", next);
            last = next;
        }
        if (used < sizeof lengths) snprintf(lengths + used, sizeof lengths - used, "]");
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "generate needs a decode variant of %s=1x1; this bundle has %s "
                         "lengths %s (compile with --variant %s=1x1 as well).", ids, ids, lengths, ids);
    }
    return VKC_OK;
}

/* The variant of the longest S at most `left` (left >= 1: the decode variant fits). */
static uint32_t chunk(const plan *p, size_t left) {
    uint32_t best = UINT32_MAX;
    for (uint32_t k = 0; k < p->n; k++)
        if (p->length[k] <= left && (best == UINT32_MAX || p->length[k] > p->length[best])) best = k;
    return best;
}

/* The cache rows: the smallest second-last axis of the state tensors (0: none has one). */
static uint64_t context_of(const vkc_model *m) {
    uint64_t rows = 0;
    for (uint32_t i = 0; i < vkc_state_count(m); i++) {
        vkc_tensor_info t;
        vkc_state_info(m, i, &t);
        if (t.rank >= 2 && (!rows || (uint64_t)t.shape[t.rank - 2] < rows)) rows = (uint64_t)t.shape[t.rank - 2];
    }
    return rows;
}

typedef struct scratch { double *row; uint8_t *raw; cand *c; double *p; int64_t *ids, *mask; void **outs; } scratch;

/* The candidates from the device's top K: values (float32 or float16) and their ids, likeliest first. */
static void candidates(const uint8_t *raw, vkc_dtype dtype, const int64_t *ids, uint32_t m, cand *c) {
    for (uint32_t i = 0; i < m; i++) {
        if (dtype == VKC_FLOAT16) {
            uint16_t h;
            memcpy(&h, raw + 2 * (size_t)i, 2);
            c[i].v = half_to_double(h);
        } else {
            float f;
            memcpy(&f, raw + 4 * (size_t)i, 4);
            c[i].v = f;
        }
        c[i].i = (uint32_t)ids[i];
    }
}

/* Run variant k on `ids` at `position` and pick the next token (want: 0 for a prefill chunk that
 * is not the last, which copies back nothing). */
static vkc_status step(vkc_model *m, const plan *p, uint32_t k, const int64_t *ids, int64_t position, int want,
                       const vkc_generate_options *o, double top_p, rng *r, scratch *s, int64_t *token,
                       vkc_error *err) {
    const void *ins[2];
    vkc_tensor_info t;
    size_t width;
    vkc_status st;
    ins[p->ids] = ids;
    if (p->position >= 0) ins[p->position] = &position;
    else {  /* the rows filled and this run's */
        for (uint32_t i = 0; i < p->mask_length; i++) s->mask[i] = (uint64_t)i < (uint64_t)position + p->length[k];
        ins[p->mask] = s->mask;
    }
    if (!want) return vkc__run_part(m, k, ins, UINT32_MAX, 0, NULL, 0, err);
    if (p->picked >= 0) return vkc__run_part(m, k, ins, (uint32_t)p->picked, 0, token, sizeof *token, err);
    if (p->top_values >= 0) {
        s->outs[p->top_values] = s->raw;
        s->outs[p->top_indices] = s->ids;
        if ((st = vkc_run_fetch(m, k, ins, s->outs, err))) return st;
        vkc_variant_output_info(m, k, (uint32_t)p->top_values, &t);
        candidates(s->raw, t.dtype, s->ids, o->top_k, s->c);
        return draw(s->c, o->top_k, o, top_p, r, s->p, token, err);
    }
    vkc_variant_output_info(m, k, (uint32_t)p->logits, &t);
    width = (size_t)t.shape[2] * vkc_dtype_size(t.dtype);
    if ((st = vkc__run_part(m, k, ins, (uint32_t)p->logits, (uint64_t)(p->rows[k] - 1) * width, s->raw, width, err)))
        return st;
    for (uint32_t i = 0; i < (uint32_t)t.shape[2]; i++) {
        if (t.dtype == VKC_FLOAT16) {
            uint16_t h;
            memcpy(&h, s->raw + 2 * (size_t)i, 2);
            s->row[i] = half_to_double(h);
        } else {
            float f;
            memcpy(&f, s->raw + 4 * (size_t)i, 4);
            s->row[i] = f;
        }
    }
    if (o->temperature == 0) { *token = argmax(s->row, (uint32_t)t.shape[2]); return VKC_OK; }
    return sample(s->row, (uint32_t)t.shape[2], o, top_p, r, s->c, s->p, token, err);
}

vkc_status vkc_generate(vkc_model *m, const int64_t *prompt, size_t n_prompt, uint32_t max_new_tokens,
                        const vkc_generate_options *opts, int64_t *tokens, uint32_t *n_tokens, vkc_error *err) {
    vkc_generate_options none;
    const char *ids, *pos, *mask, *logits;
    double top_p;
    plan p;
    scratch s;
    rng r;
    uint64_t context;
    int64_t token = 0;
    size_t filled = 0;
    uint32_t made = 0;
    vkc_status st;
    if (n_tokens) *n_tokens = 0;
    if (!m) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_generate needs a model");
    if (!opts) {
        memset(&none, 0, sizeof none);
        opts = &none;
    }
    ids = opts->ids && opts->ids[0] ? opts->ids : "input_ids";
    pos = opts->position && opts->position[0] ? opts->position : "position";
    mask = opts->attention_mask && opts->attention_mask[0] ? opts->attention_mask : "attention_mask";
    logits = opts->logits && opts->logits[0] ? opts->logits : "logits";
    top_p = opts->top_p == 0 ? 1.0 : opts->top_p;
    if (!(opts->temperature >= 0) || !isfinite(opts->temperature) || !(top_p > 0 && top_p <= 1))
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "temperature %g must be >= 0, top_k %u >= 0 and top_p %g in (0, 1].",
                         opts->temperature, opts->top_k, opts->top_p);
    if (!prompt || !n_prompt)
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "%s is empty; give at least one prompt token.", ids);
    if (!tokens && !opts->on_token && max_new_tokens)
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_generate needs somewhere to put the tokens: an array of "
                         "max_new_tokens, or an on_token callback.");
    memset(&p, 0, sizeof p);
    memset(&s, 0, sizeof s);
    if ((st = make_plan(m, opts, ids, pos, mask, logits, &p, err)) != VKC_OK) goto done;
    context = opts->max_context ? opts->max_context : context_of(m);
    if (p.mask >= 0 && context > p.mask_length) context = p.mask_length;
    if (!context) {
        st = vkc__fail(err, VKC_ERR_ARGUMENT, "", "no state tensor has a rows axis (the second-last) to give the "
                       "cache's length; pass max_context.");
        goto done;
    }
    if (n_prompt + (uint64_t)max_new_tokens > context) {
        st = vkc__fail(err, VKC_ERR_ARGUMENT, "", "%zu prompt tokens + %u new ones exceed the %llu rows of the model's "
                       "cache; compile it for a longer context or ask for fewer tokens.", n_prompt, max_new_tokens,
                       (unsigned long long)context);
        goto done;
    }
    if (!(s.row = calloc(p.vocab, sizeof *s.row)) || !(s.raw = calloc(p.vocab, 4)) ||
        !(s.c = calloc(p.vocab, sizeof *s.c)) || !(s.p = calloc(p.vocab, sizeof *s.p)) ||
        !(s.ids = calloc(p.vocab, sizeof *s.ids)) || !(s.outs = calloc(vkc_output_count(m), sizeof *s.outs)) ||
        !(s.mask = calloc(p.mask_length + 1, sizeof *s.mask))) {
        st = vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
        goto done;
    }
    if (opts->seeded) rng_seed(&r, opts->seed);
    else {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        rng_seed(&r, (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec);
    }
    if ((st = vkc_reset_state(m, err)) != VKC_OK) goto done;
    while (filled < n_prompt) {  /* the prompt in chunks; only the last one's token comes back */
        uint32_t k = chunk(&p, n_prompt - filled);
        int last = filled + p.length[k] == n_prompt;
        if ((st = step(m, &p, k, prompt + filled, (int64_t)filled, last, opts, top_p, &r, &s, &token, err)) != VKC_OK)
            goto done;
        filled += p.length[k];
    }
    for (uint32_t n = 0; n < max_new_tokens; n++) {
        int stop;
        if (tokens) tokens[made] = token;
        made++;
        if (n_tokens) *n_tokens = made;
        stop = opts->on_token ? opts->on_token(opts->user, token) : 0;
        if (stop || (opts->has_eos && token == opts->eos_token_id) || n + 1 == max_new_tokens) break;
        if ((st = step(m, &p, chunk(&p, 1), &token, (int64_t)filled, 1, opts, top_p, &r, &s, &token, err)) != VKC_OK)
            goto done;
        filled++;
    }
    st = VKC_OK;
done:
    free(p.length);
    free(p.rows);
    free(s.row);
    free(s.raw);
    free(s.c);
    free(s.p);
    free(s.ids);
    free(s.mask);
    free(s.outs);
    if (st == VKC_OK && err) { err->code = VKC_OK; err->check[0] = err->message[0] = '\0'; }
    return st;
}
