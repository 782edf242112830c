/* vkb_check: check .vkb bundles with vkb_reader.h and print one line per file.
 *
 *     cc -std=c99 -O2 -o vkb_check bundles/vkb_check.c
 *     vkb_check model.vkb ...            # or: vkb_check --list FILE (one path per line)
 *     vkb_check --stream < records       # records: [u64 LE length][bytes], labelled 0, 1, ...
 *
 * Prints "ACCEPT <path> manifest=<offset>+<size> modules=<offset>+<size>,... weights=<offset>+<size>"
 * or "REJECT <path> <check>: <message>". Exit status: 0 when every file was read (accepted or not),
 * 2 when a file could not be read. The test suite runs it on the same corpus as the Python reader.
 */
#define VKB_READER_IMPLEMENTATION
#include "vkb_reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Check one file held in `data` (exactly `size` bytes) and print its line, labelled `name`. */
static void check_bytes(const char *name, const unsigned char *data, size_t size) {
    vkb_bundle b;
    char err[512];
    uint32_t i;
    vkb_status status = vkb_open(data, size, &b, err, sizeof err);
    if (status != VKB_OK) {
        const char *detail = strstr(err, "failed: ");
        printf("REJECT %s %s: %s\n", name, vkb_check_name(status), detail ? detail + 8 : err);
        return;
    }
    printf("ACCEPT %s manifest=%lu+%lu modules=", name, (unsigned long)(b.manifest - b.data),
           (unsigned long)b.manifest_size);
    for (i = 0; i < b.module_count; i++) {
        const uint8_t *code;
        size_t code_size;
        if (vkb_module(&b, i, &code, &code_size) != VKB_OK) {
            printf("?");
            continue;
        }
        printf("%s%lu+%lu", i ? "," : "", (unsigned long)(code - b.data), (unsigned long)code_size);
    }
    printf(" weights=%lu+%lu\n", b.weights_size ? (unsigned long)(b.weights - b.data) : 0ul,
           (unsigned long)b.weights_size);
}

/* Read all of `f` into an exactly-sized allocation (so a sanitizer sees any read past the end). */
static unsigned char *read_all(FILE *f, size_t *size) {
    unsigned char *data = NULL, *exact;
    size_t cap = 0, n;
    *size = 0;
    for (;;) {
        if (*size == cap) {
            unsigned char *grown = (unsigned char *)realloc(data, cap = cap ? cap * 2 : 65536);
            if (!grown) {
                free(data);
                return NULL;
            }
            data = grown;
        }
        n = fread(data + *size, 1, cap - *size, f);
        *size += n;
        if (n == 0) break;
    }
    if (ferror(f) || !(exact = (unsigned char *)malloc(*size ? *size : 1))) {
        free(data);
        return NULL;
    }
    memcpy(exact, data, *size);
    free(data);
    return exact;
}

static int check_file(const char *path) {
    FILE *f = fopen(path, "rb");
    unsigned char *data;
    size_t size;
    if (!f) {
        fprintf(stderr, "vkb_check: cannot open %s\n", path);
        return 2;
    }
    data = read_all(f, &size);
    fclose(f);
    if (!data) {
        fprintf(stderr, "vkb_check: cannot read %s\n", path);
        return 2;
    }
    check_bytes(path, data, size);
    free(data);
    return 0;
}

/* --stream: stdin holds records of [u64 little-endian length][that many bytes]; each is one file,
 * labelled by its record number. Lets a test feed thousands of files through one process. */
static int check_stream(void) {
    unsigned char head[8];
    unsigned long index = 0;
    char name[32];
    while (fread(head, 1, 8, stdin) == 8) {
        uint64_t length = 0;
        unsigned char *data;
        int k;
        for (k = 7; k >= 0; k--) length = length << 8 | head[k];
        if (length > ((uint64_t)1 << 32) || !(data = (unsigned char *)malloc(length ? (size_t)length : 1))) {
            fprintf(stderr, "vkb_check: record %lu: bad length\n", index);
            return 2;
        }
        if (fread(data, 1, (size_t)length, stdin) != (size_t)length) {
            fprintf(stderr, "vkb_check: record %lu: truncated\n", index);
            free(data);
            return 2;
        }
        snprintf(name, sizeof name, "%lu", index++);
        check_bytes(name, data, (size_t)length);
        free(data);
    }
    return 0;
}

int main(int argc, char **argv) {
    int i, rc = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: vkb_check FILE... | vkb_check --list LISTFILE | vkb_check --stream\n");
        return 2;
    }
    if (strcmp(argv[1], "--stream") == 0) return check_stream();
    if (strcmp(argv[1], "--list") == 0) {
        char line[4096];
        FILE *list = argc > 2 ? fopen(argv[2], "r") : NULL;
        if (!list) {
            fprintf(stderr, "vkb_check: cannot open the list %s\n", argc > 2 ? argv[2] : "(none)");
            return 2;
        }
        while (fgets(line, sizeof line, list)) {
            line[strcspn(line, "\r\n")] = '\0';
            if (line[0] && check_file(line)) rc = 2;
        }
        fclose(list);
    } else {
        for (i = 1; i < argc; i++)
            if (check_file(argv[i])) rc = 2;
    }
    return rc;
}
