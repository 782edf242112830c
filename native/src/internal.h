/* Internal types of the native runtime: the JSON tree, the checked manifest, error helpers. */
#ifndef VKC_INTERNAL_H
#define VKC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "vkc.h"

/* ---- errors ---------------------------------------------------------------------------------- */

/* Sets err (may be NULL) and returns code. For VKC_ERR_BUNDLE, `check` is the check's name and the
 * message reads "bundle check '<check>' failed: <detail>", as the Python reader words it. */
vkc_status vkc__fail(vkc_error *err, vkc_status code, const char *check, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* ---- JSON (json.c): strict RFC 8259, as Python's json.loads with the reader's hooks ----------- */

enum { J_NULL, J_FALSE, J_TRUE, J_INT, J_FLOAT, J_STRING, J_ARRAY, J_OBJECT };

typedef struct jnode {
    uint8_t type;
    uint8_t big;           /* J_INT beyond int64 (i holds INT64_MAX or INT64_MIN by sign) */
    int64_t i;             /* J_INT */
    double d;              /* J_FLOAT (may be +-inf for 1e999, as Python) */
    const char *s;         /* J_STRING: decoded UTF-8, NUL-terminated; a member's key likewise */
    uint32_t len;          /* J_STRING: bytes; J_ARRAY/J_OBJECT: children */
    uint32_t first, next;  /* children: first child, next sibling (0: none; node 0 is the root) */
    const char *key;       /* set on an object's members */
} jnode;

typedef struct jdoc {
    jnode *nodes;
    uint32_t count, cap;
    char *strings;         /* decoded strings and keys */
    size_t strings_used;
} jdoc;

#define VKC_JSON_MAX_DEPTH 64

/* Parse `len` bytes. On failure returns VKC_ERR_BUNDLE (check "manifest json") or out of memory. */
vkc_status vkc_json_parse(const char *text, size_t len, jdoc *doc, vkc_error *err);
void vkc_json_free(jdoc *doc);
const jnode *vkc_json_get(const jdoc *doc, const jnode *obj, const char *key);  /* NULL if absent */
const jnode *vkc_json_child(const jdoc *doc, const jnode *node);                /* first child */
const jnode *vkc_json_next(const jdoc *doc, const jnode *node);                 /* next sibling */

/* ---- the checked manifest (manifest.c) ------------------------------------------------------- */

enum { MEM_ARENA = 0, MEM_WEIGHTS = 1, MEM_STATE = 2 };
extern const char *const vkc_memory_names[3];  /* "arena", "weights", "state": as the manifest names them */
enum { TEXEL_NONE = 0, TEXEL_R32F = 1, TEXEL_RGBA32F = 2 };

typedef struct m_tensor {
    char *name;
    vkc_dtype dtype;
    uint32_t rank;
    int64_t *shape;
    int memory;
    uint64_t offset, nbytes;
} m_tensor;

typedef struct m_io { char *name; uint32_t tensor; } m_io;

/* A state entry (format 1.3): the graph input `name`, kept on the device in tensor `tensor`, fed by
 * the graph output `output` (neither is an input or output of a run). */
typedef struct m_state { char *name, *output; uint32_t tensor; } m_state;

typedef struct m_module {
    char *name;
    uint32_t bindings;
    uint32_t local[3];
    uint64_t shared;
    uint8_t texel[64];        /* TEXEL_* per binding */
    uint8_t readonly[64];     /* from SPIR-V: NonWritable or a texel buffer */
    uint32_t spirv_minor;
    /* what the module needs of a device, from its SPIR-V */
    uint32_t n_caps, *caps;
    uint32_t n_exts;
    char **exts;
    int workgroup_matrix;     /* a cooperative-matrix type of Workgroup scope (VK_NV_cooperative_matrix2) */
} m_module;

typedef struct m_spec { uint32_t id; uint32_t bits; } m_spec;

typedef struct m_kernel {
    char *name;
    uint32_t module;
    uint32_t n_spec;
    m_spec *spec;
} m_kernel;

typedef struct m_dispatch {
    uint32_t kernel;
    uint32_t n_bindings;
    uint32_t *bindings;
    uint32_t groups[3];
    int barrier;
} m_dispatch;

/* target.match of a variant (format 1.2): which devices the profile was made for. */
typedef struct m_match {
    int present, has_vendors, has_types;
    uint32_t n_vendors;
    uint32_t *vendors;       /* VkPhysicalDeviceProperties.vendorID values */
    uint32_t types;          /* bit 1 << VkPhysicalDeviceType per listed device type */
} m_match;

/* One variant: a kernel set + schedule + memory plan for one (device profile, input shapes) pair,
 * over the bundle's shared modules. A format 1.1 (flat) manifest is one variant. */
typedef struct variant {
    char *name;              /* variants[].name; the target name for a flat manifest */
    char *target;            /* target.name: the profile */
    m_match match;
    uint32_t api[3];
    uint32_t n_extensions, n_features;
    char **extensions, **features;
    uint64_t max_shared, max_invocations, max_wg[3], max_storage_range, max_texel_elements;
    uint64_t alignment, arena_bytes, weights_bytes, state_bytes;
    uint32_t n_tensors, n_inputs, n_outputs, n_kernels, n_dispatches, n_state;
    m_tensor *tensors;
    m_io *inputs, *outputs;
    m_state *state;          /* format 1.3: the same in every variant (check `manifest`) */
    m_kernel *kernels;
    m_dispatch *dispatches;
    uint8_t *uses;           /* per shared module: 1 when a kernel of this variant uses it */
} variant;

typedef struct manifest {
    char *model_name;
    int multi;               /* a format 1.2 manifest with `variants` */
    uint32_t n_modules, n_variants;
    m_module *modules;       /* shared by every variant */
    variant *variants;
} manifest;

/* Every check after the container's, in FORMAT.md's order: manifest json, manifest (the field rules
 * of bundles/manifest.py, for every variant), spirv interface (bundles/spirv.py), barriers (every
 * variant). `modules` are the SPIR-V sections (byte pointers into the bundle; any alignment). Fills
 * `out` (free with vkc_manifest_free). */
vkc_status vkc_manifest_check(const uint8_t *json, size_t json_len, const uint8_t *const *modules,
                              const size_t *module_sizes, uint32_t module_count, uint64_t weights_bytes,
                              manifest *out, vkc_error *err);
void vkc_manifest_free(manifest *m);

/* The spirv interface check: each module against the manifest and against the kernels of every
 * variant that uses it; fills the modules' reflected fields (readonly, caps, exts, spirv_minor). */
vkc_status vkc_spirv_interface(manifest *m, const uint8_t *const *modules, const size_t *sizes, vkc_error *err);

/* The barrier rule (FORMAT.md "barriers") for one variant: a barrier is required before a dispatch
 * that reads bytes written, or writes bytes read or written, since the last barrier. `where`
 * prefixes the detail ("variants[2]." or ""). Fails with check "barriers". */
vkc_status vkc_check_barriers(const manifest *m, const variant *v, const char *where, vkc_error *err);

/* The container + every manifest check, then (validate=1) SPIRV-Tools' validator on every module
 * (spirv_val.c; *validated says whether it ran); on success *m is filled and the bundle's pointers too. */
struct vkb_bundle;
vkc_status vkc_check_all(const void *data, size_t size, int validate, struct vkb_bundle *b, manifest *m, int *validated,
                         vkc_error *err);

/* Check "spirv validation": every module through SPIRV-Tools' validator (dlopened; without it,
 * *validated = 0 and a line on stderr, once). */
vkc_status vkc_spirv_validate(const manifest *m, const uint8_t *const *modules, const size_t *sizes, int *validated,
                              vkc_error *err);

/* One run of the model's variant k (of its shape set) copying back only output `out` (none when out is
 * past the outputs), then bytes [offset, offset + n) of it into dst, under the model's lock: a
 * generate step reads a token id or the last row of logits, nothing more (generate.c). */
vkc_status vkc__run_part(vkc_model *md, uint32_t k, const void *const *inputs, uint32_t out, uint64_t offset,
                         void *dst, size_t n, vkc_error *err);

#endif
