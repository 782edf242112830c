/* SPIRV-Tools' validator (what `spirv-val` runs) on every SPIR-V module of a bundle, before a driver
 * sees it: the container and interface checks do not check code, and a driver handed an invalid
 * module may crash (lavapipe segfaults at pipeline creation on an unknown opcode).
 *
 * libSPIRV-Tools-shared is dlopened, not linked: $VKC_SPIRV_TOOLS names the file, else the loader's
 * search finds libSPIRV-Tools-shared.so. An app links nothing more, and a build without the header
 * (<spirv-tools/libspirv.h>, e.g. the Android NDK's default include path) compiles the validator
 * out. Without the library modules run unvalidated, with one line on stderr saying so.
 *
 * Each module is validated for the Vulkan environment its SPIR-V version is made for (the
 * compiler's target environment; the interface check bounds it by requirements.vulkan_api). A module
 * accepted once is remembered for the process (its bytes, compared in full), so a second load of it
 * costs a hash and a compare. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(__has_include)
#if __has_include(<spirv-tools/libspirv.h>)
#include <spirv-tools/libspirv.h>
#define VKC_HAVE_SPIRV_TOOLS 1
#endif
#endif

#ifdef VKC_HAVE_SPIRV_TOOLS

#define CACHE_MAX 4096  /* modules remembered; beyond that each is validated again */

typedef struct valid_module { uint64_t hash; size_t size; uint8_t *bytes; } valid_module;

static struct {
    pthread_once_t once;
    pthread_mutex_t lock;
    void *lib;
    const char *version;
    char problem[256];
    bool (*parse_env)(const char *, spv_target_env *);
    spv_context (*context_create)(spv_target_env);
    spv_result_t (*validate)(const spv_const_context, const uint32_t *, const size_t, spv_diagnostic *);
    void (*diagnostic_destroy)(spv_diagnostic);
    spv_context contexts[7];  /* by SPIR-V minor version */
    valid_module *valid;
    uint32_t n_valid;
    int warned;
} val = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

/* spirv-val's --target-env for a module of SPIR-V 1.minor */
static const char *const ENVS[7] = {"vulkan1.0", "vulkan1.1", "vulkan1.1", "vulkan1.1", "vulkan1.1spv1.4",
                                    "vulkan1.2", "vulkan1.3"};

static void open_library(void) {
    const char *path = getenv("VKC_SPIRV_TOOLS");
    const char *(*version)(void);
    if (!path || !path[0]) path = "libSPIRV-Tools-shared.so";
    val.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!val.lib) {
        snprintf(val.problem, sizeof val.problem, "%s could not be loaded (set VKC_SPIRV_TOOLS to its path)", path);
        return;
    }
    *(void **)&val.parse_env = dlsym(val.lib, "spvParseTargetEnv");
    *(void **)&val.context_create = dlsym(val.lib, "spvContextCreate");
    *(void **)&val.validate = dlsym(val.lib, "spvValidateBinary");
    *(void **)&val.diagnostic_destroy = dlsym(val.lib, "spvDiagnosticDestroy");
    *(void **)&version = dlsym(val.lib, "spvSoftwareVersionDetailsString");
    if (!val.parse_env || !val.context_create || !val.validate || !val.diagnostic_destroy || !version) {
        snprintf(val.problem, sizeof val.problem, "%s lacks the SPIRV-Tools C API", path);
        dlclose(val.lib);
        val.lib = NULL;
        return;
    }
    val.version = version();
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static int known_valid(uint64_t hash, const uint8_t *bytes, size_t size) {
    for (uint32_t i = 0; i < val.n_valid; i++)
        if (val.valid[i].hash == hash && val.valid[i].size == size && !memcmp(val.valid[i].bytes, bytes, size))
            return 1;
    return 0;
}

static void remember(uint64_t hash, const uint8_t *bytes, size_t size) {
    valid_module *grown;
    uint8_t *copy;
    if (val.n_valid >= CACHE_MAX || !(copy = malloc(size))) return;
    if (!(grown = realloc(val.valid, (val.n_valid + 1) * sizeof *grown))) { free(copy); return; }
    memcpy(copy, bytes, size);
    val.valid = grown;
    val.valid[val.n_valid++] = (valid_module){hash, size, copy};
}

/* spirv-val's complaint about one module in `out` (whitespace runs made one space); 0 when valid. */
static int validate_one(const uint8_t *bytes, size_t size, uint32_t minor, char *out, size_t cap) {
    spv_diagnostic diagnostic = NULL;
    spv_result_t r;
    uint32_t *words;
    uint64_t hash = fnv1a(bytes, size);
    if (minor > 6) minor = 6;
    if (known_valid(hash, bytes, size)) return 0;
    if (!val.contexts[minor]) {
        spv_target_env env;
        if (!val.parse_env(ENVS[minor], &env) || !(val.contexts[minor] = val.context_create(env))) {
            snprintf(out, cap, "this SPIRV-Tools (%s) does not know the target environment %s", val.version, ENVS[minor]);
            return 1;
        }
    }
    if (!(words = malloc(size ? size : 4))) { snprintf(out, cap, "out of memory"); return 1; }
    memcpy(words, bytes, size);  /* aligned for the validator; the bundle's bytes may not be */
    r = val.validate(val.contexts[minor], words, size / 4, &diagnostic);
    free(words);
    if (r == SPV_SUCCESS) {
        val.diagnostic_destroy(diagnostic);
        remember(hash, bytes, size);
        return 0;
    }
    {
        const char *src = diagnostic && diagnostic->error ? diagnostic->error : "rejected";
        size_t n = 0;
        int space = 0;
        for (; *src && n + 1 < cap; src++) {
            int ws = *src == ' ' || *src == '\n' || *src == '\t' || *src == '\r';
            if (ws) { space = n > 0; continue; }
            if (space && n + 2 < cap) out[n++] = ' ';
            space = 0;
            out[n++] = *src;
        }
        out[n] = '\0';
        if (!diagnostic || !diagnostic->error) snprintf(out, cap, "rejected (spv_result_t %d)", (int)r);
    }
    val.diagnostic_destroy(diagnostic);
    return 1;
}

vkc_status vkc_spirv_validate(const manifest *m, const uint8_t *const *modules, const size_t *sizes, int *validated,
                              vkc_error *err) {
    char complaint[700];
    vkc_status s = VKC_OK;
    pthread_once(&val.once, open_library);
    *validated = 0;
    pthread_mutex_lock(&val.lock);
    if (!val.lib) {
        if (!val.warned) fprintf(stderr, "vkc: SPIR-V modules run unvalidated: %s; an invalid module in a corrupt or "
                                 "hostile bundle can crash the driver\n", val.problem);
        val.warned = 1;
        pthread_mutex_unlock(&val.lock);
        return VKC_OK;
    }
    for (uint32_t i = 0; i < m->n_modules && s == VKC_OK; i++)
        if (validate_one(modules[i], sizes[i], m->modules[i].spirv_minor, complaint, sizeof complaint))
            s = vkc__fail(err, VKC_ERR_BUNDLE, "spirv validation", "module %u ('%s') is not valid SPIR-V for %s: %s; "
                          "the bundle is corrupt: compile it again", i, m->modules[i].name,
                          ENVS[m->modules[i].spirv_minor > 6 ? 6 : m->modules[i].spirv_minor], complaint);
    pthread_mutex_unlock(&val.lock);
    *validated = s == VKC_OK;
    return s;
}

const char *vkc_spirv_validator(void) {
    pthread_once(&val.once, open_library);
    return val.lib ? val.version : NULL;
}

#else

vkc_status vkc_spirv_validate(const manifest *m, const uint8_t *const *modules, const size_t *sizes, int *validated,
                              vkc_error *err) {
    static int warned;
    *validated = 0;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "vkc: SPIR-V modules run unvalidated: this libvkc was built without SPIRV-Tools' header "
                "(spirv-tools/libspirv.h); an invalid module in a corrupt or hostile bundle can crash the driver\n");
    return VKC_OK;
}

const char *vkc_spirv_validator(void) { return NULL; }

#endif
