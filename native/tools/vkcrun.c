/* vkcrun: run a .vkb bundle with the native runtime.
 *
 *     vkcrun MODEL.vkb --input NAME=FILE.npy ... [--output-dir DIR] [--bench N [--in-place]] [--device D]
 *            [--target T] [--build-all]
 *
 * Runs the variant whose input shapes are the .npy files' shapes (a bundle with several shape
 * variants; none matching: the error lists the compiled shapes), of the profile the device choice
 * rule picks or of --target T (--build-all: every variant's pipelines at load, not on first use).
 * Writes DIR/NAME.npy for every output. --bench N runs N more times (after 3 warm-up runs) and
 * prints the median wall time of vkc_run and the median GPU time (timestamps around the command
 * buffer) and their difference, the host overhead; --in-place benches with the inputs written once
 * into vkc_input_data and the outputs left in vkc_output_data (no copies in vkc_run). VKC_VALIDATION=1: the validation layer with
 * synchronization validation; any message makes the exit status 3.
 * Exit status: 0 ok, 1 usage or I/O, 2 the runtime refused or failed (the message says why), 3 validation. */
#include <fcntl.h>
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
              "[--device D] [--target T] [--build-all]"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A count of runs: digits only, 1 to 1e6. */
static int parse_runs(const char *text, int *out) {
    char *end;
    long v;
    if (!*text || *text == '-' || *text == '+') return -1;
    v = strtol(text, &end, 10);
    if (*end || v < 1 || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *out_dir = NULL, *device = NULL, *target = NULL;
    const char *in_names[256], *in_files[256];
    int n_in = 0, bench = 0, rc = 0, build_all = 0, in_place = 0;
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
    for (int i = 1; i < argc; i++) {
        int takes_value = strcmp(argv[i], "--input") == 0 || strcmp(argv[i], "--output-dir") == 0 ||
                          strcmp(argv[i], "--bench") == 0 || strcmp(argv[i], "--device") == 0 ||
                          strcmp(argv[i], "--target") == 0;
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
            if (parse_runs(argv[++i], &bench)) {
                fprintf(stderr, "vkcrun: --bench takes a number of runs from 1 to 1000000, not '%s'\n", argv[i]);
                return 1;
            }
        } else if (strcmp(argv[i], "--device") == 0) device = argv[++i];
        else if (strcmp(argv[i], "--target") == 0) target = argv[++i];
        else if (strcmp(argv[i], "--build-all") == 0) build_all = 1;
        else if (strcmp(argv[i], "--in-place") == 0) in_place = 1;
        else if (argv[i][0] != '-' && !model_path) model_path = argv[i];
        else if (argv[i][0] != '-') { fprintf(stderr, "vkcrun: one model only, not %s and %s (%s)\n", model_path, argv[i], USAGE); return 1; }
        else { fprintf(stderr, "vkcrun: unknown option %s (%s)\n", argv[i], USAGE); return 1; }
    }
    if (!model_path) { fprintf(stderr, "vkcrun: no model given (%s)\n", USAGE); return 1; }
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
    lo.build_all = build_all;
    if (vkc_load(ctx, data, (size_t)st.st_size, &lo, &model, &e) != VKC_OK) {
        fprintf(stderr, "vkcrun: %s\n", e.message);
        rc = 2;
        goto done;
    }
    munmap(data, (size_t)st.st_size);  /* the model keeps nothing of the file */
    close(fd);
    data = NULL;
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
    vkc_free(model);
    if (ctx && vkc_validation_messages(ctx)) {
        fprintf(stderr, "vkcrun: the validation layer reported %u messages\n", vkc_validation_messages(ctx));
        if (rc == 0) rc = 3;
    }
    vkc_close(ctx);
    if (data) munmap(data, (size_t)st.st_size);
    return rc;
}
