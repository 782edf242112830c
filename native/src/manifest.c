/* The manifest checks of bundles/manifest.py, in its order and with its field paths, then the
 * module interface checks of bundles/spirv.py, then the barrier rule. Nothing here trusts a type
 * or a bound: every index followed and every byte range bound is checked first. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_BYTES ((int64_t)0xFFFFFFFFFFFF)   /* 2^48 - 1 */
#define MAX_DIM ((int64_t)0x7FFFFFFF)
#define MAX_COUNT INT64_MAX
#define MAX_LOCAL (1024 * 1024)
#define MAX_BINDINGS 64
#define MAX_GROUPS 65535
#define FLT_MAX_D 3.4028234663852886e38

static const char *const DTYPE_NAMES[VKC_DTYPE_COUNT] = {
    "float32", "float16", "int32", "int64", "uint8", "int8", "bool",
    "float64", "int16", "uint16", "uint32", "uint64",
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "uint4", "int4", "float4_e2m1fn", "float8_e8m0fnu", "uint2", "int2"};
/* Bits per element: the 4- and 2-bit types pack 2 and 4 elements per byte (format 1.2). */
static const unsigned DTYPE_BITS[VKC_DTYPE_COUNT] = {
    32, 16, 32, 64, 8, 8, 8, 64, 16, 16, 32, 64, 16, 8, 8, 8, 8, 4, 4, 4, 8, 2, 2};

const char *const vkc_memory_names[3] = {"arena", "weights", "state"};

const char *vkc_dtype_name(vkc_dtype d) { return (unsigned)d < VKC_DTYPE_COUNT ? DTYPE_NAMES[d] : "?"; }
size_t vkc_dtype_size(vkc_dtype d) { return (unsigned)d < VKC_DTYPE_COUNT ? (DTYPE_BITS[d] + 7) / 8 : 0; }
uint64_t vkc_dtype_nbytes(vkc_dtype d, uint64_t count) {
    return (unsigned)d < VKC_DTYPE_COUNT ? (count * DTYPE_BITS[d] + 7) / 8 : 0;
}

typedef struct ctx {
    const jdoc *doc;
    vkc_error *err;
    char pre[32];      /* the path of the variant being checked ("variants[2]"), "" for a flat manifest */
} ctx;

/* A path inside the current variant: "variants[2].tensors[3]" or, flat, "tensors[3]". */
#define PRE(c) (c)->pre, (c)->pre[0] ? "." : ""

/* A short rendering of a JSON value for messages (bounded, like the Python reader's reprlib). */
static void show(const jnode *v, char *buf, size_t n) {
    if (!v) { snprintf(buf, n, "<missing>"); return; }
    switch (v->type) {
    case J_NULL: snprintf(buf, n, "None"); break;
    case J_TRUE: snprintf(buf, n, "True"); break;
    case J_FALSE: snprintf(buf, n, "False"); break;
    case J_INT:
        if (v->big) snprintf(buf, n, "%s<huge integer>", v->i < 0 ? "-" : "");
        else snprintf(buf, n, "%lld", (long long)v->i);
        break;
    case J_FLOAT: snprintf(buf, n, "%.17g", v->d); break;
    case J_STRING: snprintf(buf, n, "'%.60s%s'", v->s, v->len > 60 ? "..." : ""); break;
    case J_ARRAY: snprintf(buf, n, "[...] (%u entries)", v->len); break;
    default: snprintf(buf, n, "{...} (%u keys)", v->len); break;
    }
}

static vkc_status fail(ctx *c, const char *where, const jnode *v, const char *fmt, ...) {
    char shown[96], why[512];
    va_list ap;
    show(v, shown, sizeof shown);
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "%s = %s %s", where, shown, why);
}

static vkc_status missing(ctx *c, const char *where) {
    return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "%s is missing", where);
}

#define TRY(x) do { vkc_status s_ = (x); if (s_ != VKC_OK) return s_; } while (0)

static void join(char *out, size_t n, const char *path, const char *key) {
    if (path[0]) snprintf(out, n, "%s.%s", path, key);
    else snprintf(out, n, "%s", key);
}

static vkc_status field(ctx *c, const jnode *obj, const char *key, const char *path, const jnode **out) {
    char where[300];
    *out = vkc_json_get(c->doc, obj, key);
    join(where, sizeof where, path, key);
    return *out ? VKC_OK : missing(c, where);
}

static vkc_status as_int(ctx *c, const jnode *v, const char *where, int64_t lo, int64_t hi, int64_t *out) {
    if (!v || v->type != J_INT) return fail(c, where, v, "must be an integer");
    if (v->big || v->i < lo || v->i > hi)
        return fail(c, where, v, "must be in %lld..=%lld", (long long)lo, (long long)hi);
    if (out) *out = v->i;
    return VKC_OK;
}

static vkc_status int_field(ctx *c, const jnode *obj, const char *key, const char *path, int64_t lo, int64_t hi,
                            int64_t *out) {
    const jnode *v;
    char where[300];
    TRY(field(c, obj, key, path, &v));
    join(where, sizeof where, path, key);
    return as_int(c, v, where, lo, hi, out);
}

static vkc_status index_of(ctx *c, const jnode *v, const char *where, uint32_t count, const char *what,
                           uint32_t *out) {
    if (!v || v->type != J_INT) return fail(c, where, v, "must be an integer");
    if (v->big || v->i < 0 || v->i >= (int64_t)count)
        return fail(c, where, v, "is not an index into %s (%u entries)", what, count);
    *out = (uint32_t)v->i;
    return VKC_OK;
}

static vkc_status as_str(ctx *c, const jnode *v, const char *where, int nonempty) {
    if (!v || v->type != J_STRING) return fail(c, where, v, "must be a string");
    if (nonempty && v->len == 0) return fail(c, where, v, "must not be empty");
    return VKC_OK;
}

static vkc_status str_field(ctx *c, const jnode *obj, const char *key, const char *path, int nonempty,
                            const jnode **out) {
    const jnode *v;
    char where[300];
    TRY(field(c, obj, key, path, &v));
    snprintf(where, sizeof where, "%s.%s", path, key);
    TRY(as_str(c, v, where, nonempty));
    if (out) *out = v;
    return VKC_OK;
}

static vkc_status dict(ctx *c, const jnode *obj, const char *key, const char *path, const jnode **out) {
    char where[300];
    TRY(field(c, obj, key, path, out));
    join(where, sizeof where, path, key);
    if ((*out)->type != J_OBJECT) return fail(c, where, *out, "must be an object");
    return VKC_OK;
}

static vkc_status list(ctx *c, const jnode *obj, const char *key, const char *path, int length, const jnode **out) {
    char where[300];
    TRY(field(c, obj, key, path, out));
    join(where, sizeof where, path, key);
    if ((*out)->type != J_ARRAY) return fail(c, where, *out, "must be a list");
    if (length >= 0 && (*out)->len != (uint32_t)length)
        return fail(c, where, *out, "must have exactly %d entries", length);
    return VKC_OK;
}

static char *dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

#define NOMEM(c) vkc__fail((c)->err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory reading the manifest")
#define FIRST(c, n) vkc_json_child((c)->doc, (n))
#define NEXT(c, n) vkc_json_next((c)->doc, (n))

static int is_identifier(const char *s) {
    if (!s[0] || (s[0] >= '0' && s[0] <= '9')) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

/* Strings of a list, copied (the list is already checked to be strings). */
static vkc_status copy_strings(ctx *c, const jnode *lst, uint32_t *n, char ***out) {
    const jnode *e;
    uint32_t k = 0;
    *n = lst->len;
    *out = calloc(lst->len ? lst->len : 1, sizeof **out);
    if (!*out) return NOMEM(c);
    for (e = FIRST(c, lst); e; e = NEXT(c, e))
        if (!((*out)[k++] = dup(e->s))) return NOMEM(c);
    return VKC_OK;
}

static vkc_status check_model(ctx *c, const jnode *root, manifest *m) {
    const jnode *model, *v;
    TRY(dict(c, root, "model", "", &model));
    TRY(str_field(c, model, "name", "model", 0, &v));
    if (!(m->model_name = dup(v->s))) return NOMEM(c);
    TRY(str_field(c, model, "producer", "model", 0, NULL));
    TRY(str_field(c, model, "source_sha256", "model", 0, NULL));
    TRY(int_field(c, model, "opset", "model", 0, MAX_DIM, NULL));
    return VKC_OK;
}

static const char *const DEVICE_TYPES[5] = {"other", "integrated_gpu", "discrete_gpu", "virtual_gpu", "cpu"};

/* target.match (format 1.2, variants only): vendor_ids and/or device_types, both optional. */
static vkc_status check_match(ctx *c, const jnode *target, const char *tpath, m_match *out) {
    const jnode *match, *v, *e;
    char path[160], where[300];
    uint32_t i, k;
    int64_t x;
    if (!vkc_json_get(c->doc, target, "match")) return VKC_OK;
    TRY(dict(c, target, "match", tpath, &match));
    snprintf(path, sizeof path, "%s.match", tpath);
    out->present = 1;
    if (vkc_json_get(c->doc, match, "vendor_ids")) {
        TRY(list(c, match, "vendor_ids", path, -1, &v));
        out->has_vendors = 1;
        out->n_vendors = v->len;
        if (!(out->vendors = calloc(v->len ? v->len : 1, sizeof *out->vendors))) return NOMEM(c);
        for (i = 0, e = FIRST(c, v); e; e = NEXT(c, e), i++) {
            snprintf(where, sizeof where, "%s.vendor_ids[%u]", path, i);
            TRY(as_int(c, e, where, 0, 0xFFFFFFFFLL, &x));
            out->vendors[i] = (uint32_t)x;
        }
    }
    if (vkc_json_get(c->doc, match, "device_types")) {
        TRY(list(c, match, "device_types", path, -1, &v));
        out->has_types = 1;
        for (i = 0, e = FIRST(c, v); e; e = NEXT(c, e), i++) {
            snprintf(where, sizeof where, "%s.device_types[%u]", path, i);
            TRY(as_str(c, e, where, 0));
            for (k = 0; k < 5 && strcmp(e->s, DEVICE_TYPES[k]) != 0; k++) {}
            if (k == 5)
                return fail(c, where, e, "is not one of other, integrated_gpu, discrete_gpu, virtual_gpu, cpu");
            out->types |= 1u << k;  /* the VkPhysicalDeviceType value */
        }
    }
    return VKC_OK;
}

/* target and requirements of a variant (of the flat manifest: target.match is ignored there). */
static vkc_status check_target(ctx *c, const jnode *root, int multi, variant *m) {
    const jnode *target, *req, *v, *e;
    static const int64_t api_hi[3] = {127, 1023, 4095};
    char where[300], tpath[64], rpath[64];
    int64_t x;
    uint32_t i;
    snprintf(tpath, sizeof tpath, "%s%starget", PRE(c));
    snprintf(rpath, sizeof rpath, "%s%srequirements", PRE(c));
    TRY(dict(c, root, "target", c->pre, &target));
    TRY(str_field(c, target, "name", tpath, 0, &v));
    if (!(m->target = dup(v->s))) return NOMEM(c);
    if (multi) TRY(check_match(c, target, tpath, &m->match));

    TRY(dict(c, root, "requirements", c->pre, &req));
    TRY(list(c, req, "vulkan_api", rpath, 3, &v));
    for (i = 0, e = FIRST(c, v); e; e = NEXT(c, e), i++) {
        snprintf(where, sizeof where, "%s.vulkan_api[%u]", rpath, i);
        TRY(as_int(c, e, where, 0, api_hi[i], &x));
        m->api[i] = (uint32_t)x;
    }
    TRY(list(c, req, "extensions", rpath, -1, &v));
    for (i = 0, e = FIRST(c, v); e; e = NEXT(c, e), i++) {
        snprintf(where, sizeof where, "%s.extensions[%u]", rpath, i);
        TRY(as_str(c, e, where, 1));
    }
    TRY(copy_strings(c, v, &m->n_extensions, &m->extensions));
    TRY(int_field(c, req, "max_shared_memory_bytes", rpath, 0, MAX_BYTES, &x));
    m->max_shared = (uint64_t)x;
    TRY(int_field(c, req, "max_workgroup_invocations", rpath, 1, MAX_LOCAL, &x));
    m->max_invocations = (uint64_t)x;
    TRY(list(c, req, "max_workgroup_size", rpath, 3, &v));
    for (i = 0, e = FIRST(c, v); e; e = NEXT(c, e), i++) {
        snprintf(where, sizeof where, "%s.max_workgroup_size[%u]", rpath, i);
        TRY(as_int(c, e, where, 1, MAX_LOCAL, &x));
        m->max_wg[i] = (uint64_t)x;
    }
    TRY(int_field(c, req, "max_storage_buffer_range", rpath, 0, MAX_BYTES, &x));
    m->max_storage_range = (uint64_t)x;
    if ((v = vkc_json_get(c->doc, req, "features")) != NULL) {
        const jnode *f;
        TRY(list(c, req, "features", rpath, -1, &v));
        for (i = 0, e = FIRST(c, v); e; e = NEXT(c, e), i++) {
            snprintf(where, sizeof where, "%s.features[%u]", rpath, i);
            TRY(as_str(c, e, where, 1));
            if (!is_identifier(e->s))
                return fail(c, where, e, "is not a feature name (a VkPhysicalDevice*Features field)");
            for (f = FIRST(c, v); f != e; f = NEXT(c, f))
                if (strcmp(f->s, e->s) == 0) return fail(c, where, e, "is listed twice");
        }
        TRY(copy_strings(c, v, &m->n_features, &m->features));
    }
    if (vkc_json_get(c->doc, req, "max_texel_buffer_elements")) {
        TRY(int_field(c, req, "max_texel_buffer_elements", rpath, 0, MAX_BYTES, &x));
        m->max_texel_elements = (uint64_t)x;
    }
    return VKC_OK;
}

static vkc_status check_memory(ctx *c, const jnode *root, uint64_t weights_bytes, variant *m) {
    const jnode *mem, *v;
    int64_t x;
    char path[64], where[96];
    snprintf(path, sizeof path, "%s%smemory", PRE(c));
    TRY(dict(c, root, "memory", c->pre, &mem));
    TRY(int_field(c, mem, "alignment", path, 4, 65536, &x));
    snprintf(where, sizeof where, "%s.alignment", path);
    if (x & (x - 1)) return fail(c, where, vkc_json_get(c->doc, mem, "alignment"), "must be a power of two");
    m->alignment = (uint64_t)x;
    TRY(int_field(c, mem, "arena_bytes", path, 0, MAX_BYTES, &x));
    m->arena_bytes = (uint64_t)x;
    TRY(int_field(c, mem, "weights_bytes", path, 0, MAX_BYTES, &x));
    if ((uint64_t)x != weights_bytes) {
        v = vkc_json_get(c->doc, mem, "weights_bytes");
        snprintf(where, sizeof where, "%s.weights_bytes", path);
        return fail(c, where, v, "but the WEIGHTS section is %llu bytes", (unsigned long long)weights_bytes);
    }
    m->weights_bytes = weights_bytes;
    TRY(int_field(c, mem, "intermediates_sum_bytes", path, 0, MAX_BYTES, NULL));
    TRY(int_field(c, mem, "lower_bound_bytes", path, 0, MAX_BYTES, NULL));
    if (vkc_json_get(c->doc, mem, "state_bytes")) {  /* format 1.3: the state buffer */
        TRY(int_field(c, mem, "state_bytes", path, 0, MAX_BYTES, &x));
        m->state_bytes = (uint64_t)x;
    }
    return VKC_OK;
}

/* `key` as a list of objects (the Python reader's _entries). */
static vkc_status entries(ctx *c, const jnode *root, const char *key, const jnode **out) {
    const jnode *e;
    uint32_t i = 0;
    char where[300];
    TRY(list(c, root, key, c->pre, -1, out));
    for (e = FIRST(c, *out); e; e = NEXT(c, e), i++) {
        snprintf(where, sizeof where, "%s%s%s[%u]", PRE(c), key, i);
        if (e->type != J_OBJECT) return fail(c, where, e, "must be an object");
    }
    return VKC_OK;
}

static vkc_status check_tensors(ctx *c, const jnode *root, variant *m) {
    const jnode *ts, *t, *v, *e;
    uint32_t i, k;
    char path[96], where[300];
    TRY(entries(c, root, "tensors", &ts));
    m->n_tensors = ts->len;
    if (!(m->tensors = calloc(ts->len ? ts->len : 1, sizeof *m->tensors))) return NOMEM(c);
    for (i = 0, t = FIRST(c, ts); t; t = NEXT(c, t), i++) {
        m_tensor *mt = &m->tensors[i];
        const jnode *dt, *shape, *mem;
        int dtype = -1;
        int64_t count = 1, x, off, nbytes;
        uint64_t size;
        int zero = 0;
        snprintf(path, sizeof path, "%s%stensors[%u]", PRE(c), i);
        TRY(str_field(c, t, "name", path, 0, &v));
        if (!(mt->name = dup(v->s))) return NOMEM(c);
        TRY(str_field(c, t, "dtype", path, 0, &dt));
        for (k = 0; k < VKC_DTYPE_COUNT; k++)
            if (strcmp(dt->s, DTYPE_NAMES[k]) == 0) dtype = (int)k;
        snprintf(where, sizeof where, "%s.dtype", path);
        if (dtype < 0)
            return fail(c, where, dt, "is not one of float32, float16, int32, int64, uint8, int8, bool, float64, "
                        "int16, uint16, uint32, uint64, bfloat16, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, "
                        "float8_e5m2fnuz, uint4, int4, float4_e2m1fn, float8_e8m0fnu, uint2, int2");
        mt->dtype = (vkc_dtype)dtype;
        TRY(list(c, t, "shape", path, -1, &shape));
        snprintf(where, sizeof where, "%s.shape", path);
        mt->rank = shape->len;
        if (!(mt->shape = calloc(shape->len ? shape->len : 1, sizeof *mt->shape))) return NOMEM(c);
        for (k = 0, e = FIRST(c, shape); e; e = NEXT(c, e), k++) {
            char w2[320];
            snprintf(w2, sizeof w2, "%s[%u]", where, k);
            TRY(as_int(c, e, w2, 0, MAX_DIM, &x));
            mt->shape[k] = x;
            zero |= x == 0;
        }
        if (!zero)
            for (k = 0; k < mt->rank; k++) {
                count *= mt->shape[k];
                if (count > MAX_BYTES) return fail(c, where, shape, "has more than %lld elements", (long long)MAX_BYTES);
            }
        else count = 0;
        TRY(int_field(c, t, "nbytes", path, 0, MAX_BYTES, &nbytes));
        if ((uint64_t)nbytes != vkc_dtype_nbytes((vkc_dtype)dtype, (uint64_t)count)) {
            snprintf(where, sizeof where, "%s.nbytes", path);
            return fail(c, where, vkc_json_get(c->doc, t, "nbytes"), "but the shape of %s is %llu bytes",
                        DTYPE_NAMES[dtype], (unsigned long long)vkc_dtype_nbytes((vkc_dtype)dtype, (uint64_t)count));
        }
        mt->nbytes = (uint64_t)nbytes;
        TRY(str_field(c, t, "memory", path, 0, &mem));
        snprintf(where, sizeof where, "%s.memory", path);
        if (strcmp(mem->s, "arena") == 0) mt->memory = MEM_ARENA;
        else if (strcmp(mem->s, "weights") == 0) mt->memory = MEM_WEIGHTS;
        else if (strcmp(mem->s, "state") == 0) mt->memory = MEM_STATE;   /* format 1.3 (FORMAT.md, "State") */
        else return fail(c, where, mem, "must be 'arena', 'weights' or 'state'");
        TRY(int_field(c, t, "offset", path, 0, MAX_BYTES, &off));
        snprintf(where, sizeof where, "%s.offset", path);
        if ((uint64_t)off % m->alignment)
            return fail(c, where, vkc_json_get(c->doc, t, "offset"), "is not a multiple of memory.alignment = %llu",
                        (unsigned long long)m->alignment);
        size = mt->memory == MEM_ARENA ? m->arena_bytes : mt->memory == MEM_WEIGHTS ? m->weights_bytes : m->state_bytes;
        if ((uint64_t)off + (uint64_t)nbytes > size)
            return fail(c, where, vkc_json_get(c->doc, t, "offset"), "+ nbytes %lld = %llu runs past the end of %s "
                        "(%llu bytes)", (long long)nbytes, (unsigned long long)(off + nbytes), mem->s,
                        (unsigned long long)size);
        mt->offset = (uint64_t)off;
    }
    return VKC_OK;
}

static vkc_status check_io(ctx *c, const jnode *root, variant *m) {
    static const char *const keys[2] = {"inputs", "outputs"};
    for (int which = 0; which < 2; which++) {
        const jnode *lst, *io, *name, *o;
        m_io *arr;
        uint32_t i;
        char path[96], where[300];
        TRY(entries(c, root, keys[which], &lst));
        if (!(arr = calloc(lst->len ? lst->len : 1, sizeof *arr))) return NOMEM(c);
        if (which == 0) { m->inputs = arr; m->n_inputs = lst->len; }
        else { m->outputs = arr; m->n_outputs = lst->len; }
        for (i = 0, io = FIRST(c, lst); io; io = NEXT(c, io), i++) {
            snprintf(path, sizeof path, "%s%s%s[%u]", PRE(c), keys[which], i);
            TRY(str_field(c, io, "name", path, 1, &name));
            for (o = FIRST(c, lst); o != io; o = NEXT(c, o))
                if (strcmp(vkc_json_get(c->doc, o, "name")->s, name->s) == 0) {
                    snprintf(where, sizeof where, "%s.name", path);
                    return fail(c, where, name, "appears twice in %s", keys[which]);
                }
            if (!(arr[i].name = dup(name->s))) return NOMEM(c);
            TRY(field(c, io, "tensor", path, &o));
            snprintf(where, sizeof where, "%s.tensor", path);
            TRY(index_of(c, o, where, m->n_tensors, "tensors", &arr[i].tensor));
            if (m->tensors[arr[i].tensor].memory != MEM_ARENA)
                return fail(c, where, o, "is a %s tensor; %s must be in the arena",
                            vkc_memory_names[m->tensors[arr[i].tensor].memory], keys[which]);
        }
    }
    return VKC_OK;
}

static int within(const m_tensor *t, const m_tensor *outer) {
    return outer->offset <= t->offset && t->offset + t->nbytes <= outer->offset + outer->nbytes;
}

/* state (format 1.3): each entry a state tensor held between runs, its name apart from the inputs
 * and outputs, fed by an output the API does not list either; the state buffer holds the state
 * entries' tensors and views of them only. */
static vkc_status check_state(ctx *c, const jnode *root, variant *m) {
    const jnode *lst, *e, *name, *output, *o;
    uint32_t i, k;
    char path[96], where[300];
    if (!vkc_json_get(c->doc, root, "state")) return VKC_OK;
    TRY(entries(c, root, "state", &lst));
    if (!(m->state = calloc(lst->len ? lst->len : 1, sizeof *m->state))) return NOMEM(c);
    for (i = 0, e = FIRST(c, lst); e; e = NEXT(c, e), i++) {
        int twice = 0;
        snprintf(path, sizeof path, "%s%sstate[%u]", PRE(c), i);
        TRY(str_field(c, e, "name", path, 1, &name));
        TRY(str_field(c, e, "output", path, 1, &output));
        for (k = 0; k < m->n_inputs; k++) twice |= strcmp(m->inputs[k].name, name->s) == 0;
        for (k = 0; k < m->n_outputs; k++) twice |= strcmp(m->outputs[k].name, name->s) == 0;
        for (k = 0; k < i; k++) twice |= strcmp(m->state[k].name, name->s) == 0;
        if (twice) {
            snprintf(where, sizeof where, "%s.name", path);
            return fail(c, where, name, "is used twice among the inputs, outputs and state");
        }
        m->n_state = i + 1;
        if (!(m->state[i].name = dup(name->s)) || !(m->state[i].output = dup(output->s))) return NOMEM(c);
        TRY(field(c, e, "tensor", path, &o));
        snprintf(where, sizeof where, "%s.tensor", path);
        TRY(index_of(c, o, where, m->n_tensors, "tensors", &m->state[i].tensor));
        if (m->tensors[m->state[i].tensor].memory != MEM_STATE)
            return fail(c, where, o, "is a %s tensor; state must be in the state buffer",
                        vkc_memory_names[m->tensors[m->state[i].tensor].memory]);
    }
    for (i = 0, e = FIRST(c, vkc_json_get(c->doc, root, "tensors")); e; e = NEXT(c, e), i++) {
        int held = 0;
        if (m->tensors[i].memory != MEM_STATE) continue;
        for (k = 0; k < m->n_state; k++) held |= within(&m->tensors[i], &m->tensors[m->state[k].tensor]);
        if (!held) {
            snprintf(where, sizeof where, "%s%stensors[%u].memory", PRE(c), i);
            return fail(c, where, vkc_json_get(c->doc, e, "memory"), "but the tensor lies in no state entry's bytes");
        }
    }
    return VKC_OK;
}

static vkc_status check_modules(ctx *c, const jnode *root, uint32_t module_count, manifest *m) {
    const jnode *lst, *mod, *v, *e;
    uint32_t i, k;
    int64_t x;
    char path[64], where[300];
    TRY(entries(c, root, "modules", &lst));
    if (lst->len != module_count)
        return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "modules has %u entries but the bundle has %u SPIR-V "
                         "sections", lst->len, module_count);
    m->n_modules = lst->len;
    if (!(m->modules = calloc(lst->len ? lst->len : 1, sizeof *m->modules))) return NOMEM(c);
    for (i = 0, mod = FIRST(c, lst); mod; mod = NEXT(c, mod), i++) {
        m_module *mm = &m->modules[i];
        uint64_t prod = 1;
        snprintf(path, sizeof path, "modules[%u]", i);
        TRY(str_field(c, mod, "name", path, 0, &v));
        if (!(mm->name = dup(v->s))) return NOMEM(c);
        TRY(int_field(c, mod, "bindings", path, 1, MAX_BINDINGS, &x));
        mm->bindings = (uint32_t)x;
        TRY(list(c, mod, "local_size", path, 3, &v));
        snprintf(where, sizeof where, "%s.local_size", path);
        for (k = 0, e = FIRST(c, v); e; e = NEXT(c, e), k++) {
            char w2[320];
            snprintf(w2, sizeof w2, "%s[%u]", where, k);
            TRY(as_int(c, e, w2, 1, MAX_LOCAL, &x));
            mm->local[k] = (uint32_t)x;
            prod *= (uint64_t)x;
        }
        if (prod > MAX_LOCAL) return fail(c, where, v, "has %llu invocations, more than %d", (unsigned long long)prod, MAX_LOCAL);
        TRY(int_field(c, mod, "shared_memory_bytes", path, 0, MAX_BYTES, &x));
        mm->shared = (uint64_t)x;
        if (vkc_json_get(c->doc, mod, "texel_buffers")) {
            const jnode *tb;
            TRY(list(c, mod, "texel_buffers", path, -1, &v));
            for (k = 0, tb = FIRST(c, v); tb; tb = NEXT(c, tb), k++) {
                char tpath[320], w2[340];
                const jnode *fmt;
                snprintf(tpath, sizeof tpath, "%s.texel_buffers[%u]", path, k);
                if (tb->type != J_OBJECT) return fail(c, tpath, tb, "must be an object with binding and format");
                TRY(int_field(c, tb, "binding", tpath, 0, (int64_t)mm->bindings - 1, &x));
                if (mm->texel[x]) {
                    snprintf(w2, sizeof w2, "%s.binding", tpath);
                    return fail(c, w2, vkc_json_get(c->doc, tb, "binding"), "is listed twice");
                }
                TRY(str_field(c, tb, "format", tpath, 0, &fmt));
                snprintf(w2, sizeof w2, "%s.format", tpath);
                if (strcmp(fmt->s, "r32f") == 0) mm->texel[x] = TEXEL_R32F;
                else if (strcmp(fmt->s, "rgba32f") == 0) mm->texel[x] = TEXEL_RGBA32F;
                else return fail(c, w2, fmt, "is not one of r32f, rgba32f");
            }
        }
    }
    return VKC_OK;
}

static uint32_t f32_bits(double d) {
    float f = (float)d;
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static vkc_status check_kernels(ctx *c, const jnode *root, const manifest *man, variant *m) {
    const jnode *lst, *k, *v, *specs, *sp;
    uint32_t i, j;
    char path[96], where[300];
    TRY(entries(c, root, "kernels", &lst));
    m->n_kernels = lst->len;
    if (!(m->kernels = calloc(lst->len ? lst->len : 1, sizeof *m->kernels))) return NOMEM(c);
    for (i = 0, k = FIRST(c, lst); k; k = NEXT(c, k), i++) {
        m_kernel *mk = &m->kernels[i];
        snprintf(path, sizeof path, "%s%skernels[%u]", PRE(c), i);
        TRY(str_field(c, k, "name", path, 0, &v));
        if (!(mk->name = dup(v->s))) return NOMEM(c);
        TRY(field(c, k, "module", path, &v));
        snprintf(where, sizeof where, "%s.module", path);
        TRY(index_of(c, v, where, man->n_modules, "modules", &mk->module));
        m->uses[mk->module] = 1;
        TRY(list(c, k, "specialization", path, -1, &specs));
        mk->n_spec = specs->len;
        if (!(mk->spec = calloc(specs->len ? specs->len : 1, sizeof *mk->spec))) return NOMEM(c);
        for (j = 0, sp = FIRST(c, specs); sp; sp = NEXT(c, sp), j++) {
            char spath[160], w2[300];
            const jnode *type, *val;
            int64_t id;
            snprintf(spath, sizeof spath, "%s.specialization[%u]", path, j);
            if (sp->type != J_OBJECT) return fail(c, spath, sp, "must be an object");
            TRY(int_field(c, sp, "id", spath, 0, 65535, &id));
            for (uint32_t q = 0; q < j; q++)
                if (mk->spec[q].id == (uint32_t)id) {
                    snprintf(w2, sizeof w2, "%s.id", spath);
                    return fail(c, w2, vkc_json_get(c->doc, sp, "id"), "is used twice in this kernel");
                }
            mk->spec[j].id = (uint32_t)id;
            TRY(str_field(c, sp, "type", spath, 0, &type));
            snprintf(w2, sizeof w2, "%s.type", spath);
            if (strcmp(type->s, "int32") && strcmp(type->s, "uint32") && strcmp(type->s, "float32"))
                return fail(c, w2, type, "is not one of int32, uint32, float32");
            TRY(field(c, sp, "value", spath, &val));
            snprintf(w2, sizeof w2, "%s.value", spath);
            if (strcmp(type->s, "int32") == 0) {
                int64_t x;
                TRY(as_int(c, val, w2, -2147483648LL, 2147483647LL, &x));
                mk->spec[j].bits = (uint32_t)(int32_t)x;
            } else if (strcmp(type->s, "uint32") == 0) {
                int64_t x;
                TRY(as_int(c, val, w2, 0, 4294967295LL, &x));
                mk->spec[j].bits = (uint32_t)x;
            } else {
                double d;
                if (val->type == J_INT) {
                    if (val->big) return fail(c, w2, val, "does not fit in float32");
                    d = (double)val->i;
                    /* exact comparison of a big int with FLT_MAX: |i| < 2^63 < FLT_MAX; fine */
                } else if (val->type == J_FLOAT) {
                    d = val->d;
                    if (!isfinite(d)) return fail(c, w2, val, "must be finite");
                } else {
                    return fail(c, w2, val, "must be a number");
                }
                if (fabs(d) > FLT_MAX_D) return fail(c, w2, val, "does not fit in float32");
                mk->spec[j].bits = f32_bits(d);
            }
        }
    }
    return VKC_OK;
}

static vkc_status check_dispatches(ctx *c, const jnode *root, const manifest *man, variant *m) {
    const jnode *lst, *d, *v, *e;
    uint32_t i, k;
    int64_t x;
    char path[96], where[300];
    TRY(entries(c, root, "dispatches", &lst));
    m->n_dispatches = lst->len;
    if (!(m->dispatches = calloc(lst->len ? lst->len : 1, sizeof *m->dispatches))) return NOMEM(c);
    for (i = 0, d = FIRST(c, lst); d; d = NEXT(c, d), i++) {
        m_dispatch *md = &m->dispatches[i];
        uint32_t want;
        snprintf(path, sizeof path, "%s%sdispatches[%u]", PRE(c), i);
        TRY(field(c, d, "kernel", path, &v));
        snprintf(where, sizeof where, "%s.kernel", path);
        TRY(index_of(c, v, where, m->n_kernels, "kernels", &md->kernel));
        want = man->modules[m->kernels[md->kernel].module].bindings;
        TRY(list(c, d, "bindings", path, -1, &v));
        snprintf(where, sizeof where, "%s.bindings", path);
        if (v->len != want)
            return fail(c, where, v, "has %u entries but kernel %u's module has %u bindings", v->len, md->kernel, want);
        md->n_bindings = want;
        if (!(md->bindings = calloc(want, sizeof *md->bindings))) return NOMEM(c);
        for (k = 0, e = FIRST(c, v); e; e = NEXT(c, e), k++) {
            char w2[320];
            snprintf(w2, sizeof w2, "%s[%u]", where, k);
            TRY(index_of(c, e, w2, m->n_tensors, "tensors", &md->bindings[k]));
        }
        TRY(list(c, d, "groups", path, 3, &v));
        snprintf(where, sizeof where, "%s.groups", path);
        for (k = 0, e = FIRST(c, v); e; e = NEXT(c, e), k++) {
            char w2[320];
            snprintf(w2, sizeof w2, "%s[%u]", where, k);
            TRY(as_int(c, e, w2, 1, MAX_GROUPS, &x));
            md->groups[k] = (uint32_t)x;
        }
        TRY(field(c, d, "barrier", path, &v));
        snprintf(where, sizeof where, "%s.barrier", path);
        if (v->type != J_TRUE && v->type != J_FALSE) return fail(c, where, v, "must be true or false");
        md->barrier = v->type == J_TRUE;
        if ((v = vkc_json_get(c->doc, d, "nodes")) != NULL) {
            TRY(list(c, d, "nodes", path, -1, &v));
            for (k = 0, e = FIRST(c, v); e; e = NEXT(c, e), k++) {
                char w2[320];
                snprintf(w2, sizeof w2, "%s.nodes[%u]", path, k);
                TRY(as_str(c, e, w2, 0));
            }
        }
        if (vkc_json_get(c->doc, d, "flops")) TRY(int_field(c, d, "flops", path, 0, MAX_COUNT, NULL));
        if (vkc_json_get(c->doc, d, "bytes")) TRY(int_field(c, d, "bytes", path, 0, MAX_COUNT, NULL));
    }
    return VKC_OK;
}

/* A module counts for a variant's requirements when one of its kernels uses it (format 1.2); in a
 * flat manifest every module counts, as in format 1.1. */
static int counts(const manifest *man, const variant *v, uint32_t module) {
    return !man->multi || v->uses[module];
}

static vkc_status check_requirements(ctx *c, const manifest *man, const variant *m) {
    char where[64];
    for (uint32_t i = 0; i < man->n_modules; i++) {
        const m_module *mm = &man->modules[i];
        uint64_t prod = (uint64_t)mm->local[0] * mm->local[1] * mm->local[2];
        if (!counts(man, m, i)) continue;
        snprintf(where, sizeof where, "modules[%u].local_size", i);
        if (prod > m->max_invocations)
            return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "%s = [%u, %u, %u] has %llu invocations but "
                             "%s%srequirements.max_workgroup_invocations = %llu", where, mm->local[0], mm->local[1],
                             mm->local[2], (unsigned long long)prod, PRE(c), (unsigned long long)m->max_invocations);
        for (int a = 0; a < 3; a++)
            if (mm->local[a] > m->max_wg[a])
                return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "%s = [%u, %u, %u] exceeds "
                                 "%s%srequirements.max_workgroup_size = [%llu, %llu, %llu] on axis %c", where,
                                 mm->local[0], mm->local[1], mm->local[2], PRE(c), (unsigned long long)m->max_wg[0],
                                 (unsigned long long)m->max_wg[1], (unsigned long long)m->max_wg[2], "xyz"[a]);
        if (mm->shared > m->max_shared)
            return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "modules[%u].shared_memory_bytes = %llu exceeds "
                             "%s%srequirements.max_shared_memory_bytes = %llu", i, (unsigned long long)mm->shared,
                             PRE(c), (unsigned long long)m->max_shared);
    }
    for (uint32_t j = 0; j < m->n_dispatches; j++) {
        const m_dispatch *d = &m->dispatches[j];
        const m_module *mm = &man->modules[m->kernels[d->kernel].module];
        for (uint32_t i = 0; i < d->n_bindings; i++) {
            const m_tensor *t = &m->tensors[d->bindings[i]];
            if (mm->texel[i]) {
                uint64_t size = mm->texel[i] == TEXEL_R32F ? 4 : 16;
                if (t->nbytes % size || t->nbytes / size > m->max_texel_elements)
                    return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "%s%sdispatches[%u].bindings[%u] = %u binds "
                                     "tensor %u of %llu bytes as %s texels (%llu bytes each); it must be whole texels, "
                                     "at most requirements.max_texel_buffer_elements = %llu", PRE(c), j, i,
                                     d->bindings[i], d->bindings[i], (unsigned long long)t->nbytes,
                                     size == 4 ? "r32f" : "rgba32f", (unsigned long long)size,
                                     (unsigned long long)m->max_texel_elements);
            }
            if (t->nbytes > m->max_storage_range)
                return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "%s%sdispatches[%u].bindings[%u] = %u binds "
                                 "tensor %u of %llu bytes but requirements.max_storage_buffer_range = %llu", PRE(c), j,
                                 i, d->bindings[i], d->bindings[i], (unsigned long long)t->nbytes,
                                 (unsigned long long)m->max_storage_range);
        }
    }
    return VKC_OK;
}

/* Everything of one variant (or of the flat manifest), in bundles/manifest.py's order. */
static vkc_status check_variant(ctx *c, const jnode *obj, uint64_t weights_bytes, manifest *man, variant *v) {
    if (!(v->uses = calloc(man->n_modules + 1, 1))) return NOMEM(c);
    TRY(check_target(c, obj, man->multi, v));
    TRY(check_memory(c, obj, weights_bytes, v));
    TRY(check_tensors(c, obj, v));
    TRY(check_io(c, obj, v));
    TRY(check_state(c, obj, v));
    TRY(check_kernels(c, obj, man, v));
    TRY(check_dispatches(c, obj, man, v));
    return check_requirements(c, man, v);
}

/* A variant's default name (and a flat manifest's), as runtime_min makes it: "<target> ids=1x32,mask=1x32". */
static char *shapes_label(const variant *v) {
    size_t n = strlen(v->target) + 2, used;
    char *out;
    for (uint32_t i = 0; i < v->n_inputs; i++) n += strlen(v->inputs[i].name) + 8 + 21 * (size_t)v->tensors[v->inputs[i].tensor].rank;
    if (!(out = malloc(n))) return NULL;
    used = (size_t)snprintf(out, n, "%s ", v->target);
    for (uint32_t i = 0; i < v->n_inputs; i++) {
        const m_tensor *t = &v->tensors[v->inputs[i].tensor];
        used += (size_t)snprintf(out + used, n - used, "%s%s=%s", i ? "," : "", v->inputs[i].name, t->rank ? "" : "scalar");
        for (uint32_t d = 0; d < t->rank; d++) used += (size_t)snprintf(out + used, n - used, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
    }
    return out;
}

/* Keys a format 1.2 manifest holds per variant only. */
static const char *const VARIANT_KEYS[8] = {"target", "requirements", "memory", "tensors", "inputs", "outputs",
                                            "kernels", "dispatches"};

/* Every variant has the inputs and outputs of the first: names, order and dtypes (shapes may differ). */
static vkc_status same_io(ctx *c, const manifest *man) {
    const variant *first = &man->variants[0];
    for (uint32_t k = 1; k < man->n_variants; k++) {
        const variant *v = &man->variants[k];
        for (int which = 0; which < 2; which++) {
            const char *key = which ? "outputs" : "inputs";
            uint32_t n = which ? v->n_outputs : v->n_inputs, n0 = which ? first->n_outputs : first->n_inputs;
            const m_io *io = which ? v->outputs : v->inputs, *io0 = which ? first->outputs : first->inputs;
            const m_tensor *t = v->tensors, *t0 = first->tensors;
            if (n != n0)
                return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "variants[%u].%s has %u entries but variants[0]."
                                 "%s has %u; all variants have the same inputs and outputs", k, key, n, key, n0);
            for (uint32_t i = 0; i < n; i++) {
                if (strcmp(io[i].name, io0[i].name) != 0)
                    return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "variants[%u].%s[%u].name = '%.60s' but "
                                     "variants[0].%s[%u].name = '%.60s'; all variants have the same %s, in the same "
                                     "order", k, key, i, io[i].name, key, i, io0[i].name, key);
                if (t[io[i].tensor].dtype != t0[io0[i].tensor].dtype)
                    return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "variants[%u].%s[%u] ('%.60s') is %s but in "
                                     "variants[0] it is %s; all variants have the same dtypes", k, key, i, io[i].name,
                                     vkc_dtype_name(t[io[i].tensor].dtype), vkc_dtype_name(t0[io0[i].tensor].dtype));
            }
        }
    }
    return VKC_OK;
}

/* One state buffer serves every variant (format 1.3): variant k holds the state of variants[0], at
 * the same bytes. */
static vkc_status same_state(ctx *c, const manifest *man, uint32_t k) {
    const variant *v = &man->variants[k], *v0 = &man->variants[0];
    int same = v->n_state == v0->n_state && v->state_bytes == v0->state_bytes;
    for (uint32_t i = 0; same && i < v->n_state; i++) {
        const m_state *s = &v->state[i], *s0 = &v0->state[i];
        const m_tensor *t = &v->tensors[s->tensor], *t0 = &v0->tensors[s0->tensor];
        same = s->tensor == s0->tensor && !strcmp(s->name, s0->name) && !strcmp(s->output, s0->output) &&
               !strcmp(t->name, t0->name) && t->dtype == t0->dtype && t->rank == t0->rank &&
               !memcmp(t->shape, t0->shape, t->rank * sizeof *t->shape) && t->nbytes == t0->nbytes &&
               t->offset == t0->offset;
    }
    if (same) return VKC_OK;
    return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "variants[%u].state differs from variants[0].state; every "
                     "variant holds the same state (names, tensors, offsets and state_bytes)", k);
}

static vkc_status check_variants(ctx *c, const jnode *root, uint32_t module_count, uint64_t weights_bytes,
                                 manifest *man) {
    const jnode *lst, *e;
    uint32_t i;
    for (i = 0; i < 8; i++)
        if (vkc_json_get(c->doc, root, VARIANT_KEYS[i]))
            return vkc__fail(c->err, VKC_ERR_BUNDLE, "manifest", "%s is present beside variants; a manifest with "
                             "variants holds it in each variant only", VARIANT_KEYS[i]);
    TRY(check_model(c, root, man));
    TRY(check_modules(c, root, module_count, man));
    TRY(entries(c, root, "variants", &lst));
    if (lst->len == 0) return fail(c, "variants", lst, "must have at least one entry");
    man->n_variants = lst->len;
    if (!(man->variants = calloc(lst->len, sizeof *man->variants))) return NOMEM(c);
    for (i = 0, e = FIRST(c, lst); e; e = NEXT(c, e), i++) {
        const jnode *name = vkc_json_get(c->doc, e, "name");
        snprintf(c->pre, sizeof c->pre, "variants[%u]", i);
        if (name) TRY(str_field(c, e, "name", c->pre, 0, &name));  /* optional, informational */
        TRY(check_variant(c, e, weights_bytes, man, &man->variants[i]));
        if (i) TRY(same_state(c, man, i));
        if (!(man->variants[i].name = name ? dup(name->s) : shapes_label(&man->variants[i]))) return NOMEM(c);
    }
    c->pre[0] = '\0';
    return same_io(c, man);
}

static vkc_status check_flat(ctx *c, const jnode *root, uint32_t module_count, uint64_t weights_bytes, manifest *man) {
    /* bundles/manifest.py's order: model, target, requirements, memory, tensors, io, modules, ... */
    variant *v;
    if (!(man->variants = calloc(1, sizeof *man->variants))) return NOMEM(c);
    man->n_variants = 1;
    v = &man->variants[0];
    TRY(check_model(c, root, man));
    TRY(check_target(c, root, 0, v));
    TRY(check_memory(c, root, weights_bytes, v));
    TRY(check_tensors(c, root, v));
    TRY(check_io(c, root, v));
    TRY(check_state(c, root, v));
    TRY(check_modules(c, root, module_count, man));
    if (!(v->uses = calloc(man->n_modules + 1, 1))) return NOMEM(c);
    TRY(check_kernels(c, root, man, v));
    TRY(check_dispatches(c, root, man, v));
    TRY(check_requirements(c, man, v));
    return (v->name = shapes_label(v)) ? VKC_OK : NOMEM(c);
}

vkc_status vkc_manifest_check(const uint8_t *json, size_t json_len, const uint8_t *const *modules,
                              const size_t *module_sizes, uint32_t module_count, uint64_t weights_bytes,
                              manifest *out, vkc_error *err) {
    jdoc doc;
    ctx c;
    const jnode *root, *v;
    vkc_status s;
    memset(out, 0, sizeof *out);
    TRY(vkc_json_parse((const char *)json, json_len, &doc, err));
    c.doc = &doc;
    c.err = err;
    c.pre[0] = '\0';
    root = &doc.nodes[0];
    v = vkc_json_get(&doc, root, "manifest_version");
    out->multi = vkc_json_get(&doc, root, "variants") != NULL;
    if (!v) s = missing(&c, "manifest_version");
    else if (v->type != J_INT || v->big || v->i != 1)
        s = fail(&c, "manifest_version", v, "is not supported (this reader knows 1)");
    else if (out->multi) s = check_variants(&c, root, module_count, weights_bytes, out);
    else s = check_flat(&c, root, module_count, weights_bytes, out);
    vkc_json_free(&doc);
    if (s == VKC_OK) s = vkc_spirv_interface(out, modules, module_sizes, err);
    for (uint32_t k = 0; s == VKC_OK && k < out->n_variants; k++) {
        char where[32] = "";
        if (out->multi) snprintf(where, sizeof where, "variants[%u].", k);
        s = vkc_check_barriers(out, &out->variants[k], where, err);
    }
    if (s != VKC_OK) vkc_manifest_free(out);
    return s;
}

static void free_variant(variant *v) {
    uint32_t i;
    free(v->name);
    free(v->target);
    free(v->match.vendors);
    for (i = 0; i < v->n_extensions && v->extensions; i++) free(v->extensions[i]);
    for (i = 0; i < v->n_features && v->features; i++) free(v->features[i]);
    free(v->extensions);
    free(v->features);
    for (i = 0; i < v->n_tensors && v->tensors; i++) { free(v->tensors[i].name); free(v->tensors[i].shape); }
    free(v->tensors);
    for (i = 0; i < v->n_inputs && v->inputs; i++) free(v->inputs[i].name);
    for (i = 0; i < v->n_outputs && v->outputs; i++) free(v->outputs[i].name);
    free(v->inputs);
    free(v->outputs);
    for (i = 0; i < v->n_state && v->state; i++) { free(v->state[i].name); free(v->state[i].output); }
    free(v->state);
    for (i = 0; i < v->n_kernels && v->kernels; i++) { free(v->kernels[i].name); free(v->kernels[i].spec); }
    free(v->kernels);
    for (i = 0; i < v->n_dispatches && v->dispatches; i++) free(v->dispatches[i].bindings);
    free(v->dispatches);
    free(v->uses);
}

void vkc_manifest_free(manifest *m) {
    uint32_t i;
    free(m->model_name);
    for (i = 0; i < m->n_variants && m->variants; i++) free_variant(&m->variants[i]);
    free(m->variants);
    for (i = 0; i < m->n_modules && m->modules; i++) {
        free(m->modules[i].name);
        free(m->modules[i].caps);
        for (uint32_t k = 0; k < m->modules[i].n_exts; k++) free(m->modules[i].exts[k]);
        free(m->modules[i].exts);
    }
    free(m->modules);
    memset(m, 0, sizeof *m);
}

/* ---- barriers ------------------------------------------------------------------------------- */

typedef struct range { int memory; uint64_t lo, hi; } range;

static int overlaps(const range *set, uint32_t n, const range *r) {
    for (uint32_t i = 0; i < n; i++)
        if (set[i].memory == r->memory && set[i].lo < r->hi && r->lo < set[i].hi) return 1;
    return 0;
}

vkc_status vkc_check_barriers(const manifest *man, const variant *m, const char *where, vkc_error *err) {
    /* Ranges read and written by the dispatches since the last barrier. A dispatch's own reads and
     * writes may overlap (an in-place kernel); only earlier dispatches' accesses need a barrier. */
    uint64_t total = 0;
    range *reads, *writes;
    uint32_t nr = 0, nw = 0;
    for (uint32_t j = 0; j < m->n_dispatches; j++) total += m->dispatches[j].n_bindings;
    reads = malloc((size_t)(total ? total : 1) * sizeof *reads);
    writes = malloc((size_t)(total ? total : 1) * sizeof *writes);
    if (!reads || !writes) {
        free(reads);
        free(writes);
        return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory checking barriers");
    }
    for (uint32_t j = 0; j < m->n_dispatches; j++) {
        const m_dispatch *d = &m->dispatches[j];
        const m_module *mm = &man->modules[m->kernels[d->kernel].module];
        uint32_t nr0, nw0;
        if (d->barrier) nr = nw = 0;
        nr0 = nr;
        nw0 = nw;
        for (uint32_t b = 0; b < d->n_bindings; b++) {
            const m_tensor *t = &m->tensors[d->bindings[b]];
            range r;
            int readonly = mm->readonly[b] || mm->texel[b];
            r.memory = t->memory;
            /* The bytes the runtime binds (bundles/hazards.py bound_range): an empty tensor binds
             * the first 4 bytes of its buffer, as a zero-length range is invalid. */
            r.lo = t->nbytes ? t->offset : 0;
            r.hi = t->nbytes ? t->offset + t->nbytes : 4;
            int after_write = overlaps(writes, nw0, &r);
            if (after_write || (!readonly && overlaps(reads, nr0, &r))) {
                free(reads);
                free(writes);
                return vkc__fail(err, VKC_ERR_BUNDLE, "barriers", "%sdispatches[%u] %s tensor %u (%s bytes %llu..%llu) "
                                 "at binding %u, which an earlier dispatch since the last barrier %s, but its barrier "
                                 "is false", where, j, readonly ? "reads" : "writes", d->bindings[b],
                                 vkc_memory_names[r.memory], (unsigned long long)r.lo,
                                 (unsigned long long)r.hi, b, after_write ? "wrote" : "read");
            }
            if (readonly) reads[nr++] = r;
            else writes[nw++] = r;
        }
    }
    free(reads);
    free(writes);
    return VKC_OK;
}
