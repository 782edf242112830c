/* api_check: libvkc's run, fetch and state API driven step by step, for tests/native/test_state.py
 * and test_fetch.py (built there, also under AddressSanitizer + UBSan).
 *
 *     api_check BUNDLE.vkb STEP...
 *
 * Steps, in order, each printing one line ("ok ..." or "error: <vkc's message>"):
 *     info               every state tensor: "state NAME DTYPE NBYTES DIMS..."
 *     run DIR            run the variant of the inputs DIR/<input>.npy; DIR/out.<output>.npy per output
 *     fetch DIR NAMES    the same by vkc_run_fetch of the outputs NAMES (a,b; "-": none): every output's
 *                        buffer and its vkc_output_data memory poisoned first, the others must stay so
 *     read NAME FILE     vkc_read_state to FILE (.npy)
 *     write NAME FILE    vkc_write_state from FILE (.npy)
 *     read-size NAME N   vkc_read_state into a buffer of N bytes (misuse: another size)
 *     reset              vkc_reset_state
 *     generate IDS N OPTS  vkc_generate after the prompt IDS (1,2,3) of up to N tokens: "ok generate T..."
 *                        (the tokens as the callback saw them, then "|" and those in the array); OPTS:
 *                        "-" or key=value,...: temperature, top_k, top_p, seed, eos, stop (the callback
 *                        stops after that many), ids, position, logits, context
 *     poison             every output's vkc_output_data memory, of every variant, poisoned
 *     untouched NAME     whether output NAME's vkc_output_data memory is still poisoned in every variant,
 *                        where no other output shares its bytes (the variants share one staging buffer)
 * Ends with "validation N": the validation layer's messages (VKC_VALIDATION=1 turns it on).
 * Exit status 0 unless the bundle did not load or an argument was malformed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "vkc.h"

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    unsigned char *data = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n + 1)))
        *size = fread(data, 1, (size_t)n, f);
    fclose(f);
    return data;
}

#define POISON 0xAB

static int poisoned(const void *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != POISON) return 0;
    return 1;
}

static int named(const char *names, const char *name) {
    size_t n = strlen(name);
    for (const char *p = names; (p = strstr(p, name)) != NULL; p += n)
        if ((p == names || p[-1] == ',') && (p[n] == ',' || !p[n])) return 1;
    return 0;
}

/* Inputs DIR/<name>.npy of the variant they fit; outputs to DIR/out.<name>.npy. `fetch` (NULL:
 * vkc_run_variant): the outputs vkc_run_fetch copies back, the others checked untouched. */
static void run(vkc_model *m, const char *dir, const char *fetch) {
    uint32_t n_in = vkc_input_count(m), n_out = vkc_output_count(m), k;
    npy_array *arrays = calloc(n_in + 1, sizeof *arrays);
    vkc_shape *shapes = calloc(n_in + 1, sizeof *shapes);
    const void **ins = calloc(n_in + 1, sizeof *ins);
    void **outs = calloc(n_out + 1, sizeof *outs);
    char path[4096], why[512];
    vkc_error e;
    vkc_tensor_info t;
    vkc_status status;
    for (uint32_t i = 0; i < n_in; i++) {
        vkc_input_info(m, i, &t);
        snprintf(path, sizeof path, "%s/%s.npy", dir, t.name);
        if (npy_read(path, &arrays[i], why, sizeof why)) { printf("error: %s\n", why); goto done; }
        shapes[i].rank = arrays[i].rank;
        shapes[i].dims = arrays[i].shape;
        ins[i] = arrays[i].data;
    }
    if (vkc_find_variant(m, shapes, &k, &e) != VKC_OK) { printf("error: %s\n", e.message); goto done; }
    vkc_select_variant(m, k, &e);
    for (uint32_t i = 0; i < n_out; i++) {
        vkc_variant_output_info(m, k, i, &t);
        outs[i] = malloc(t.nbytes + 1);
        memset(outs[i], POISON, t.nbytes);
        if (fetch) memset((void *)vkc_output_data(m, i), POISON, t.nbytes);
    }
    if (!fetch) {
        status = vkc_run_variant(m, k, ins, (void *const *)outs, &e);
    } else {
        void **asked = calloc(n_out + 1, sizeof *asked);
        for (uint32_t i = 0; i < n_out; i++) {
            vkc_variant_output_info(m, k, i, &t);
            asked[i] = named(fetch, t.name) ? outs[i] : NULL;
        }
        status = vkc_run_fetch(m, k, ins, (void *const *)asked, &e);
        free(asked);
    }
    if (status != VKC_OK) { printf("error: %s\n", e.message); goto done; }
    for (uint32_t i = 0; i < n_out; i++) {
        vkc_variant_output_info(m, k, i, &t);
        if (fetch && !named(fetch, t.name)) {
            if (!poisoned(outs[i], t.nbytes) || !poisoned(vkc_output_data(m, i), t.nbytes)) {
                printf("error: output %s was copied back, not asked for\n", t.name);
                goto done;
            }
            continue;
        }
        snprintf(path, sizeof path, "%s/out.%s.npy", dir, t.name);
        if (npy_write(path, t.dtype, t.rank, t.shape, outs[i], t.nbytes)) { printf("error: cannot write %s\n", path); goto done; }
    }
    printf("ok %s %s\n", fetch ? "fetch" : "run", vkc_variant_name(m, k));
done:
    for (uint32_t i = 0; i < n_in; i++) free(arrays[i].data);
    for (uint32_t i = 0; i < n_out; i++) free(outs[i]);
    free(arrays);
    free(shapes);
    free(ins);
    free(outs);
}

typedef struct seen { int64_t tokens[4096]; uint32_t n, stop; } seen;

static int on_token(void *user, int64_t token) {
    seen *s = user;
    if (s->n < 4096) s->tokens[s->n] = token;
    s->n++;
    return s->stop && s->n >= s->stop;
}

static void generate(vkc_model *m, const char *ids, uint32_t n, char *opts) {
    int64_t prompt[4096], *tokens = calloc(n + 1, sizeof *tokens);
    size_t n_prompt = 0;
    uint32_t made = 0;
    vkc_generate_options o;
    seen s;
    vkc_error e;
    memset(&o, 0, sizeof o);
    memset(&s, 0, sizeof s);
    for (const char *p = ids; *p && n_prompt < 4096; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) prompt[n_prompt++] = strtoll(p, NULL, 10);
    for (char *kv = strtok(opts, ","); kv && strcmp(kv, "-"); kv = strtok(NULL, ",")) {
        char *v = strchr(kv, '=');
        if (!v) continue;
        *v++ = '\0';
        if (!strcmp(kv, "temperature")) o.temperature = atof(v);
        else if (!strcmp(kv, "top_k")) o.top_k = (uint32_t)atoi(v);
        else if (!strcmp(kv, "top_p")) o.top_p = atof(v);
        else if (!strcmp(kv, "seed")) { o.seeded = 1; o.seed = strtoull(v, NULL, 10); }
        else if (!strcmp(kv, "eos")) { o.has_eos = 1; o.eos_token_id = strtoll(v, NULL, 10); }
        else if (!strcmp(kv, "stop")) s.stop = (uint32_t)atoi(v);
        else if (!strcmp(kv, "ids")) o.ids = v;
        else if (!strcmp(kv, "position")) o.position = v;
        else if (!strcmp(kv, "logits")) o.logits = v;
        else if (!strcmp(kv, "context")) o.max_context = (uint32_t)atoi(v);
    }
    o.on_token = on_token;
    o.user = &s;
    if (vkc_generate(m, prompt, n_prompt, n, &o, tokens, &made, &e) != VKC_OK) printf("error: %s\n", e.message);
    else {
        printf("ok generate");
        for (uint32_t i = 0; i < s.n; i++) printf(" %lld", (long long)s.tokens[i]);
        printf(" |");
        for (uint32_t i = 0; i < made; i++) printf(" %lld", (long long)tokens[i]);
        printf("\n");
    }
    free(tokens);
}

/* Whether byte p lies in the vkc_output_data memory of an output other than `name`, of any variant. */
static int claimed(vkc_model *m, const char *name, const unsigned char *p) {
    vkc_error e;
    vkc_tensor_info t;
    for (uint32_t k = 0; k < vkc_variant_count(m); k++) {
        vkc_select_variant(m, k, &e);
        for (uint32_t i = 0; i < vkc_output_count(m); i++) {
            const unsigned char *at = vkc_output_data(m, i);
            vkc_output_info(m, i, &t);
            if (strcmp(t.name, name) && at <= p && p < at + t.nbytes) return 1;
        }
    }
    return 0;
}

static int untouched(vkc_model *m, const char *name) {
    vkc_error e;
    vkc_tensor_info t;
    for (uint32_t k = 0; k < vkc_variant_count(m); k++)
        for (uint32_t i = 0; i < vkc_output_count(m); i++) {
            const unsigned char *at;
            vkc_select_variant(m, k, &e);
            at = vkc_output_data(m, i);
            vkc_output_info(m, i, &t);
            for (size_t b = 0; !strcmp(t.name, name) && b < t.nbytes; b++)
                if (at[b] != POISON && !claimed(m, name, at + b)) return 0;
        }
    return 1;
}

static int state_of(vkc_model *m, const char *name, vkc_tensor_info *t) {
    int i = vkc_state_index(m, name);
    return i >= 0 && vkc_state_info(m, (uint32_t)i, t) == VKC_OK;
}

int main(int argc, char **argv) {
    vkc_context *ctx;
    vkc_model *m;
    vkc_error e;
    size_t size = 0;
    unsigned char *data;
    if (argc < 2) { fprintf(stderr, "usage: api_check BUNDLE.vkb STEP...\n"); return 1; }
    if (!(data = read_file(argv[1], &size))) { fprintf(stderr, "cannot read %s\n", argv[1]); return 1; }
    if (vkc_open(NULL, &ctx, &e) != VKC_OK || vkc_load(ctx, data, size, NULL, &m, &e) != VKC_OK) {
        fprintf(stderr, "%s\n", e.message);
        return 2;
    }
    free(data);
    for (int a = 2; a < argc; a++) {
        const char *step = argv[a];
        int args = !strcmp(step, "run") ? 1 : !strcmp(step, "read") || !strcmp(step, "write") ||
                   !strcmp(step, "read-size") || !strcmp(step, "fetch") ? 2 : !strcmp(step, "generate") ? 3 :
                   !strcmp(step, "untouched") ? 1 : 0;
        vkc_tensor_info t;
        if (a + args >= argc) { fprintf(stderr, "step %s needs %d argument(s)\n", step, args); return 1; }
        if (!strcmp(step, "info")) {
            for (uint32_t i = 0; i < vkc_state_count(m); i++) {
                vkc_state_info(m, i, &t);
                printf("state %s %s %zu", t.name, vkc_dtype_name(t.dtype), t.nbytes);
                for (uint32_t d = 0; d < t.rank; d++) printf(" %lld", (long long)t.shape[d]);
                printf("\n");
            }
            printf("ok info %u\n", vkc_state_count(m));
        } else if (!strcmp(step, "run")) {
            run(m, argv[++a], NULL);
        } else if (!strcmp(step, "fetch")) {
            const char *dir = argv[++a];
            run(m, dir, argv[++a]);
        } else if (!strcmp(step, "read")) {
            const char *name = argv[++a], *file = argv[++a];
            int known = state_of(m, name, &t);
            void *buf = malloc(known ? t.nbytes + 1 : 1);
            if (vkc_read_state(m, name, buf, known ? t.nbytes : 0, &e) != VKC_OK) printf("error: %s\n", e.message);
            else if (npy_write(file, t.dtype, t.rank, t.shape, buf, t.nbytes)) printf("error: cannot write %s\n", file);
            else printf("ok read %s\n", name);
            free(buf);
        } else if (!strcmp(step, "read-size")) {
            const char *name = argv[++a];
            size_t n = (size_t)strtoull(argv[++a], NULL, 10);
            void *buf = malloc(n + 1);
            if (vkc_read_state(m, name, buf, n, &e) != VKC_OK) printf("error: %s\n", e.message);
            else printf("ok read-size %s\n", name);
            free(buf);
        } else if (!strcmp(step, "write")) {
            const char *name = argv[++a], *file = argv[++a];
            npy_array x;
            char why[512];
            if (npy_read(file, &x, why, sizeof why)) { printf("error: %s\n", why); continue; }
            if (vkc_write_state(m, name, x.data, x.nbytes, &e) != VKC_OK) printf("error: %s\n", e.message);
            else printf("ok write %s\n", name);
            free(x.data);
        } else if (!strcmp(step, "generate")) {
            const char *ids = argv[++a];
            uint32_t n = (uint32_t)strtoul(argv[++a], NULL, 10);
            generate(m, ids, n, argv[++a]);
        } else if (!strcmp(step, "poison") || !strcmp(step, "untouched")) {
            const char *name = strcmp(step, "poison") ? argv[++a] : NULL;
            for (uint32_t k = 0; !name && k < vkc_variant_count(m); k++) {
                vkc_select_variant(m, k, &e);
                for (uint32_t i = 0; i < vkc_output_count(m); i++) {
                    vkc_output_info(m, i, &t);
                    memset((void *)vkc_output_data(m, i), POISON, t.nbytes);
                }
            }
            if (!name) printf("ok poison\n");
            else if (untouched(m, name)) printf("ok untouched %s\n", name);
            else printf("error: output %s was copied back\n", name);
        } else if (!strcmp(step, "reset")) {
            if (vkc_reset_state(m, &e) != VKC_OK) printf("error: %s\n", e.message);
            else printf("ok reset\n");
        } else {
            fprintf(stderr, "unknown step %s\n", step);
            return 1;
        }
    }
    vkc_free(m);
    printf("validation %u\n", vkc_validation_messages(ctx));
    vkc_close(ctx);
    return 0;
}
