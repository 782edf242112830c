/* SPIR-V reflection, as far as the loader needs it: the `spirv interface` check of bundles/spirv.py
 * (entry point, descriptors, specialization constants, local size, shared memory, version), and
 * what each module needs of a device (capabilities, extensions, workgroup-scope cooperative matrices)
 * and which bindings it never writes (NonWritable) for the barrier rule. Modules reaching here
 * passed the container's framing checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum {
    OP_EXTENSION = 10, OP_CAPABILITY = 17, OP_ENTRY_POINT = 15, OP_EXECUTION_MODE = 16, OP_EXECUTION_MODE_ID = 331,
    OP_TYPE_BOOL = 20, OP_TYPE_INT = 21, OP_TYPE_FLOAT = 22, OP_TYPE_VECTOR = 23, OP_TYPE_MATRIX = 24,
    OP_TYPE_IMAGE = 25, OP_TYPE_SAMPLED_IMAGE = 27, OP_TYPE_ARRAY = 28, OP_TYPE_RUNTIME_ARRAY = 29,
    OP_TYPE_STRUCT = 30, OP_TYPE_POINTER = 32, OP_CONSTANT = 43, OP_CONSTANT_COMPOSITE = 44,
    OP_SPEC_CONSTANT_TRUE = 48, OP_SPEC_CONSTANT_FALSE = 49, OP_SPEC_CONSTANT = 50, OP_SPEC_CONSTANT_COMPOSITE = 51,
    OP_SPEC_CONSTANT_OP = 52, OP_VARIABLE = 59, OP_DECORATE = 71, OP_MEMBER_DECORATE = 72,
    OP_TYPE_COOPERATIVE_MATRIX = 4456
};
enum { GL_COMPUTE = 5, MODE_LOCAL_SIZE = 17, MODE_LOCAL_SIZE_ID = 38, DIM_BUFFER = 5, BUILTIN_WORKGROUP_SIZE = 25,
       SCOPE_WORKGROUP = 2 };
enum { DEC_SPEC_ID = 1, DEC_BLOCK = 2, DEC_BUFFER_BLOCK = 3, DEC_BUILTIN = 11, DEC_NON_WRITABLE = 24,
       DEC_BINDING = 33, DEC_SET = 34 };
enum { SC_UNIFORM_CONSTANT = 0, SC_UNIFORM = 2, SC_WORKGROUP = 4, SC_PUSH_CONSTANT = 9, SC_ATOMIC_COUNTER = 10,
       SC_IMAGE = 11, SC_STORAGE_BUFFER = 12 };

/* Decoration flags, one bit per decoration this reader uses; values where they carry one. */
enum { F_SPEC = 1, F_BLOCK = 2, F_BUFFER_BLOCK = 4, F_BUILTIN = 8, F_BINDING = 16, F_SET = 32, F_NONWRITABLE = 64,
       F_ALL_MEMBERS_NONWRITABLE = 128 };

typedef struct idinfo {
    uint32_t def;          /* word index of the defining instruction + 1 (0: none) */
    uint8_t flags;
    int8_t set_ok, binding_ok;  /* the decoration had its operand */
    uint32_t spec_id, builtin, binding, set;
    uint32_t members_nonwritable;  /* OpMemberDecorate NonWritable count */
} idinfo;

typedef struct mod {
    const uint32_t *w;     /* aligned copy of the words (little-endian hosts only; see Makefile) */
    uint32_t n, bound;
    idinfo *ids;
    uint32_t n_spec, *spec_ids;  /* ids decorated SpecId, in order */
    uint32_t workgroup_size;     /* the first id decorated BuiltIn WorkgroupSize, 0: none */
} mod;

static uint32_t wc(const mod *m, uint32_t at) { return m->w[at] >> 16; }
static uint32_t opc(const mod *m, uint32_t at) { return m->w[at] & 0xFFFF; }

/* The defining instruction of `id`: opcode, operand words after the opcode word, their count. */
static int def_of(const mod *m, uint32_t id, uint32_t *op, const uint32_t **ops, uint32_t *n) {
    uint32_t at;
    if (id >= m->bound || !m->ids[id].def) return 0;
    at = m->ids[id].def - 1;
    *op = opc(m, at);
    *ops = m->w + at + 1;
    *n = wc(m, at) - 1;
    return 1;
}

static int is_type_op(uint32_t op) {
    return op == OP_TYPE_BOOL || op == OP_TYPE_INT || op == OP_TYPE_FLOAT || op == OP_TYPE_VECTOR ||
           op == OP_TYPE_MATRIX || op == OP_TYPE_ARRAY || op == OP_TYPE_RUNTIME_ARRAY || op == OP_TYPE_STRUCT ||
           op == OP_TYPE_POINTER || op == OP_TYPE_IMAGE || op == OP_TYPE_SAMPLED_IMAGE;
}

static int is_const_op(uint32_t op) {
    return op == OP_CONSTANT || op == OP_CONSTANT_COMPOSITE || op == OP_SPEC_CONSTANT_TRUE ||
           op == OP_SPEC_CONSTANT_FALSE || op == OP_SPEC_CONSTANT || op == OP_SPEC_CONSTANT_COMPOSITE ||
           op == OP_SPEC_CONSTANT_OP;
}

/* Operands of a type (after its result id) and of a constant (type, then after the result id). */
static int type_def(const mod *m, uint32_t id, uint32_t *op, const uint32_t **ops, uint32_t *n) {
    if (!def_of(m, id, op, ops, n) || !is_type_op(*op) || *n < 1) return 0;
    (*ops)++;
    (*n)--;
    return 1;
}

static int spec_value(const mod *m, const m_kernel *k, uint32_t spec_id, uint32_t *bits) {
    if (!k) return 0;
    for (uint32_t i = 0; i < k->n_spec; i++)
        if (k->spec[i].id == spec_id) { *bits = k->spec[i].bits; return 1; }
    (void)m;
    return 0;
}

/* A 32-bit integer constant's value under a kernel's specialization; 0 when not evaluable. */
static int constant(const mod *m, uint32_t id, const m_kernel *k, int depth, uint64_t *out) {
    uint32_t op, n;
    const uint32_t *ops;
    if (!def_of(m, id, &op, &ops, &n) || !is_const_op(op) || n < 2) return 0;
    /* constant instruction operands: type, result, ... */
    if (op == OP_SPEC_CONSTANT_OP && n == 5 && depth < 16) {
        uint64_t a, b, r;
        uint32_t code = ops[2];
        if (!constant(m, ops[3], k, depth + 1, &a) || !constant(m, ops[4], k, depth + 1, &b)) return 0;
        switch (code) {
        case 128: r = a + b; break;
        case 130: r = a - b; break;
        case 132: r = a * b; break;
        case 134: if (!b) return 0; r = a / b; break;
        case 137: if (!b) return 0; r = a % b; break;
        case 194: r = b < 32 ? a >> b : 0; break;
        case 196: r = b < 32 ? a << b : 0; break;
        case 197: r = a | b; break;
        case 198: r = a ^ b; break;
        case 199: r = a & b; break;
        default: return 0;
        }
        *out = r & 0xFFFFFFFFu;
        return 1;
    }
    if (op == OP_CONSTANT && n >= 3) { *out = ops[2]; return 1; }
    if (op == OP_SPEC_CONSTANT && n >= 3) {
        uint32_t bits;
        if ((m->ids[id].flags & F_SPEC) && spec_value(m, k, m->ids[id].spec_id, &bits)) *out = bits;
        else *out = ops[2];
        return 1;
    }
    return 0;
}

/* Values of a 3-constituent constant composite. */
static int composite(const mod *m, uint32_t id, const m_kernel *k, uint64_t out[3]) {
    uint32_t op, n;
    const uint32_t *ops;
    if (!def_of(m, id, &op, &ops, &n) || (op != OP_CONSTANT_COMPOSITE && op != OP_SPEC_CONSTANT_COMPOSITE) || n != 5)
        return 0;
    for (int i = 0; i < 3; i++)
        if (!constant(m, ops[2 + i], k, 0, &out[i])) return 0;
    return 1;
}

/* Bytes of a type, packed; 0 with *ok = 0 when not computable. Saturates far above any limit. */
static uint64_t type_size(const mod *m, uint32_t id, const m_kernel *k, int depth, int *ok) {
    uint32_t op, n;
    const uint32_t *ops;
    uint64_t inner, len, sum = 0;
    if (depth > 32 || !type_def(m, id, &op, &ops, &n)) { *ok = 0; return 0; }
    switch (op) {
    case OP_TYPE_BOOL: return 1;
    case OP_TYPE_INT: case OP_TYPE_FLOAT:
        if (n < 1) { *ok = 0; return 0; }
        return ops[0] / 8 ? ops[0] / 8 : 1;
    case OP_TYPE_VECTOR: case OP_TYPE_MATRIX:
        if (n < 2) { *ok = 0; return 0; }
        inner = type_size(m, ops[0], k, depth + 1, ok);
        return *ok ? inner * ops[1] : 0;
    case OP_TYPE_ARRAY:
        if (n < 2) { *ok = 0; return 0; }
        inner = type_size(m, ops[0], k, depth + 1, ok);
        if (!*ok || !constant(m, ops[1], k, 0, &len)) { *ok = 0; return 0; }
        if (inner && len > ((uint64_t)1 << 62) / inner) return (uint64_t)1 << 62;
        return inner * len;
    case OP_TYPE_STRUCT:
        for (uint32_t i = 0; i < n; i++) {
            sum += type_size(m, ops[i], k, depth + 1, ok);
            if (!*ok) return 0;
            if (sum > ((uint64_t)1 << 62)) sum = (uint64_t)1 << 62;
        }
        return sum;
    default: *ok = 0; return 0;
    }
}

static uint32_t pointee(const mod *m, uint32_t ptr_type, int *ok) {
    uint32_t op, n;
    const uint32_t *ops;
    if (!type_def(m, ptr_type, &op, &ops, &n) || op != OP_TYPE_POINTER || n < 2) { *ok = 0; return 0; }
    *ok = 1;
    return ops[1];
}

static int is_texel_buffer(const mod *m, uint32_t type_id) {
    uint32_t op, n;
    const uint32_t *ops;
    if (!type_def(m, type_id, &op, &ops, &n) || op != OP_TYPE_SAMPLED_IMAGE || n < 1) return 0;
    if (!type_def(m, ops[0], &op, &ops, &n) || op != OP_TYPE_IMAGE) return 0;
    return n >= 6 && ops[1] == DIM_BUFFER && ops[5] == 1;
}

/* The SPIR-V CAPABILITIES this runtime knows (bundles/spirv.py + runtime_min/device.py). */
static int known_capability(uint32_t cap) {
    static const uint32_t known[] = {0, 1, 9, 10, 11, 12, 22, 39, 46, 61, 62, 63, 64, 65, 66, 67, 68, 4433, 4434,
                                     4441, 4442, 4448, 4449, 5345, 5347, 5357, 6016, 6017, 6018, 6019, 6022,
                                     5430, 5431, 5432, 5433, 5434, 5439};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i] == cap) return 1;
    return 0;
}

static const uint32_t SPIRV_MINOR_FOR_VULKAN[4] = {0, 3, 5, 6};

/* The newest SPIR-V minor version a variant's requirements.vulkan_api guarantees. */
static uint32_t newest_spirv(const variant *v) {
    uint32_t minor = v->api[0] > 1 ? 3 : v->api[0] == 1 ? (v->api[1] > 3 ? 3 : v->api[1]) : 0;
    return v->api[0] > 1 || (v->api[0] == 1 && v->api[1] > 3) ? 6 : SPIRV_MINOR_FOR_VULKAN[minor];
}

static vkc_status too_new(const m_module *entry, const char *where, const variant *v, const char *vpre, vkc_error *err) {
    return vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s is SPIR-V 1.%u, newer than the 1.%u that "
                     "%srequirements.vulkan_api [%u, %u, %u] guarantees", where, entry->spirv_minor, newest_spirv(v),
                     vpre, v->api[0], v->api[1], v->api[2]);
}

vkc_status vkc_spirv_interface(manifest *m, const uint8_t *const *modules, const size_t *sizes, vkc_error *err);

static vkc_status check_module(manifest *man, uint32_t index, const uint8_t *code, size_t code_size, vkc_error *err) {
    m_module *entry = &man->modules[index];
    mod m;
    char where[128];
    uint32_t i, main_id = 0, mains = 0;
    uint32_t *words;
    vkc_status s = VKC_OK;
    memset(&m, 0, sizeof m);
    snprintf(where, sizeof where, "module %u ('%.60s')", index, entry->name);
    words = malloc(code_size);
    if (!words) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory reading SPIR-V");
    memcpy(words, code, code_size);  /* aligned; the bundle may sit at any address */
    m.w = words;
    m.n = (uint32_t)(code_size / 4);
    m.bound = words[3];
    m.ids = calloc(m.bound, sizeof *m.ids);
    if (!m.ids) { free(words); return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory reading SPIR-V"); }
    entry->spirv_minor = words[1] >> 8 & 0xFF;
    m.spec_ids = calloc(m.n, sizeof *m.spec_ids);
    entry->caps = calloc(m.n, sizeof *entry->caps);
    entry->exts = calloc(m.n, sizeof *entry->exts);
    if (!entry->caps || !entry->exts || !m.spec_ids) { s = vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory"); goto done; }

    /* pass 1: definitions, decorations, capabilities, extensions, entry points */
    for (i = 5; i < m.n; i += wc(&m, i)) {
        uint32_t op = opc(&m, i), n = wc(&m, i) - 1;
        const uint32_t *ops = m.w + i + 1;
        if (op == OP_CAPABILITY && n >= 1) entry->caps[entry->n_caps++] = ops[0];
        else if (op == OP_EXTENSION) {
            size_t len = strnlen((const char *)ops, (size_t)n * 4);
            char *e = malloc(len + 1);
            if (!e) { s = vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory"); goto done; }
            memcpy(e, ops, len);
            e[len] = '\0';
            entry->exts[entry->n_exts++] = e;
        } else if (op == OP_ENTRY_POINT && n >= 3) {
            size_t len = strnlen((const char *)(ops + 2), (size_t)(n - 2) * 4);
            if (ops[0] == GL_COMPUTE && len == 4 && memcmp(ops + 2, "main", 4) == 0) { mains++; main_id = ops[1]; }
        } else if (op == OP_DECORATE && n >= 2 && ops[0] < m.bound) {
            idinfo *d = &m.ids[ops[0]];
            switch (ops[1]) {
            case DEC_SPEC_ID:
                if (n >= 3) {
                    if (!(d->flags & F_SPEC)) m.spec_ids[m.n_spec++] = ops[0];
                    d->flags |= F_SPEC;
                    d->spec_id = ops[2];
                }
                break;
            case DEC_BLOCK: d->flags |= F_BLOCK; break;
            case DEC_BUFFER_BLOCK: d->flags |= F_BUFFER_BLOCK; break;
            case DEC_NON_WRITABLE: d->flags |= F_NONWRITABLE; break;
            case DEC_BUILTIN:
                d->flags |= F_BUILTIN;
                d->builtin = n >= 3 && n == 3 ? ops[2] : 0xFFFFFFFFu;
                break;
            case DEC_BINDING: d->flags |= F_BINDING; d->binding_ok = n >= 3; d->binding = n >= 3 ? ops[2] : 0; break;
            case DEC_SET: d->flags |= F_SET; d->set_ok = n >= 3; d->set = n >= 3 ? ops[2] : 0; break;
            default: break;
            }
        } else if (op == OP_MEMBER_DECORATE && n >= 3 && ops[0] < m.bound && ops[2] == DEC_NON_WRITABLE) {
            m.ids[ops[0]].members_nonwritable++;
        } else if (is_type_op(op) && n >= 1 && ops[0] < m.bound) {
            m.ids[ops[0]].def = i + 1;
        } else if (is_const_op(op) && n >= 2 && ops[1] < m.bound) {
            m.ids[ops[1]].def = i + 1;
        }
    }
    for (i = 5; i < m.n; i += wc(&m, i)) {  /* the WorkgroupSize built-in decorated first */
        const uint32_t *ops = m.w + i + 1;
        if (opc(&m, i) == OP_DECORATE && wc(&m, i) == 4 && ops[1] == DEC_BUILTIN && ops[2] == BUILTIN_WORKGROUP_SIZE &&
            ops[0] < m.bound && m.ids[ops[0]].def && m.ids[ops[0]].builtin == BUILTIN_WORKGROUP_SIZE) {
            m.workgroup_size = ops[0];
            break;
        }
    }
    for (i = 5; i < m.n; i += wc(&m, i)) {  /* cooperative matrices: Workgroup scope, unspecialized (as bundles/spirv.py) */
        const uint32_t *ops = m.w + i + 1;
        uint64_t scope;
        if (opc(&m, i) == OP_TYPE_COOPERATIVE_MATRIX && wc(&m, i) - 1 >= 3 && constant(&m, ops[2], NULL, 0, &scope) &&
            scope == SCOPE_WORKGROUP)
            entry->workgroup_matrix = 1;
    }
    if (mains != 1) {
        s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s has %u GLCompute entry points named 'main', not 1",
                      where, mains);
        goto done;
    }
    /* pass 2: variables (descriptors) */
    for (i = 5; i < m.n; i += wc(&m, i)) {
        uint32_t n = wc(&m, i) - 1, ptype, vid, storage, target, tflags;
        const uint32_t *ops = m.w + i + 1;
        int ok;
        idinfo *d;
        if (opc(&m, i) != OP_VARIABLE || n < 3) continue;
        ptype = ops[0];
        vid = ops[1];
        storage = ops[2];
        if (storage == SC_WORKGROUP ||
            !(storage == SC_UNIFORM_CONSTANT || storage == SC_UNIFORM || storage == SC_PUSH_CONSTANT ||
              storage == SC_ATOMIC_COUNTER || storage == SC_IMAGE || storage == SC_STORAGE_BUFFER))
            continue;
        if (vid >= m.bound) {
            s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s declares variable %%%u beyond its id bound",
                          where, vid);
            goto done;
        }
        d = &m.ids[vid];
        target = pointee(&m, ptype, &ok);
        if (storage == SC_UNIFORM_CONSTANT && ok && is_texel_buffer(&m, target)) {
            if (!(d->flags & F_SET) || !d->set_ok || d->set != 0 || !(d->flags & F_BINDING) || !d->binding_ok ||
                d->binding >= entry->bindings || !entry->texel[d->binding]) {
                s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s binds a texel buffer at set %u, binding %u; "
                              "the manifest lists other texel buffers", where, d->set, d->binding);
                goto done;
            }
            entry->readonly[d->binding] = 1;
            continue;
        }
        tflags = ok && target < m.bound ? m.ids[target].flags : 0;
        {
            uint32_t top = 0, tn;
            const uint32_t *tops;
            int is_struct = ok && type_def(&m, target, &top, &tops, &tn) && top == OP_TYPE_STRUCT;
            int sb = (storage == SC_STORAGE_BUFFER && (tflags & F_BLOCK)) || (storage == SC_UNIFORM && (tflags & F_BUFFER_BLOCK));
            if (!sb || !is_struct) {
                s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s declares variable %%%u in storage class %u; the "
                              "runtime binds only storage buffers (a Block struct in StorageBuffer, or a BufferBlock "
                              "struct in Uniform) and the uniform texel buffers the manifest lists", where, vid, storage);
                goto done;
            }
            if (!(d->flags & F_SET) || !d->set_ok || d->set != 0 || !(d->flags & F_BINDING) || !d->binding_ok ||
                d->binding >= entry->bindings || entry->texel[d->binding]) {
                s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s binds a storage buffer at set %u, binding %u; "
                              "the manifest gives it set 0, bindings 0..%u", where, d->set, d->binding,
                              entry->bindings - 1);
                goto done;
            }
            /* read-only: the variable is NonWritable, or every member of its block is */
            if ((d->flags & F_NONWRITABLE) || (tn > 0 && m.ids[target].members_nonwritable >= tn))
                entry->readonly[d->binding] = 1;
        }
    }
    /* Per variant using the module (format 1.2; a flat manifest is one variant, which always counts):
     * the SPIR-V version its requirements.vulkan_api guarantees, then per kernel built from the
     * module: specialization, local size, shared memory. A module no variant uses is checked
     * unspecialized, as the Python reader does. */
    for (uint32_t vi = 0, used = 0; vi <= man->n_variants; vi++) {
        const variant *var = vi < man->n_variants ? &man->variants[vi] : NULL;
        char vpre[32] = "";
        if (!var) {
            /* no variant uses it: no version to hold it to (the flat manifest's one variant always counts) */
            if (used) break;
        } else {
            if (man->multi && !var->uses[index]) continue;
            used = 1;
            if (man->multi) snprintf(vpre, sizeof vpre, "variants[%u].", vi);
            if (entry->spirv_minor > newest_spirv(var)) {
                s = too_new(entry, where, var, vpre, err);
                goto done;
            }
        }
        for (uint32_t kk = 0, any = 0, nk = var ? var->n_kernels : 0; kk <= nk; kk++) {
            const m_kernel *k;
            char kwhere[200];
            uint64_t size[3], shared = 0;
            int have = 0;
            if (kk == nk) {
                if (any) break;
                k = NULL;  /* a module no kernel uses: checked unspecialized, as the Python reader does */
                snprintf(kwhere, sizeof kwhere, "%s", where);
            } else {
                k = &var->kernels[kk];
                if (k->module != index) continue;
                any = 1;
                snprintf(kwhere, sizeof kwhere, "%s as %skernel %u", where, vpre, kk);
                for (uint32_t e = 0; e < k->n_spec; e++) {
                    uint32_t cid = 0, op = 0, n = 0, top = 0, tn = 0;
                    const uint32_t *ops = NULL, *tops = NULL;
                    int found = 0, scalar32;
                    for (uint32_t q = 0; q < m.n_spec; q++)  /* the last declared wins, as in the Python reader */
                        if (m.ids[m.spec_ids[q]].spec_id == k->spec[e].id) { cid = m.spec_ids[q]; found = 1; }
                    if (!found) continue;  /* Vulkan ignores entries for ids the module does not declare */
                    def_of(&m, cid, &op, &ops, &n);
                    scalar32 = n >= 1 && type_def(&m, ops[0], &top, &tops, &tn) && (top == OP_TYPE_INT || top == OP_TYPE_FLOAT) &&
                               tn >= 1 && tops[0] == 32;
                    if (!(op == OP_SPEC_CONSTANT_TRUE || op == OP_SPEC_CONSTANT_FALSE || (op == OP_SPEC_CONSTANT && scalar32))) {
                        s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s specializes constant_id %u, which is not a "
                                      "32-bit scalar or a bool in the module (each specialization entry is 4 bytes)",
                                      kwhere, k->spec[e].id);
                        goto done;
                    }
                }
            }
            /* local size: the WorkgroupSize built-in (the first decorated) wins over LocalSize(Id) */
            {
                if (m.workgroup_size) have = composite(&m, m.workgroup_size, k, size);
                else
                    for (i = 5; i < m.n; i += wc(&m, i)) {
                        uint32_t op = opc(&m, i), n = wc(&m, i) - 1;
                        const uint32_t *ops = m.w + i + 1;
                        if ((op == OP_EXECUTION_MODE || op == OP_EXECUTION_MODE_ID) && n >= 5 && ops[0] == main_id &&
                            (ops[1] == MODE_LOCAL_SIZE || ops[1] == MODE_LOCAL_SIZE_ID)) {
                            if (ops[1] == MODE_LOCAL_SIZE) {
                                size[0] = ops[2]; size[1] = ops[3]; size[2] = ops[4];
                                have = 1;
                            } else {
                                have = constant(&m, ops[2], k, 0, &size[0]) && constant(&m, ops[3], k, 0, &size[1]) &&
                                       constant(&m, ops[4], k, 0, &size[2]);
                            }
                            break;
                        }
                    }
            }
            if (!have) {
                s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s declares no local size this reader can resolve", kwhere);
                goto done;
            }
            if (size[0] != entry->local[0] || size[1] != entry->local[1] || size[2] != entry->local[2]) {
                s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s has local size [%llu, %llu, %llu] but the manifest "
                              "says [%u, %u, %u]", kwhere, (unsigned long long)size[0], (unsigned long long)size[1],
                              (unsigned long long)size[2], entry->local[0], entry->local[1], entry->local[2]);
                goto done;
            }
            for (i = 5; i < m.n; i += wc(&m, i)) {
                uint32_t n = wc(&m, i) - 1;
                const uint32_t *ops = m.w + i + 1;
                int ok = 1;
                uint64_t bytes;
                if (opc(&m, i) != OP_VARIABLE || n < 3 || ops[2] != SC_WORKGROUP) continue;
                bytes = type_size(&m, pointee(&m, ops[0], &ok), k, 0, &ok);
                if (!ok) {
                    s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s declares shared variable %%%u of a size this "
                                  "reader cannot compute", kwhere, ops[1]);
                    goto done;
                }
                shared += bytes;
                if (shared > ((uint64_t)1 << 62)) shared = (uint64_t)1 << 62;
            }
            if (shared > entry->shared) {
                s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv interface", "%s declares %llu bytes of shared memory but the "
                              "manifest says shared_memory_bytes = %llu", kwhere, (unsigned long long)shared,
                              (unsigned long long)entry->shared);
                goto done;
            }
        }
    }
done:
    free(m.spec_ids);
    free(m.ids);
    free(words);
    return s;
}

vkc_status vkc_spirv_interface(manifest *m, const uint8_t *const *modules, const size_t *sizes, vkc_error *err) {
    for (uint32_t i = 0; i < m->n_modules; i++) {
        vkc_status s = check_module(m, i, modules[i], sizes[i], err);
        if (s != VKC_OK) return s;
    }
    return VKC_OK;
}

int vkc__known_capability(uint32_t cap) { return known_capability(cap); }
