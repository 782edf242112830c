/* vkc_fuzz: every check of vkc_load (vkc_check: container, manifest, interfaces, barriers) on a
 * stream of bundles, for the fuzz test under ASan/UBSan.
 *
 *     vkc_fuzz < records        # records: [u64 LE length][bytes], labelled 0, 1, ...
 *     vkc_fuzz FILE.vkb ...
 *
 * Prints "ACCEPT <label>" or "REJECT <label> <check>: <message>" per bundle. Each bundle is copied
 * into an exactly-sized allocation so a sanitizer sees any read past its end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkc.h"

static void check(const char *label, const unsigned char *data, size_t size) {
    vkc_error e;
    if (vkc_check(data, size, &e) == VKC_OK) printf("ACCEPT %s\n", label);
    else printf("REJECT %s %s: %s\n", label, e.check[0] ? e.check : "-", e.message);
}

static unsigned char *read_exact(FILE *f, size_t n) {
    unsigned char *p = malloc(n ? n : 1);
    if (p && n && fread(p, 1, n, f) != n) { free(p); return NULL; }
    return p;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            FILE *f = fopen(argv[i], "rb");
            long n;
            unsigned char *p;
            if (!f) { printf("ERROR %s cannot open\n", argv[i]); continue; }
            fseek(f, 0, SEEK_END);
            n = ftell(f);
            fseek(f, 0, SEEK_SET);
            p = read_exact(f, (size_t)n);
            fclose(f);
            if (p) check(argv[i], p, (size_t)n);
            free(p);
        }
        return 0;
    }
    for (unsigned long label = 0;; label++) {
        unsigned char len[8], *p;
        unsigned long long n = 0;
        char name[32];
        if (fread(len, 1, 8, stdin) != 8) break;
        for (int k = 7; k >= 0; k--) n = n << 8 | len[k];
        if (n > (1ull << 32)) { fprintf(stderr, "vkc_fuzz: record too large\n"); return 2; }
        if (!(p = read_exact(stdin, (size_t)n))) { fprintf(stderr, "vkc_fuzz: truncated record\n"); return 2; }
        snprintf(name, sizeof name, "%lu", label);
        check(name, p, (size_t)n);
        free(p);
        fflush(stdout);
    }
    return 0;
}
