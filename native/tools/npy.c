/* .npy reader/writer (see npy.h). The header is a Python dict literal; this reads exactly what
 * numpy.save writes: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces. */
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The format 1.2 types (bfloat16, float8, int4, ...) have no .npy descr of their own (numpy saves
 * ml_dtypes arrays as raw void): NULL, never matched. */
static const char *const DESCR[VKC_DTYPE_COUNT] = {"<f4", "<f2", "<i4", "<i8", "|u1", "|i1", "|b1",
                                                   "<f8", "<i2", "<u2", "<u4", "<u8"};

int npy_read(const char *path, npy_array *out, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    unsigned char head[12];
    char *h = NULL, *p;
    size_t hlen, count = 1;
    int dtype = -1;
    memset(out, 0, sizeof *out);
    if (!f) { snprintf(err, errlen, "cannot open %s", path); return 1; }
    if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) {
        snprintf(err, errlen, "%s is not a .npy file", path);
        goto fail;
    }
    if (head[6] == 1) hlen = head[8] | (size_t)head[9] << 8;
    else {
        if (fread(head + 10, 1, 2, f) != 2) goto bad;
        hlen = head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 | (size_t)head[11] << 24;
    }
    if (hlen > 1 << 20 || !(h = calloc(hlen + 1, 1)) || fread(h, 1, hlen, f) != hlen) goto bad;
    p = strstr(h, "'descr':");
    if (!p) goto bad;
    p = strchr(p + 8, '\'');
    if (!p) goto bad;
    for (int i = 0; i < VKC_DTYPE_COUNT; i++)
        if (DESCR[i] && strncmp(p + 1, DESCR[i], 3) == 0 && p[4] == '\'') dtype = i;
    if (dtype < 0) { snprintf(err, errlen, "%s: dtype %.8s is not one vkc bundles hold (little-endian)", path, p + 1); goto fail; }
    if (!strstr(h, "'fortran_order': False")) { snprintf(err, errlen, "%s: Fortran order is not supported", path); goto fail; }
    p = strstr(h, "'shape':");
    if (!p || !(p = strchr(p, '('))) goto bad;
    p++;
    for (;;) {
        char *end;
        long long v;
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        v = strtoll(p, &end, 10);
        if (end == p || v < 0 || out->rank >= 32) goto bad;
        out->shape[out->rank++] = v;
        count *= (size_t)v;
        p = end;
    }
    out->dtype = (vkc_dtype)dtype;
    out->nbytes = count * vkc_dtype_size(out->dtype);
    out->data = malloc(out->nbytes ? out->nbytes : 1);
    if (!out->data || fread(out->data, 1, out->nbytes, f) != out->nbytes) goto bad;
    free(h);
    fclose(f);
    return 0;
bad:
    snprintf(err, errlen, "%s: malformed or truncated .npy file", path);
fail:
    free(h);
    free(out->data);
    out->data = NULL;
    fclose(f);
    return 1;
}

int npy_write(const char *path, vkc_dtype dtype, uint32_t rank, const int64_t *shape, const void *data, size_t nbytes) {
    char dict[512];
    int n;
    if (!DESCR[dtype]) {  /* a format 1.2 type: its packed bytes as flat uint8, as runtime_min gives them without ml_dtypes */
        const int64_t flat = (int64_t)nbytes;
        return npy_write(path, VKC_UINT8, 1, &flat, data, nbytes);
    }
    n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", DESCR[dtype]);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    size_t total;
    FILE *f;
    char tmp[4096];
    for (uint32_t i = 0; i < rank && n < 400; i++) n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld, ", (long long)shape[i]);
    if (rank) n -= rank == 1 ? 1 : 2;  /* numpy writes (3,) and (2, 3) */
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    total = 10 + (size_t)n + 1;
    while (total % 64) { dict[n++] = ' '; total++; }
    dict[n++] = '\n';
    pre[8] = (unsigned char)(n & 0xFF);
    pre[9] = (unsigned char)(n >> 8);
    /* through a temporary file renamed over the path: a reader never sees half a file */
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp) return 1;
    if (!(f = fopen(tmp, "wb"))) return 1;
    if (fwrite(pre, 1, 10, f) != 10 || fwrite(dict, 1, (size_t)n, f) != (size_t)n ||
        (nbytes && fwrite(data, 1, nbytes, f) != nbytes)) { fclose(f); remove(tmp); return 1; }
    if (fclose(f) != 0 || rename(tmp, path) != 0) { remove(tmp); return 1; }
    return 0;
}
