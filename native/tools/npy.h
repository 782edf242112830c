/* A small .npy (NumPy format 1.0/2.0/3.0) reader and writer for the dtypes bundles hold. */
#ifndef VKC_NPY_H
#define VKC_NPY_H
#include <stddef.h>
#include <stdint.h>

#include "vkc.h"

typedef struct npy_array {
    vkc_dtype dtype;
    uint32_t rank;
    int64_t shape[32];
    size_t nbytes;
    void *data;        /* malloc'd */
} npy_array;

/* 0 on success; else writes a message into err. Refuses big-endian, Fortran order, other dtypes. */
int npy_read(const char *path, npy_array *out, char *err, size_t errlen);
int npy_write(const char *path, vkc_dtype dtype, uint32_t rank, const int64_t *shape, const void *data, size_t nbytes);
#endif
