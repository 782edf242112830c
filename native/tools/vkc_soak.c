/* vkc_soak: load a bundle once and call vkc_run N times on fixed random inputs (inputs filled with
 * small seeded values), printing the resident set size after a warm-up and at the end, so a test
 * can check it stays flat. Also re-loads the model M times (load/free cycles) with --reloads M. A
 * bundle with several shape variants: the runs cycle through them (each built on its first run, all
 * in the one arena), the buffers sized for the largest.
 *
 *     vkc_soak MODEL.vkb N [--reloads M]
 * Prints "runs N variants V reloads M rss_start_kb A rss_end_kb B". */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"
#include "vkc.h"

static long rss_kb(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) { if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0; fclose(f); }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static int load(vkc_context *ctx, const void *data, size_t size, vkc_model **m) {
    vkc_error e;
    if (vkc_load(ctx, data, size, NULL, m, &e) != VKC_OK) { fprintf(stderr, "vkc_soak: %s\n", e.message); return 1; }
    return 0;
}

int main(int argc, char **argv) {
    vkc_context *ctx;
    vkc_model *m;
    vkc_error e;
    struct stat st;
    int fd, runs, reloads = 0;
    void *data;
    const void *ins[256];
    void *outs[256];
    long start = 0;
    uint32_t seed = 1;
    if (argc < 3) { fprintf(stderr, "usage: vkc_soak MODEL.vkb N [--reloads M]\n"); return 1; }
    runs = atoi(argv[2]);
    if (argc > 4 && strcmp(argv[3], "--reloads") == 0) reloads = atoi(argv[4]);
    fd = open(argv[1], O_RDONLY);
    if (fd < 0 || fstat(fd, &st)) return 1;
    data = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) return 1;
    if (vkc_open(NULL, &ctx, &e) != VKC_OK) { fprintf(stderr, "vkc_soak: %s\n", e.message); return 2; }
    if (load(ctx, data, (size_t)st.st_size, &m)) return 2;
    memset(outs, 0, sizeof outs);
    for (uint32_t i = 0; i < vkc_input_count(m) && i < 256; i++) {
        vkc_tensor_info t, tv;
        unsigned char *p;
        vkc_input_info(m, i, &t);
        for (uint32_t v = 1; v < vkc_variant_count(m); v++)  /* the largest; the dtype is the same */
            if (vkc_variant_input_info(m, v, i, &tv) == VKC_OK && tv.nbytes > t.nbytes) t.nbytes = tv.nbytes;
        p = malloc(t.nbytes ? t.nbytes : 1);
        for (size_t k = 0; k < t.nbytes; k++) { seed = seed * 1103515245u + 12345u; p[k] = (unsigned char)(seed >> 16); }
        if (t.dtype == VKC_FLOAT32)  /* finite floats: small values */
            for (size_t k = 0; k + 4 <= t.nbytes; k += 4) { float v = (float)((int)(p[k] % 17) - 8) / 8.0f; memcpy(p + k, &v, 4); }
        ins[i] = p;
    }
    for (uint32_t i = 0; i < vkc_output_count(m) && i < 256; i++) {
        vkc_tensor_info t, tv;
        vkc_output_info(m, i, &t);
        for (uint32_t v = 1; v < vkc_variant_count(m); v++)
            if (vkc_variant_output_info(m, v, i, &tv) == VKC_OK && tv.nbytes > t.nbytes) t.nbytes = tv.nbytes;
        outs[i] = malloc(t.nbytes ? t.nbytes : 1);
    }
    for (int r = 0; r < runs; r++) {
        if (vkc_run_variant(m, (uint32_t)r % vkc_variant_count(m), ins, outs, &e) != VKC_OK) {
            fprintf(stderr, "vkc_soak: run %d: %s\n", r, e.message);
            return 2;
        }
        if (r == (runs < 100 ? 0 : 99)) start = rss_kb();
    }
    for (int r = 0; r < reloads; r++) {
        vkc_free(m);
        if (load(ctx, data, (size_t)st.st_size, &m)) return 2;
        if (vkc_run(m, ins, outs, &e) != VKC_OK) { fprintf(stderr, "vkc_soak: %s\n", e.message); return 2; }
    }
    printf("runs %d variants %u reloads %d rss_start_kb %ld rss_end_kb %ld\n", runs, vkc_variant_count(m), reloads,
           start, rss_kb());
    for (uint32_t i = 0; i < 256; i++) { if (i < vkc_input_count(m)) free((void *)ins[i]); free(outs[i]); }
    vkc_free(m);
    vkc_close(ctx);
    munmap(data, (size_t)st.st_size);
    close(fd);
    return 0;
}
