/* in_place_threads: libvkc's in-place I/O used as vkc.h says, from several threads, built under
 * AddressSanitizer + UBSan by test_native.py (test_in_place_rules_under_asan).
 *
 *     in_place_threads BUNDLE.vkb
 *
 * Three threads run the model 40 times each: two write input 0 at vkc_input_data and read output 0
 * at vkc_output_data, one passes buffers of its own; all under the app's one lock, as vkc.h requires
 * of threads that share a model whose in-place memory is used. Every output must equal the
 * reference run of its input. Also: a trusted load skips SPIR-V validation. Prints "ok". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkc.h"

#define PATTERNS 4
#define RUNS 40

static vkc_model *model;
static size_t in_bytes, out_bytes;
static unsigned char *inputs[PATTERNS], *refs[PATTERNS];
static pthread_mutex_t app_lock = PTHREAD_MUTEX_INITIALIZER;
static int wrong;

static void *worker(void *arg) {
    int in_place = *(int *)arg;
    unsigned char *out = malloc(out_bytes);
    vkc_error e;
    for (int i = 0; i < RUNS; i++) {
        int k = (i + in_place) % PATTERNS;
        pthread_mutex_lock(&app_lock);
        if (in_place) {
            void *at = vkc_input_data(model, 0);
            const void *ins[1] = {at};
            memcpy(at, inputs[k], in_bytes);
            if (vkc_run(model, ins, NULL, &e) != VKC_OK) { fprintf(stderr, "%s\n", e.message); exit(1); }
            wrong += memcmp(vkc_output_data(model, 0), refs[k], out_bytes) != 0;
        } else {
            const void *ins[1] = {inputs[k]};
            void *outs[1] = {out};
            if (vkc_run(model, ins, outs, &e) != VKC_OK) { fprintf(stderr, "%s\n", e.message); exit(1); }
            wrong += memcmp(out, refs[k], out_bytes) != 0;
        }
        pthread_mutex_unlock(&app_lock);
    }
    free(out);
    return NULL;
}

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    unsigned char *p;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    p = malloc(*size);
    if (p && fread(p, 1, *size, f) != *size) { free(p); p = NULL; }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    vkc_context *ctx;
    vkc_error e;
    vkc_tensor_info ti, to;
    vkc_load_options trusted = {-1, 0, NULL, 0, 1};
    size_t size;
    unsigned char *data = argc > 1 ? read_file(argv[1], &size) : NULL;
    pthread_t threads[3];
    int modes[3] = {1, 2, 0};  /* in place (two threads), own buffers */
    if (!data) { fprintf(stderr, "usage: in_place_threads BUNDLE.vkb\n"); return 2; }
    if (vkc_open(NULL, &ctx, &e) || vkc_load(ctx, data, size, &trusted, &model, &e)) { fprintf(stderr, "%s\n", e.message); return 1; }
    if (vkc_spirv_validated(model)) { fprintf(stderr, "a trusted load validated SPIR-V\n"); return 1; }
    vkc_free(model);
    if (vkc_load(ctx, data, size, NULL, &model, &e)) { fprintf(stderr, "%s\n", e.message); return 1; }
    if (!vkc_spirv_validated(model)) { fprintf(stderr, "SPIR-V was not validated (VKC_SPIRV_TOOLS?)\n"); return 1; }
    free(data);
    vkc_input_info(model, 0, &ti);
    vkc_output_info(model, 0, &to);
    in_bytes = ti.nbytes;
    out_bytes = to.nbytes;
    for (int k = 0; k < PATTERNS; k++) {
        const void *ins[1];
        void *outs[1];
        inputs[k] = malloc(in_bytes);
        refs[k] = malloc(out_bytes);
        for (size_t b = 0; b + 4 <= in_bytes; b += 4) {
            float v = (float)((b / 4 * 7 + (size_t)k * 13) % 17) / 8.0f - 1.0f;
            memcpy(inputs[k] + b, &v, 4);
        }
        ins[0] = inputs[k];
        outs[0] = refs[k];
        if (vkc_run(model, ins, outs, &e)) { fprintf(stderr, "%s\n", e.message); return 1; }
    }
    for (int t = 0; t < 3; t++) pthread_create(&threads[t], NULL, worker, &modes[t]);
    for (int t = 0; t < 3; t++) pthread_join(threads[t], NULL);
    vkc_free(model);
    vkc_close(ctx);
    for (int k = 0; k < PATTERNS; k++) { free(inputs[k]); free(refs[k]); }
    if (wrong) { fprintf(stderr, "%d runs gave another input's outputs\n", wrong); return 1; }
    printf("ok\n");
    return 0;
}
