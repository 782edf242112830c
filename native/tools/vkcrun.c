/* vkcrun: run a .vkb bundle with the native runtime.
 *
 *     vkcrun MODEL.vkb --input NAME=FILE.npy ... [--output-dir DIR] [--bench N [--in-place]] [--device D]
 *            [--target T] [--build-all]
 *     vkcrun LLM.vkb --generate ID,ID,... [--max-new-tokens N] [--temperature T --top-k K --top-p P --seed S]
 *            [--eos ID] [--device D] [--target T]
 *
 * Runs the variant whose input shapes are the .npy files' shapes (a bundle with several shape
 * variants; none matching: the error lists the compiled shapes), of the profile the device choice
 * rule picks or of --target T (--build-all: every variant's pipelines at load, not on first use).
 * Writes DIR/NAME.npy for every output. --bench N runs N more times (after 3 warm-up runs) and
 * prints the median wall time of vkc_run and the median GPU time (timestamps around the command
 * buffer) and their difference, the host overhead; --in-place benches with the inputs written once
 * into vkc_input_data and the outputs left in vkc_output_data (no copies in vkc_run). VKC_VALIDATION=1: the validation layer with
 * synchronization validation; any message makes the exit status 3.
 * --generate: vkc_generate after the prompt's token ids (a decoder whose KV cache is the bundle's
 * state, as `vkc generate`): prints the tokens as they come on one line, then the prefill and
 * decode rates in tokens/s and where the tokens were picked. Every variant is built at load, so
 * the prefill time is the runs'.
 * Exit status: 0 ok, 1 usage or I/O, 2 the runtime refused or failed (the message says why), 3 validation. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "npy.h"
#include "vkc.h"

#define USAGE "usage: vkcrun MODEL.vkb --input NAME=FILE.npy ... [--output-dir DIR] [--bench N [--in-place]] " \
              "[--device D] [--target T] [--build-all]; or vkcrun LLM.vkb --generate ID,ID,... [--max-new-tokens N] " \
              "[--temperature T] [--top-k K] [--top-p P] [--seed S] [--eos ID]"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A whole number from lo to hi: digits only (a '-' first where lo < 0). */
static int parse_whole(const char *text, long long lo, long long hi, long long *out) {
    char *end;
    long long v;
    if (!((*text >= '0' && *text <= '9') || (*text == '-' && lo < 0 && text[1] >= '0' && text[1] <= '9'))) return -1;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (*end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* A finite number from lo to hi. */
static int parse_number(const char *text, double lo, double hi, double *out) {
    char *end;
    double v;
    if (!*text) return -1;
    v = strtod(text, &end);
    if (*end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* The prompt: token ids ID,ID,... (each >= 0), into a malloc'd array. */
static int parse_ids(const char *text, int64_t **ids, size_t *n) {
    size_t cap = 1;
    for (const char *p = text; *p; p++) cap += *p == ',';
    *n = 0;
    if (!(*ids = malloc(cap * sizeof **ids))) return -1;
    for (const char *p = text;; p++) {
        char one[32];
        size_t len = strcspn(p, ",");
        long long v;
        if (len >= sizeof one) return -1;
        memcpy(one, p, len);
        one[len] = '\0';
        if (parse_whole(one, 0, INT64_MAX, &v)) return -1;
        (*ids)[(*n)++] = v;
        p += len;
        if (!*p) return 0;
    }
}

typedef struct stream { double first; uint32_t n; } stream;

/* Each token as it comes, on one line. */
static int print_token(void *user, int64_t token) {
    stream *s = user;
    if (!s->n++) s->first = now();
    printf("%s%lld", s->n > 1 ? " " : "", (long long)token);
    fflush(stdout);
    return 0;
}

/* --generate: the tokens, then the prefill and decode rates and where tokens were picked. */
static int generate(vkc_model *model, const int64_t *prompt, size_t n_prompt, uint32_t max_new,
                    const vkc_generate_options *o) {
    int64_t *tokens = malloc(((size_t)max_new + 1) * sizeof *tokens);
    stream s = {0, 0};
    vkc_generate_options opts = *o;
    vkc_error e;
    double start, end;
    uint32_t made = 0;
    vkc_status st;
    if (!tokens) { fprintf(stderr, "vkcrun: out of memory\n"); return 1; }
    opts.on_token = print_token;
    opts.user = &s;
    start = now();
    st = vkc_generate(model, prompt, n_prompt, max_new, &opts, tokens, &made, &e);
    end = now();
    if (s.n) printf("\n");
    free(tokens);
    if (st != VKC_OK) { fprintf(stderr, "vkcrun: %s\n", e.message); return 2; }
    if (made) {
        char decode[64] = "";
        if (made > 1) snprintf(decode, sizeof decode, ", decode %.1f tokens/s", (made - 1) / (end - s.first));
        printf("prefill %zu tokens in %.1f ms (%.1f tokens/s)%s on %s; %s\n", n_prompt, 1e3 * (s.first - start),
               n_prompt / (s.first - start), decode, vkc_device_name(model),
               o->temperature > 0 ? "sampled on the host" : vkc_output_index(model, "logits_argmax") >= 0 ?
               "argmax on the device" : "argmax on the host (compile with --argmax-output logits to pick on the device)");
    }
    return 0;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *out_dir = NULL, *device = NULL, *target = NULL;
    const char *in_names[256], *in_files[256], *gen_only = NULL, *prompt_text = NULL;
    int n_in = 0, bench = 0, rc = 0, build_all = 0, in_place = 0;
    int64_t *prompt = NULL;
    size_t n_prompt = 0;
    long long whole, max_new = 32;
    vkc_generate_options go;
    vkc_open_options oo;
    vkc_load_options lo;
    vkc_shape shapes[256];
    uint32_t variant = 0;
    vkc_context *ctx = NULL;
    vkc_model *model = NULL;
    vkc_error e;
    struct stat st;
    void *data;
    int fd;
    npy_array arrays[256];
    const void *ins[256];
    void *outs[256];
    memset(arrays, 0, sizeof arrays);
    memset(outs, 0, sizeof outs);
    memset(&go, 0, sizeof go);
    for (int i = 1; i < argc; i++) {
        static const char *const generating[] = {"--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed",
                                                 "--eos"};
        int takes_value = strcmp(argv[i], "--input") == 0 || strcmp(argv[i], "--output-dir") == 0 ||
                          strcmp(argv[i], "--bench") == 0 || strcmp(argv[i], "--device") == 0 ||
                          strcmp(argv[i], "--target") == 0 || strcmp(argv[i], "--generate") == 0;
        for (size_t g = 0; g < sizeof generating / sizeof *generating; g++)
            if (strcmp(argv[i], generating[g]) == 0) takes_value = 1, gen_only = argv[i];
        if (takes_value && i + 1 >= argc) { fprintf(stderr, "vkcrun: %s needs a value (%s)\n", argv[i], USAGE); return 1; }
        if (strcmp(argv[i], "--input") == 0) {
            char *eq = strchr(argv[++i], '=');
            if (!eq || eq == argv[i] || !eq[1]) { fprintf(stderr, "vkcrun: --input takes NAME=FILE.npy, not '%s'\n", argv[i]); return 1; }
            if (n_in == 256) { fprintf(stderr, "vkcrun: more than 256 --input options\n"); return 1; }
            *eq = '\0';
            for (int k = 0; k < n_in; k++)
                if (strcmp(in_names[k], argv[i]) == 0) { fprintf(stderr, "vkcrun: --input %s is given twice; give each input once\n", argv[i]); return 1; }
            in_names[n_in] = argv[i];
            in_files[n_in++] = eq + 1;
        } else if (strcmp(argv[i], "--output-dir") == 0) out_dir = argv[++i];
        else if (strcmp(argv[i], "--bench") == 0) {
            if (parse_whole(argv[++i], 1, 1000000, &whole)) {
                fprintf(stderr, "vkcrun: --bench takes a number of runs from 1 to 1000000, not '%s'\n", argv[i]);
                return 1;
            }
            bench = (int)whole;
        } else if (strcmp(argv[i], "--generate") == 0) {
            prompt_text = argv[++i];
            free(prompt);
            if (parse_ids(prompt_text, &prompt, &n_prompt)) {
                fprintf(stderr, "vkcrun: --generate takes the prompt's token ids, ID,ID,... (whole numbers >= 0), "
                        "not '%s'\n", prompt_text);
                free(prompt);
                return 1;
            }
        } else if (strcmp(argv[i], "--max-new-tokens") == 0) {
            if (parse_whole(argv[++i], 0, 1000000, &max_new)) {
                fprintf(stderr, "vkcrun: --max-new-tokens takes a number of tokens from 0 to 1000000, not '%s'\n", argv[i]);
                return 1;
            }
        } else if (strcmp(argv[i], "--temperature") == 0) {
            if (parse_number(argv[++i], 0, 1e9, &go.temperature)) {
                fprintf(stderr, "vkcrun: --temperature takes a number >= 0 (0: greedy), not '%s'\n", argv[i]);
                return 1;
            }
        } else if (strcmp(argv[i], "--top-k") == 0) {
            if (parse_whole(argv[++i], 0, UINT32_MAX, &whole)) {
                fprintf(stderr, "vkcrun: --top-k takes a whole number >= 0 (0: all tokens), not '%s'\n", argv[i]);
                return 1;
            }
            go.top_k = (uint32_t)whole;
        } else if (strcmp(argv[i], "--top-p") == 0) {
            if (parse_number(argv[++i], 0, 1, &go.top_p) || go.top_p == 0) {
                fprintf(stderr, "vkcrun: --top-p takes a probability in (0, 1], not '%s'\n", argv[i]);
                return 1;
            }
        } else if (strcmp(argv[i], "--seed") == 0) {
            if (parse_whole(argv[++i], 0, INT64_MAX, &whole)) {
                fprintf(stderr, "vkcrun: --seed takes a whole number >= 0, not '%s'\n", argv[i]);
                return 1;
            }
            go.seeded = 1;
            go.seed = (uint64_t)whole;
        } else if (strcmp(argv[i], "--eos") == 0) {
            if (parse_whole(argv[++i], 0, INT64_MAX, &whole)) {
                fprintf(stderr, "vkcrun: --eos takes a token id (a whole number >= 0), not '%s'\n", argv[i]);
                return 1;
            }
            go.has_eos = 1;
            go.eos_token_id = whole;
        } else if (strcmp(argv[i], "--device") == 0) device = argv[++i];
        else if (strcmp(argv[i], "--target") == 0) target = argv[++i];
        else if (strcmp(argv[i], "--build-all") == 0) build_all = 1;
        else if (strcmp(argv[i], "--in-place") == 0) in_place = 1;
        else if (argv[i][0] != '-' && !model_path) model_path = argv[i];
        else if (argv[i][0] != '-') { fprintf(stderr, "vkcrun: one model only, not %s and %s (%s)\n", model_path, argv[i], USAGE); return 1; }
        else { fprintf(stderr, "vkcrun: unknown option %s (%s)\n", argv[i], USAGE); return 1; }
    }
    if (!model_path) { fprintf(stderr, "vkcrun: no model given (%s)\n", USAGE); free(prompt); return 1; }
    if (gen_only && !prompt) {
        fprintf(stderr, "vkcrun: %s applies to --generate; add --generate ID,ID,... (the prompt's token ids)\n", gen_only);
        return 1;
    }
    if (prompt && (n_in || bench || in_place || out_dir)) {
        fprintf(stderr, "vkcrun: --generate feeds the model itself; drop %s\n", n_in ? "--input" : bench ? "--bench" :
                in_place ? "--in-place" : "--output-dir");
        free(prompt);
        return 1;
    }
    if (in_place && !bench) { fprintf(stderr, "vkcrun: --in-place applies to --bench N runs; add --bench N\n"); return 1; }
    if (out_dir) {
        struct stat ds;
        if (stat(out_dir, &ds) != 0 || !S_ISDIR(ds.st_mode)) {
            fprintf(stderr, "vkcrun: --output-dir %s is not an existing folder; create it first\n", out_dir);
            return 1;
        }
        if (access(out_dir, W_OK | X_OK) != 0) { fprintf(stderr, "vkcrun: --output-dir %s is not writable\n", out_dir); return 1; }
    }
    fd = open(model_path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0) { fprintf(stderr, "vkcrun: cannot open %s\n", model_path); return 1; }
    data = st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    if (data == MAP_FAILED) { fprintf(stderr, "vkcrun: cannot map %s\n", model_path); return 1; }
    memset(&oo, 0, sizeof oo);
    oo.validation = -1;
    oo.device = device;
    if (vkc_open(&oo, &ctx, &e) != VKC_OK) { fprintf(stderr, "vkcrun: %s\n", e.message); return 2; }
    memset(&lo, 0, sizeof lo);
    lo.robust = -1;
    lo.target = target;
    lo.build_all = build_all || prompt != NULL;  /* generate: the prefill time is the runs' */
    if (vkc_load(ctx, data, (size_t)st.st_size, &lo, &model, &e) != VKC_OK) {
        fprintf(stderr, "vkcrun: %s\n", e.message);
        rc = 2;
        goto done;
    }
    munmap(data, (size_t)st.st_size);  /* the model keeps nothing of the file */
    close(fd);
    data = NULL;
    if (prompt) {
        rc = generate(model, prompt, n_prompt, (uint32_t)max_new, &go);
        goto done;
    }
    for (int k = 0; k < n_in; k++)  /* unknown names before any file is read */
        if (vkc_input_index(model, in_names[k]) < 0) { fprintf(stderr, "vkcrun: the model has no input %s\n", in_names[k]); rc = 1; goto done; }
    for (uint32_t i = 0; i < vkc_input_count(model); i++) {
        vkc_tensor_info t;
        int found = -1;
        char err[512];
        vkc_input_info(model, i, &t);
        for (int k = 0; k < n_in; k++) if (strcmp(in_names[k], t.name) == 0) found = k;
        if (found < 0) { fprintf(stderr, "vkcrun: missing --input %s=FILE.npy\n", t.name); rc = 1; goto done; }
        if (npy_read(in_files[found], &arrays[i], err, sizeof err)) { fprintf(stderr, "vkcrun: %s\n", err); rc = 1; goto done; }
        shapes[i].rank = arrays[i].rank;
        shapes[i].dims = arrays[i].shape;
        ins[i] = arrays[i].data;
    }
    /* the variant compiled for these shapes; then the dtypes (the same in every variant) */
    if (vkc_find_variant(model, shapes, &variant, &e) != VKC_OK || vkc_select_variant(model, variant, &e) != VKC_OK) {
        fprintf(stderr, "vkcrun: %s\n", e.message);
        rc = 2;
        goto done;
    }
    for (uint32_t i = 0; i < vkc_input_count(model); i++) {
        vkc_tensor_info t;
        vkc_input_info(model, i, &t);
        if (arrays[i].dtype != t.dtype || arrays[i].nbytes != t.nbytes) {
            fprintf(stderr, "vkcrun: input %s: expected %s (%zu bytes), got %s (%zu bytes)\n", t.name,
                    vkc_dtype_name(t.dtype), t.nbytes, vkc_dtype_name(arrays[i].dtype), arrays[i].nbytes);
            rc = 1;
            goto done;
        }
    }
    for (uint32_t i = 0; i < vkc_output_count(model); i++) {
        vkc_tensor_info t;
        vkc_output_info(model, i, &t);
        outs[i] = malloc(t.nbytes ? t.nbytes : 1);
    }
    if (vkc_run(model, ins, outs, &e) != VKC_OK) { fprintf(stderr, "vkcrun: %s\n", e.message); rc = 2; goto done; }
    if (bench > 0) {
        double *wall = calloc((size_t)bench, sizeof *wall), *gpu = calloc((size_t)bench, sizeof *gpu);
        const void *run_ins[256];
        void *run_outs[256];
        for (uint32_t i = 0; i < vkc_input_count(model); i++) {
            run_ins[i] = in_place ? vkc_input_data(model, i) : ins[i];
            if (in_place) memcpy(vkc_input_data(model, i), ins[i], arrays[i].nbytes);
        }
        for (uint32_t i = 0; i < vkc_output_count(model); i++) {
            vkc_tensor_info t;
            vkc_output_info(model, i, &t);
            run_outs[i] = in_place ? (void *)vkc_output_data(model, i) : outs[i];
            if (in_place) memset(outs[i], 0xff, t.nbytes);  /* poisoned: the files must come from these runs */
        }
        for (int w = 0; w < 3 && rc == 0; w++) if (vkc_run(model, run_ins, run_outs, &e) != VKC_OK) rc = 2;
        for (int b = 0; b < bench && rc == 0; b++) {
            double t0 = now();
            if (vkc_run(model, run_ins, run_outs, &e) != VKC_OK) { rc = 2; break; }
            wall[b] = (now() - t0) * 1e3;
            gpu[b] = vkc_last_gpu_ns(model) * 1e-6;
        }
        for (uint32_t i = 0; in_place && rc == 0 && i < vkc_output_count(model); i++) {  /* the files: what the */
            vkc_tensor_info t;                                                          /* in-place runs left */
            vkc_output_info(model, i, &t);
            memcpy(outs[i], vkc_output_data(model, i), t.nbytes);
        }
        if (rc == 0) {
            double mw = median(wall, bench), mg = median(gpu, bench);
            uint64_t arena, weights;
            vkc_device_bytes(model, &arena, &weights);
            printf("device: %s\ntarget: %s\nvariant: %s\nin_place: %d\narena_bytes: %llu\nweights_bytes: %llu\nruns: %d\n"
                   "median_wall_ms: %.4f\nmedian_gpu_ms: %.4f\nmedian_overhead_ms: %.4f\n",
                   vkc_device_name(model), vkc_profile(model), vkc_variant_name(model, variant), in_place,
                   (unsigned long long)arena, (unsigned long long)weights, bench, mw, mg, mg >= 0 ? mw - mg : -1.0);
        } else {
            fprintf(stderr, "vkcrun: %s\n", e.message);
        }
        free(wall);
        free(gpu);
    }
    if (out_dir && rc == 0) {
        for (uint32_t i = 0; i < vkc_output_count(model); i++) {
            vkc_tensor_info t;
            char path[4096];
            vkc_output_info(model, i, &t);
            snprintf(path, sizeof path, "%s/%s.npy", out_dir, t.name);
            for (char *p = path + strlen(out_dir) + 1; *p; p++) if (*p == '/') *p = '_';
            if (npy_write(path, t.dtype, t.rank, t.shape, outs[i], t.nbytes)) { fprintf(stderr, "vkcrun: cannot write %s\n", path); rc = 1; }
        }
    }
done:
    for (int i = 0; i < 256; i++) { free(arrays[i].data); free(outs[i]); }
    free(prompt);
    vkc_free(model);
    if (ctx && vkc_validation_messages(ctx)) {
        fprintf(stderr, "vkcrun: the validation layer reported %u messages\n", vkc_validation_messages(ctx));
        if (rc == 0) rc = 3;
    }
    vkc_close(ctx);
    if (data) munmap(data, (size_t)st.st_size);
    return rc;
}
