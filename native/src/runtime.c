/* The Vulkan side of the native runtime: loader, instance, device choice, memory, pipelines,
 * descriptor sets, the recorded command buffer, and runs. Mirrors runtime_min (device.py, memory.py,
 * pipelines.py, model.py); FORMAT.md "How a runtime replays it" is the contract.
 *
 * The loader is opened with dlopen (libvulkan.so.1, or libvulkan.so on Android) and every function
 * comes from vkGetInstanceProcAddr / vkGetDeviceProcAddr: an app need not link libvulkan, a caller
 * may hand in its own vkGetInstanceProcAddr (a layer, a custom loader), and device functions skip
 * the loader's dispatch trampoline. */
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VKB_READER_IMPLEMENTATION
#include "vkb_reader.h"  /* bundles/vkb_reader.h (-I../bundles; copied beside the sources for Android) */
#include "internal.h"

/* VK_KHR_cooperative_matrix's feature struct, declared here: Debian 12's headers (1.3.239) predate it. */
typedef struct coopmat_features {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix;
    VkBool32 cooperativeMatrixRobustBufferAccess;
} coopmat_features;
#define STYPE_COOPMAT_FEATURES ((VkStructureType)1000506000)
/* VK_NV_cooperative_matrix2's, likewise. */
typedef struct coopmat2_features {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrixWorkgroupScope;
    VkBool32 cooperativeMatrixFlexibleDimensions;
    VkBool32 cooperativeMatrixReductions;
    VkBool32 cooperativeMatrixConversions;
    VkBool32 cooperativeMatrixPerElementOperations;
    VkBool32 cooperativeMatrixTensorAddressing;
    VkBool32 cooperativeMatrixBlockLoads;
} coopmat2_features;
#define STYPE_COOPMAT2_FEATURES ((VkStructureType)1000593000)

#define STAGING_ALIGN 256u
#define UPLOAD_CHUNK ((VkDeviceSize)64 << 20)
#define NAN_BITS 0x7FC00000u

vkc_status vkc__fail(vkc_error *err, vkc_status code, const char *check, const char *fmt, ...) {
    if (err) {
        va_list ap;
        int n = 0;
        err->code = code;
        snprintf(err->check, sizeof err->check, "%s", check ? check : "");
        if (code == VKC_ERR_BUNDLE && check && check[0])
            n = snprintf(err->message, sizeof err->message, "bundle check '%s' failed: ", check);
        if (n < 0 || (size_t)n >= sizeof err->message) n = 0;
        va_start(ap, fmt);
        vsnprintf(err->message + n, sizeof err->message - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return code;
}

static vkc_status ok(vkc_error *err) {
    if (err) { err->code = VKC_OK; err->check[0] = err->message[0] = '\0'; }
    return VKC_OK;
}

/* ---- checks without Vulkan ------------------------------------------------------------------ */

vkc_status vkc_check_all(const void *data, size_t size, int validate, vkb_bundle *b, manifest *m, int *validated,
                         vkc_error *err) {
    char msg[512];
    vkb_status vs;
    const uint8_t **mods;
    size_t *sizes;
    vkc_status s;
    if (!data && size) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_load/vkc_check need the bundle's bytes");
    vs = vkb_open(data, size, b, msg, sizeof msg);
    if (vs != VKB_OK) {
        const char *detail = strstr(msg, "failed: ");
        return vkc__fail(err, VKC_ERR_BUNDLE, vkb_check_name(vs), "%s", detail ? detail + 8 : msg);
    }
    mods = calloc(b->module_count + 1, sizeof *mods);
    sizes = calloc(b->module_count + 1, sizeof *sizes);
    if (!mods || !sizes) {
        free(mods);
        free(sizes);
        return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    }
    for (uint32_t i = 0; i < b->module_count; i++) vkb_module(b, i, &mods[i], &sizes[i]);
    s = vkc_manifest_check(b->manifest, b->manifest_size, mods, sizes, b->module_count, b->weights_size, m, err);
    *validated = 0;
    if (s == VKC_OK && validate && (s = vkc_spirv_validate(m, mods, sizes, validated, err)) != VKC_OK)
        vkc_manifest_free(m);
    free(mods);
    free(sizes);
    return s == VKC_OK ? ok(err) : s;
}

vkc_status vkc_check(const void *data, size_t size, vkc_error *err) {
    vkb_bundle b;
    manifest m;
    int validated;
    vkc_status s = vkc_check_all(data, size, 1, &b, &m, &validated, err);
    if (s == VKC_OK) vkc_manifest_free(&m);
    return s;
}

/* ---- function pointers ---------------------------------------------------------------------- */

#define INSTANCE_FNS(X) X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties) \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2) X(vkGetPhysicalDeviceMemoryProperties) \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) \
    X(vkGetDeviceProcAddr) X(vkCreateDebugUtilsMessengerEXT) X(vkDestroyDebugUtilsMessengerEXT)
#define DEVICE_FNS(X) X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) \
    X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) \
    X(vkUnmapMemory) X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout) \
    X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout) \
    X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool) \
    X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreateBufferView) X(vkDestroyBufferView) \
    X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers) \
    X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkCmdCopyBuffer) X(vkCmdFillBuffer) X(vkCmdPipelineBarrier) \
    X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) X(vkCmdDispatch) X(vkCmdResetQueryPool) \
    X(vkCmdWriteTimestamp) X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkGetQueryPoolResults) \
    X(vkCreateFence) X(vkDestroyFence) X(vkResetFences) X(vkWaitForFences) X(vkGetFenceStatus) \
    X(vkQueueSubmit) X(vkDeviceWaitIdle)

#define DECLARE(f) PFN_##f f;
typedef struct ifns { INSTANCE_FNS(DECLARE) } ifns;
typedef struct dfns { DEVICE_FNS(DECLARE) } dfns;

typedef struct devinfo {
    VkPhysicalDevice pdev;
    uint32_t index;
    VkPhysicalDeviceProperties props;
    uint32_t api;                       /* min(device, instance) */
    VkPhysicalDeviceMemoryProperties mem;
    uint32_t queue_family, timestamp_bits, has_compute;
    uint32_t subgroup_ops;              /* VkSubgroupFeatureFlags in compute, 0 when unknown */
    uint64_t max_alloc;
    VkExtensionProperties *exts;
    uint32_t n_exts;
    VkPhysicalDeviceFeatures2 f;        /* supported features, chained: */
    VkPhysicalDeviceVulkan11Features f11;
    VkPhysicalDeviceVulkan12Features f12;
    VkPhysicalDeviceVulkan13Features f13;
    coopmat_features fcm;
    coopmat2_features fcm2;
    int has_cm, has_cm2;
} devinfo;

struct vkc_context {
    void *lib;
    PFN_vkGetInstanceProcAddr gipa;
    VkInstance instance;
    int own_instance;
    uint32_t api;
    ifns vk;
    VkDebugUtilsMessengerEXT messenger;
    uint32_t messages;
    devinfo *devs;
    uint32_t n_devs;
    /* a caller's device */
    VkPhysicalDevice user_pdev;
    VkDevice user_device;
    VkQueue user_queue;
    uint32_t user_family;
    char *device_choice;
    int models;
};

typedef struct buffer {
    VkBuffer handle;
    VkDeviceMemory memory;
    VkDeviceSize size;
    uint8_t *mapped;
} buffer;

/* The weight ranges the shape set uses, packed one after the other (bundles/variants.py
 * packed_weights): [start, end) of the WEIGHTS section at `at` in the weights buffer. A flat
 * bundle: the whole section, unmoved. Other profiles' re-laid weights stay in the file. */
typedef struct wrange { uint64_t start, end, at; } wrange;

/* A command buffer of a variant copying back only some outputs (fetch[i]: output i), recorded on the
 * first run asking for that set (vkc_run_fetch). */
typedef struct fetch_cmd { uint8_t *fetch; VkCommandBuffer cmd; } fetch_cmd;

/* A variant of the model's shape set: its pipelines, descriptors and recorded command buffer are
 * made on its first run (or at load with build_all). */
typedef struct vstate {
    const variant *v;
    uint32_t index;                     /* in the manifest's variants */
    int built;
    VkDeviceSize *stage_off;            /* per input, then per output */
    VkPipeline *pipelines;              /* per kernel (owned by vkc_model.pipes) */
    VkDescriptorPool pool;
    VkDescriptorSet *sets;              /* per dispatch (owned by pool) */
    VkBufferView *views;
    uint32_t n_views;
    VkCommandBuffer cmd;                /* copies every output back */
    fetch_cmd *fetches;                 /* those copying back fewer */
    uint32_t n_fetches;
} vstate;

struct vkc_model {
    vkc_context *ctx;
    manifest m;
    const devinfo *info;
    VkDevice device;
    int own_device;
    VkQueue queue;
    dfns vk;
    buffer arena, weights, staging;     /* the arena and staging sized for the largest variant */
    buffer in_staging;                  /* inputs: device-local host-visible where a large heap has it */
    buffer state;                       /* format 1.3: every variant's state, zeros at load, kept across runs */
    vstate *set;                        /* the shape set: the chosen profile's variants */
    uint32_t n_set, selected;
    VkShaderModule *shaders;            /* per module the shape set uses (kept for first-use builds) */
    const m_kernel **pipe_kernels;      /* the pipelines built, by module + specialization, shared */
    VkPipeline *pipes;                  /* between variants: kernels the same in several build once */
    uint32_t n_pipes;
    wrange *wranges;                    /* the weights uploaded: the shape set's, packed */
    uint32_t n_wranges;
    VkDeviceSize weights_size;
    VkDescriptorSetLayout *set_layouts;
    VkPipelineLayout *layouts;
    VkCommandPool cmd_pool;
    VkFence fence;
    VkQueryPool queries;
    uint64_t timeout_ns;
    uint64_t spin_ns;   /* poll the fence this long before blocking on it (VKC_WAIT_SPIN_US) */
    uint64_t busy_ns;   /* how long the last wait took: longer runs poll up to twice that */
    int lost;
    int lock_made, counted;             /* for vkc_free after a failed load */
    int spirv_validated;                /* every module passed SPIRV-Tools' validator at load */
    int robust;                         /* loaded with robust buffer access (what lacks() asks for) */
    pthread_mutex_t lock;
    char device_name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
};

#define DEFAULT_SPIN_NS 2000000ULL  /* 2 ms of polling (twice the last wait, up to MAX_SPIN_NS), then block */
#define MAX_SPIN_NS 20000000ULL

static const char *vk_result_name(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "a VkResult";
    }
}

static vkc_status vkfail(vkc_error *err, VkResult r, const char *what) {
    const char *advice = r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "choose a device with more memory or run a smaller model"
                         : r == VK_ERROR_DEVICE_LOST ? "the driver lost the device; load the model again, and rerun "
                                                      "with VKC_VALIDATION=1 to look for misuse"
                         : "rerun with VKC_VALIDATION=1 to see what the driver objects to";
    return vkc__fail(err, r == VK_ERROR_DEVICE_LOST ? VKC_ERR_DEVICE_LOST : VKC_ERR_VULKAN, "",
                     "Vulkan failed while %s: %s (%d); %s.", what, vk_result_name(r), (int)r, advice);
}

#define VKTRY(call, what) do { VkResult r_ = (call); if (r_ != VK_SUCCESS) return vkfail(err, r_, what); } while (0)

/* ---- instance ------------------------------------------------------------------------------- */

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT types,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    vkc_context *ctx = user;
    int error = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    (void)types;
    if (!error && data->pMessageIdName && strcmp(data->pMessageIdName, "Loader Message") == 0) return VK_FALSE;
    __atomic_add_fetch(&ctx->messages, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "vkc validation %s: %s\n", error ? "ERROR" : "WARNING", data->pMessage ? data->pMessage : "?");
    return VK_FALSE;
}

static int env_on(const char *name, int dflt) {
    const char *v = getenv(name);
    if (!v || !v[0]) return dflt;
    return !(strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "false") == 0);
}

static int has_ext(const devinfo *d, const char *name) {
    for (uint32_t i = 0; i < d->n_exts; i++)
        if (strcmp(d->exts[i].extensionName, name) == 0) return 1;
    return 0;
}

static vkc_status describe(vkc_context *ctx, VkPhysicalDevice pdev, uint32_t index, devinfo *d, vkc_error *err) {
    uint32_t n = 0;
    VkQueueFamilyProperties *fam;
    memset(d, 0, sizeof *d);
    d->pdev = pdev;
    d->index = index;
    ctx->vk.vkGetPhysicalDeviceProperties(pdev, &d->props);
    d->api = d->props.apiVersion < ctx->api ? d->props.apiVersion : ctx->api;
    ctx->vk.vkGetPhysicalDeviceMemoryProperties(pdev, &d->mem);
    ctx->vk.vkGetPhysicalDeviceQueueFamilyProperties(pdev, &n, NULL);
    fam = calloc(n ? n : 1, sizeof *fam);
    if (!fam) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    ctx->vk.vkGetPhysicalDeviceQueueFamilyProperties(pdev, &n, fam);
    for (uint32_t i = 0; i < n; i++)
        if (fam[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            d->has_compute = 1;
            d->queue_family = i;
            d->timestamp_bits = fam[i].timestampValidBits;
            break;
        }
    free(fam);
    VKTRY(ctx->vk.vkEnumerateDeviceExtensionProperties(pdev, NULL, &d->n_exts, NULL), "listing device extensions");
    d->exts = calloc(d->n_exts ? d->n_exts : 1, sizeof *d->exts);
    if (!d->exts) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    VKTRY(ctx->vk.vkEnumerateDeviceExtensionProperties(pdev, NULL, &d->n_exts, d->exts), "listing device extensions");
    d->max_alloc = (uint64_t)1 << 31;
    if (d->api >= VK_API_VERSION_1_1 && ctx->vk.vkGetPhysicalDeviceProperties2) {
        VkPhysicalDeviceSubgroupProperties sub = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, NULL, 0, 0, 0, 0};
        VkPhysicalDeviceMaintenance3Properties m3 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, &sub, 0, 0};
        VkPhysicalDeviceProperties2 p2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &m3, {0}};
        ctx->vk.vkGetPhysicalDeviceProperties2(pdev, &p2);
        if (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) d->subgroup_ops = sub.supportedOperations;
        d->max_alloc = m3.maxMemoryAllocationSize;
        /* features: core + 1.1/1.2/1.3 structs where the API has them, cooperative matrix (2) if offered */
        d->f.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
        {
            void *next = NULL;
            d->has_cm = has_ext(d, "VK_KHR_cooperative_matrix");
            d->has_cm2 = has_ext(d, "VK_NV_cooperative_matrix2") && d->api >= VK_API_VERSION_1_3;
            if (d->has_cm2) { d->fcm2.sType = STYPE_COOPMAT2_FEATURES; d->fcm2.pNext = next; next = &d->fcm2; }
            if (d->has_cm) { d->fcm.sType = STYPE_COOPMAT_FEATURES; d->fcm.pNext = next; next = &d->fcm; }
            if (d->api >= VK_API_VERSION_1_3) { d->f13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES; d->f13.pNext = next; next = &d->f13; }
            if (d->api >= VK_API_VERSION_1_2) {
                d->f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES; d->f12.pNext = next; next = &d->f12;
                d->f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES; d->f11.pNext = next; next = &d->f11;
            }
            d->f.pNext = next;
            ctx->vk.vkGetPhysicalDeviceFeatures2(pdev, &d->f);
        }
    }
    return VKC_OK;
}

vkc_status vkc_open(const vkc_open_options *opts, vkc_context **out, vkc_error *err) {
    vkc_open_options none;
    vkc_context *ctx;
    PFN_vkEnumerateInstanceVersion enum_version;
    vkc_status s = VKC_OK;
    int validation;
    if (!out) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_open needs somewhere to put the context");
    *out = NULL;
    if (!opts) {
        memset(&none, 0, sizeof none);
        none.validation = -1;
        opts = &none;
    }
    validation = opts->validation < 0 ? env_on("VKC_VALIDATION", 0) : opts->validation;
    if (!(ctx = calloc(1, sizeof *ctx))) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    if (opts->device && !(ctx->device_choice = strdup(opts->device))) { free(ctx); return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory"); }
    ctx->gipa = (PFN_vkGetInstanceProcAddr)opts->get_instance_proc_addr;
    if (!ctx->gipa) {
        static const char *const names[] = {"libvulkan.so.1", "libvulkan.so"};
        for (size_t i = 0; i < 2 && !ctx->lib; i++) ctx->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (ctx->lib) *(void **)&ctx->gipa = dlsym(ctx->lib, "vkGetInstanceProcAddr");
        if (!ctx->gipa) {
            vkc_close(ctx);
            return vkc__fail(err, VKC_ERR_NO_LOADER, "", "No Vulkan loader was found (libvulkan.so.1); install a "
                             "Vulkan driver, e.g. `apt-get install mesa-vulkan-drivers libvulkan1` for the CPU "
                             "implementation lavapipe, or your GPU vendor's driver.");
        }
    }
    enum_version = (PFN_vkEnumerateInstanceVersion)ctx->gipa(NULL, "vkEnumerateInstanceVersion");
    ctx->api = VK_API_VERSION_1_0;
    if (enum_version) enum_version(&ctx->api);
    if (ctx->api > VK_API_VERSION_1_3) ctx->api = VK_API_VERSION_1_3;
    if (opts->instance) {
        ctx->instance = (VkInstance)opts->instance;
    } else {
        VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "vkc native", 1, "vkc", 1, ctx->api};
        const char *layer = "VK_LAYER_KHRONOS_validation", *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
        VkValidationFeaturesEXT features = {VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT, NULL, 1, &sync, 0, NULL};
        VkDebugUtilsMessengerCreateInfoEXT dbg = {VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT, &features, 0,
            VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
            VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT, on_message, ctx};
        VkInstanceCreateInfo info = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, validation ? &dbg : NULL, 0, &app,
                                     validation ? 1u : 0u, &layer, validation ? 1u : 0u, &ext};
        PFN_vkCreateInstance create = (PFN_vkCreateInstance)ctx->gipa(NULL, "vkCreateInstance");
        VkResult r = create ? create(&info, NULL, &ctx->instance) : VK_ERROR_INITIALIZATION_FAILED;
        if (r != VK_SUCCESS) {
            vkc_close(ctx);
            if (r == VK_ERROR_LAYER_NOT_PRESENT || r == VK_ERROR_EXTENSION_NOT_PRESENT)
                return vkc__fail(err, VKC_ERR_VULKAN, "", "Validation was requested (VKC_VALIDATION=1) but "
                                 "VK_LAYER_KHRONOS_validation is not installed; install it (`apt-get install "
                                 "vulkan-validationlayers`) or turn validation off.");
            return vkfail(err, r, "creating a Vulkan instance");
        }
        ctx->own_instance = 1;
#define LOAD_I(f) ctx->vk.f = (PFN_##f)ctx->gipa(ctx->instance, #f);
        INSTANCE_FNS(LOAD_I)
        if (validation && ctx->vk.vkCreateDebugUtilsMessengerEXT) {
            dbg.pNext = NULL;
            ctx->vk.vkCreateDebugUtilsMessengerEXT(ctx->instance, &dbg, NULL, &ctx->messenger);
        }
    }
    if (!ctx->vk.vkEnumeratePhysicalDevices) { INSTANCE_FNS(LOAD_I) }
    {
        uint32_t n = 0;
        VkPhysicalDevice *pdevs;
        VkResult r = ctx->vk.vkEnumeratePhysicalDevices(ctx->instance, &n, NULL);
        if (r != VK_SUCCESS) { vkc_close(ctx); return vkfail(err, r, "enumerating Vulkan devices"); }
        pdevs = calloc(n ? n : 1, sizeof *pdevs);
        ctx->devs = calloc(n ? n : 1, sizeof *ctx->devs);
        if (!pdevs || !ctx->devs) { free(pdevs); vkc_close(ctx); return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory"); }
        r = ctx->vk.vkEnumeratePhysicalDevices(ctx->instance, &n, pdevs);
        if (r != VK_SUCCESS && r != VK_INCOMPLETE) { free(pdevs); vkc_close(ctx); return vkfail(err, r, "enumerating Vulkan devices"); }
        for (uint32_t i = 0; i < n && s == VKC_OK; i++) {
            s = describe(ctx, pdevs[i], i, &ctx->devs[i], err);
            ctx->n_devs = i + 1;
        }
        free(pdevs);
        if (s != VKC_OK) { vkc_close(ctx); return s; }
        if (!n) {
            vkc_close(ctx);
            return vkc__fail(err, VKC_ERR_NO_DEVICE, "", "The Vulkan loader found no device; install a Vulkan driver, "
                             "e.g. `apt-get install mesa-vulkan-drivers` for lavapipe, or your GPU vendor's driver.");
        }
    }
    if (opts->device_handle) {
        ctx->user_pdev = (VkPhysicalDevice)opts->physical_device;
        ctx->user_device = (VkDevice)opts->device_handle;
        ctx->user_queue = (VkQueue)opts->queue;
        ctx->user_family = opts->queue_family;
        if (!ctx->user_pdev || !ctx->user_queue) {
            vkc_close(ctx);
            return vkc__fail(err, VKC_ERR_ARGUMENT, "", "A caller's VkDevice needs its VkPhysicalDevice and VkQueue too.");
        }
    }
    *out = ctx;
    return ok(err);
}

void vkc_close(vkc_context *ctx) {
    if (!ctx) return;
    for (uint32_t i = 0; i < ctx->n_devs; i++) free(ctx->devs[i].exts);
    free(ctx->devs);
    if (ctx->messenger && ctx->vk.vkDestroyDebugUtilsMessengerEXT)
        ctx->vk.vkDestroyDebugUtilsMessengerEXT(ctx->instance, ctx->messenger, NULL);
    if (ctx->own_instance && ctx->vk.vkDestroyInstance) ctx->vk.vkDestroyInstance(ctx->instance, NULL);
    if (ctx->lib) dlclose(ctx->lib);
    free(ctx->device_choice);
    free(ctx);
}

uint32_t vkc_validation_messages(const vkc_context *ctx) {
    return ctx ? __atomic_load_n(&ctx->messages, __ATOMIC_RELAXED) : 0;
}

/* ---- what a device lacks (runtime_min/device.py lacks + spirv_needs) ------------------------ */

typedef struct feature { const char *name; int where; size_t offset; } feature;
enum { F_CORE, F_11, F_12, F_13, F_CM, F_CM2 };
#define FC(n) {#n, F_CORE, offsetof(VkPhysicalDeviceFeatures, n)}
#define F11(n) {#n, F_11, offsetof(VkPhysicalDeviceVulkan11Features, n)}
#define F12(n) {#n, F_12, offsetof(VkPhysicalDeviceVulkan12Features, n)}
#define F13(n) {#n, F_13, offsetof(VkPhysicalDeviceVulkan13Features, n)}
#define FCM2(n) {#n, F_CM2, offsetof(coopmat2_features, n)}
static const feature FEATURES[] = {
    FC(robustBufferAccess), FC(shaderFloat64), FC(shaderInt64), FC(shaderInt16),
    F11(storageBuffer16BitAccess), F11(uniformAndStorageBuffer16BitAccess), F11(variablePointers),
    F11(variablePointersStorageBuffer), F12(shaderFloat16), F12(shaderInt8), F12(storageBuffer8BitAccess),
    F12(uniformAndStorageBuffer8BitAccess), F12(vulkanMemoryModel), F12(bufferDeviceAddress),
    F12(shaderBufferInt64Atomics), F13(shaderIntegerDotProduct), F13(subgroupSizeControl),
    {"cooperativeMatrix", F_CM, offsetof(coopmat_features, cooperativeMatrix)},
    FCM2(cooperativeMatrixWorkgroupScope), FCM2(cooperativeMatrixFlexibleDimensions), FCM2(cooperativeMatrixReductions),
    FCM2(cooperativeMatrixConversions), FCM2(cooperativeMatrixPerElementOperations),
    FCM2(cooperativeMatrixTensorAddressing), FCM2(cooperativeMatrixBlockLoads),
};
#define N_FEATURES (sizeof FEATURES / sizeof FEATURES[0])

static VkBool32 *feature_slot(devinfo *d, const feature *f) {
    uint8_t *base = f->where == F_CORE ? (uint8_t *)&d->f.features : f->where == F_11 ? (uint8_t *)&d->f11
                    : f->where == F_12 ? (uint8_t *)&d->f12 : f->where == F_13 ? (uint8_t *)&d->f13
                    : f->where == F_CM ? (uint8_t *)&d->fcm : (uint8_t *)&d->fcm2;
    return (VkBool32 *)(base + f->offset);
}

static int feature_index(const char *name) {
    for (size_t i = 0; i < N_FEATURES; i++)
        if (strcmp(FEATURES[i].name, name) == 0) return (int)i;
    return -1;
}

static int feature_supported(const devinfo *d, int i) {
    const feature *f = &FEATURES[i];
    if (f->where == F_11 || f->where == F_12) { if (d->api < VK_API_VERSION_1_2) return 0; }
    if (f->where == F_13 && d->api < VK_API_VERSION_1_3) return 0;
    if (f->where == F_CM && !d->has_cm) return 0;
    if (f->where == F_CM2 && !d->has_cm2) return 0;
    if (f->where != F_CORE && d->api < VK_API_VERSION_1_1) return 0;
    return *feature_slot((devinfo *)d, f) != 0;
}

/* capability -> feature name, or "subgroup:<bit>", NULL for none; "?" unknown */
static const char *capability_need(uint32_t cap, uint32_t *subgroup_bit) {
    *subgroup_bit = 0;
    switch (cap) {
    case 0: case 1: case 46: return NULL;
    case 9: return "shaderFloat16";
    case 10: return "shaderFloat64";
    case 11: return "shaderInt64";
    case 12: return "shaderBufferInt64Atomics";
    case 22: return "shaderInt16";
    case 39: return "shaderInt8";
    case 61: case 62: case 63: case 64: case 65: case 66: case 67: case 68:
        *subgroup_bit = 1u << (cap - 61);  /* basic, vote, arithmetic, ballot, shuffle, relative, clustered, quad */
        return "subgroup";
    case 4433: return "storageBuffer16BitAccess";
    case 4434: return "uniformAndStorageBuffer16BitAccess";
    case 4441: return "variablePointersStorageBuffer";
    case 4442: return "variablePointers";
    case 4448: return "storageBuffer8BitAccess";
    case 4449: return "uniformAndStorageBuffer8BitAccess";
    case 5345: return "vulkanMemoryModel";
    case 5347: return "bufferDeviceAddress";
    case 5357: return "cooperativeMatrix";
    case 5430: return "cooperativeMatrixReductions";
    case 5431: return "cooperativeMatrixConversions";
    case 5432: return "cooperativeMatrixPerElementOperations";
    case 5433: case 5439: return "cooperativeMatrixTensorAddressing";
    case 5434: return "cooperativeMatrixBlockLoads";
    case 6016: case 6017: case 6018: case 6019: return "shaderIntegerDotProduct";
    case 6022: return "cooperativeMatrix";
    default: return "?";
    }
}

typedef struct spirv_ext { const char *spv; uint32_t core; const char *vk; } spirv_ext;
static const spirv_ext SPIRV_EXTS[] = {
    {"SPV_KHR_storage_buffer_storage_class", VK_API_VERSION_1_1, "VK_KHR_storage_buffer_storage_class"},
    {"SPV_KHR_16bit_storage", VK_API_VERSION_1_1, "VK_KHR_16bit_storage"},
    {"SPV_KHR_8bit_storage", VK_API_VERSION_1_2, "VK_KHR_8bit_storage"},
    {"SPV_KHR_variable_pointers", VK_API_VERSION_1_1, "VK_KHR_variable_pointers"},
    {"SPV_KHR_vulkan_memory_model", VK_API_VERSION_1_2, "VK_KHR_vulkan_memory_model"},
    {"SPV_KHR_physical_storage_buffer", VK_API_VERSION_1_2, "VK_KHR_buffer_device_address"},
    {"SPV_KHR_float_controls", VK_API_VERSION_1_2, "VK_KHR_shader_float_controls"},
    {"SPV_KHR_non_semantic_info", VK_API_VERSION_1_3, "VK_KHR_shader_non_semantic_info"},
    {"SPV_KHR_integer_dot_product", VK_API_VERSION_1_3, "VK_KHR_shader_integer_dot_product"},
    {"SPV_KHR_cooperative_matrix", 0, "VK_KHR_cooperative_matrix"},
    {"SPV_NV_cooperative_matrix", 0, "VK_NV_cooperative_matrix"},
    {"SPV_NV_cooperative_matrix2", 0, "VK_NV_cooperative_matrix2"},
    {"SPV_NV_tensor_addressing", 0, "VK_NV_cooperative_matrix2"},
};

typedef struct needs {
    uint8_t feature[N_FEATURES];
    const char *exts[64];
    uint32_t n_exts;
} needs;

static void add_ext(needs *n, const char *e) {
    for (uint32_t i = 0; i < n->n_exts; i++)
        if (strcmp(n->exts[i], e) == 0) return;
    if (n->n_exts < 64) n->exts[n->n_exts++] = e;
}

#define LACK(...) do { if (used < sizeof why) used += (size_t)snprintf(why + used, sizeof why - used, __VA_ARGS__); lacking = 1; } while (0)

/* 0 when the device can run the bundle (filling `nd`), else 1 with a list of what it lacks. */
/* A module counts for a variant when one of its kernels uses it (format 1.2); in a flat manifest every
 * module counts (format 1.1). */
static int counts(const manifest *man, const variant *v, uint32_t module) {
    return !man->multi || v->uses[module];
}

/* Whether a module the variant uses needs feature `name` for its SPIR-V (capabilities, workgroup-scope
 * matrices): lacks() then names it there, once, and not again under requirements.features. */
static int spirv_needs_feature(const manifest *man, const variant *v, const char *name) {
    for (uint32_t i = 0; i < man->n_modules; i++) {
        const m_module *mm = &man->modules[i];
        if (!counts(man, v, i)) continue;
        if (mm->workgroup_matrix && (strcmp(name, "cooperativeMatrixWorkgroupScope") == 0 ||
                                     strcmp(name, "cooperativeMatrixFlexibleDimensions") == 0)) return 1;
        for (uint32_t c = 0; c < mm->n_caps; c++) {
            uint32_t bit;
            const char *need = capability_need(mm->caps[c], &bit);
            if (need && !bit && strcmp(need, name) == 0) return 1;
        }
    }
    return 0;
}

/* What a runtime running variant `m` alone uploads of the WEIGHTS section (bundles/variants.py
 * uploaded_weights_bytes): its tensors' ranges, ends rounded up to its alignment, overlaps counted
 * once; a flat manifest's whole section. The section itself counts every profile's layouts. */
static int by_start(const void *a, const void *b);

static uint64_t uploaded_weights(const manifest *man, const variant *m) {
    uint64_t total = 0, reach = 0;
    wrange *r;
    uint32_t n = 0;
    if (!man->multi) return m->weights_bytes;
    if (!(r = calloc((size_t)m->n_tensors + 1, sizeof *r))) return m->weights_bytes;   /* count the whole section */
    for (uint32_t i = 0; i < m->n_tensors; i++) {
        const m_tensor *t = &m->tensors[i];
        uint64_t end = (t->offset + t->nbytes + m->alignment - 1) / m->alignment * m->alignment;
        if (t->memory != MEM_WEIGHTS || !t->nbytes) continue;
        r[n].start = t->offset;
        r[n++].end = end < m->weights_bytes ? end : m->weights_bytes;
    }
    qsort(r, n, sizeof *r, by_start);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t from = r[i].start > reach ? r[i].start : reach;
        if (r[i].end > from) total += r[i].end - from;
        if (r[i].end > reach) reach = r[i].end;
    }
    free(r);
    return total;
}

static int lacks(const vkc_context *ctx, const devinfo *d, const manifest *man, const variant *m, int robust, needs *nd,
                 char *out, size_t outlen) {
    char why[1024];
    size_t used = 0;
    int lacking = 0;
    const VkPhysicalDeviceLimits *lim = &d->props.limits;
    uint64_t align;
    int texels = 0;
    uint64_t io = 0, host_heap = 0, local_heap = 0, weights = uploaded_weights(man, m);
    memset(nd, 0, sizeof *nd);
    why[0] = '\0';
    (void)ctx;
    if (!d->has_compute) LACK("a compute queue; ");
    if (robust) {
        if (!d->f.features.robustBufferAccess) LACK("feature robustBufferAccess (pass robust=0 for a trusted bundle); ");
        nd->feature[feature_index("robustBufferAccess")] = 1;
    }
    if (VK_MAKE_API_VERSION(0, m->api[0], m->api[1], m->api[2]) > d->props.apiVersion)
        LACK("Vulkan %u.%u.%u; ", m->api[0], m->api[1], m->api[2]);
    for (uint32_t i = 0; i < m->n_extensions; i++) {
        if (!has_ext(d, m->extensions[i])) LACK("extension %s; ", m->extensions[i]);
        else add_ext(nd, m->extensions[i]);
    }
    if (m->max_shared > lim->maxComputeSharedMemorySize) LACK("%llu shared memory bytes; ", (unsigned long long)m->max_shared);
    if (m->max_invocations > lim->maxComputeWorkGroupInvocations) LACK("%llu workgroup invocations; ", (unsigned long long)m->max_invocations);
    if (m->max_storage_range > lim->maxStorageBufferRange) LACK("%llu storage buffer range bytes; ", (unsigned long long)m->max_storage_range);
    if (m->max_texel_elements > lim->maxTexelBufferElements) LACK("%llu texel buffer elements; ", (unsigned long long)m->max_texel_elements);
    for (int a = 0; a < 3; a++)
        if (m->max_wg[a] > lim->maxComputeWorkGroupSize[a]) LACK("workgroup size %llu on axis %c; ", (unsigned long long)m->max_wg[a], "xyz"[a]);
    for (uint32_t i = 0; i < m->n_features; i++) {
        int f = feature_index(m->features[i]);
        if (f >= 0 && feature_supported(d, f)) nd->feature[f] = 1;
        else if (!spirv_needs_feature(man, m, m->features[i])) LACK("feature %s (requirements.features); ", m->features[i]);
    }
    for (uint32_t i = 0; i < man->n_modules; i++) {
        const m_module *mm = &man->modules[i];
        if (!counts(man, m, i)) continue;
        for (uint32_t c = 0; c < mm->n_caps; c++) {
            uint32_t bit;
            const char *need = capability_need(mm->caps[c], &bit);
            if (!need) continue;
            if (strcmp(need, "?") == 0) LACK("SPIR-V capability %u (module %u), which this runtime does not know; ", mm->caps[c], i);
            else if (bit) { if (!(d->subgroup_ops & bit)) LACK("subgroup operations 0x%x in compute shaders (module %u); ", bit, i); }
            else {
                int f = feature_index(need);
                if (f < 0 || !feature_supported(d, f)) LACK("feature %s (SPIR-V capability %u, module %u); ", need, mm->caps[c], i);
                else nd->feature[f] = 1;
            }
        }
        if (mm->workgroup_matrix) {  /* bundles/spirv.py WORKGROUP_MATRIX_FEATURES */
            static const char *const wg[] = {"cooperativeMatrixWorkgroupScope", "cooperativeMatrixFlexibleDimensions"};
            for (int w = 0; w < 2; w++) {
                int f = feature_index(wg[w]);
                if (!feature_supported(d, f)) LACK("feature %s (workgroup-scope cooperative matrices, module %u); ", wg[w], i);
                else nd->feature[f] = 1;
            }
        }
        for (uint32_t e = 0; e < mm->n_exts; e++) {
            const spirv_ext *x = NULL;
            for (size_t k = 0; k < sizeof SPIRV_EXTS / sizeof SPIRV_EXTS[0]; k++)
                if (strcmp(SPIRV_EXTS[k].spv, mm->exts[e]) == 0) x = &SPIRV_EXTS[k];
            if (!x) LACK("SPIR-V extension %.80s (module %u), which this runtime does not know; ", mm->exts[e], i);
            else if (x->core && d->props.apiVersion >= x->core) continue;
            else if (has_ext(d, x->vk)) add_ext(nd, x->vk);
            else LACK("extension %s (for %s, module %u); ", x->vk, x->spv, i);
        }
        if (mm->bindings > lim->maxPerStageDescriptorStorageBuffers || mm->bindings > lim->maxDescriptorSetStorageBuffers)
            LACK("%u storage buffers in one kernel; ", mm->bindings);
        for (uint32_t b = 0; b < mm->bindings; b++) texels |= mm->texel[b] != 0;
    }
    if (m->arena_bytes > d->max_alloc) LACK("one allocation of %llu bytes for the arena; ", (unsigned long long)m->arena_bytes);
    if (weights > d->max_alloc) LACK("one allocation of %llu bytes for the weights; ", (unsigned long long)weights);
    if (m->state_bytes > d->max_alloc) LACK("one allocation of %llu bytes for the state; ", (unsigned long long)m->state_bytes);
    for (uint32_t i = 0; i < d->mem.memoryHeapCount; i++)
        if ((d->mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && d->mem.memoryHeaps[i].size > local_heap)
            local_heap = d->mem.memoryHeaps[i].size;
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++)
        if ((d->mem.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
            d->mem.memoryHeaps[d->mem.memoryTypes[i].heapIndex].size > host_heap)
            host_heap = d->mem.memoryHeaps[d->mem.memoryTypes[i].heapIndex].size;
    if (!local_heap && d->mem.memoryHeapCount) local_heap = d->mem.memoryHeaps[0].size;
    if (m->arena_bytes + weights + m->state_bytes > local_heap)
        LACK("%llu bytes of device memory; ", (unsigned long long)(m->arena_bytes + weights + m->state_bytes));
    for (uint32_t i = 0; i < m->n_inputs; i++) io += m->tensors[m->inputs[i].tensor].nbytes;
    for (uint32_t i = 0; i < m->n_outputs; i++) io += m->tensors[m->outputs[i].tensor].nbytes;
    if (io > host_heap) LACK("%llu bytes of host-visible memory for inputs and outputs; ", (unsigned long long)io);
    align = lim->minStorageBufferOffsetAlignment;
    if (texels && lim->minTexelBufferOffsetAlignment > align) align = lim->minTexelBufferOffsetAlignment;
    for (uint32_t i = 0; i < m->n_tensors; i++)
        if (align && m->tensors[i].offset % align) { LACK("tensor offsets aligned to %llu bytes; ", (unsigned long long)align); break; }
    for (uint32_t i = 0; i < m->n_dispatches; i++) {
        const m_dispatch *x = &m->dispatches[i];
        if (x->groups[0] > lim->maxComputeWorkGroupCount[0] || x->groups[1] > lim->maxComputeWorkGroupCount[1] ||
            x->groups[2] > lim->maxComputeWorkGroupCount[2]) { LACK("the workgroup counts of dispatch %u; ", i); break; }
    }
    if (used >= 2 && used < sizeof why) why[used - 2] = '\0';
    snprintf(out, outlen, "%s", why);
    return lacking;
}

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

static int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && (hay[i] | 32) == (needle[i] | 32)) i++;
        if (i == n) return 1;
    }
    return n == 0;
}

/* FORMAT.md "Which variant runs", step 1: a variant's score on a device from its target.match: 2 for
 * a vendor (and type, when given) that fits, 1 for a device type alone that fits, 0 without match;
 * -1 when the match does not fit (the variant is dropped). */
static int match_score(const variant *v, const devinfo *d) {
    const m_match *mt = &v->match;
    uint32_t type_bit = (unsigned)d->props.deviceType < 32 ? 1u << d->props.deviceType : 0;
    int type_fits = !mt->has_types || (mt->types & type_bit);
    if (!mt->present || (!mt->has_vendors && !mt->has_types)) return 0;
    if (mt->has_vendors) {
        for (uint32_t i = 0; i < mt->n_vendors; i++)
            if (mt->vendors[i] == d->props.vendorID) return type_fits ? 2 : -1;
        return -1;
    }
    return type_fits ? 1 : -1;
}

/* The profile to run on device d and its shape set (`in_set`, per variant), with the union of what
 * the set needs of the device; 0 when d can run none, `why` then naming per target what d misses. */
static int choose(const vkc_context *ctx, const devinfo *d, const manifest *man, const char *target, int robust,
                  const char **profile, uint8_t *in_set, needs *nd, char *why, size_t whylen) {
    int best = -1, best_score = -1;
    size_t used = 0;
    memset(nd, 0, sizeof *nd);
    why[0] = '\0';
    for (uint32_t k = 0; k < man->n_variants; k++) {
        const variant *v = &man->variants[k];
        needs one;
        char lack[1024];
        int score = target ? 0 : match_score(v, d), seen = 0;
        in_set[k] = 0;  /* for now: whether d meets the variant's requirements */
        if (target && strcmp(v->target, target) != 0) continue;
        in_set[k] = !lacks(ctx, d, man, v, robust, &one, lack, sizeof lack);
        if (in_set[k] && score >= 0) {
            if (score > best_score) { best = (int)k; best_score = score; }
            continue;
        }
        /* a reason per target name: what its first variant misses (runtime_min's wording) */
        for (uint32_t q = 0; q < k; q++) seen |= strcmp(man->variants[q].target, v->target) == 0;
        if (seen || used >= whylen) continue;
        if (in_set[k])  /* requirements met: its match is what does not fit (else what it misses) */
            snprintf(lack, sizeof lack, "a device its target.match fits (this one is vendor 0x%x, %s)",
                     d->props.vendorID, type_name(d->props.deviceType));
        if (man->multi)
            used += (size_t)snprintf(why + used, whylen - used, "%sfor target '%.60s': %s", used ? "; " : "", v->target,
                                     lack);
        else
            used += (size_t)snprintf(why + used, whylen - used, "%s", lack);
    }
    if (best < 0) return 0;
    /* the shape set: the chosen profile's variants whose requirements d meets (match aside) */
    *profile = man->variants[best].target;
    for (uint32_t k = 0; k < man->n_variants; k++) {
        needs one;
        char lack[8];
        if (!in_set[k] || strcmp(man->variants[k].target, *profile) != 0) { in_set[k] = 0; continue; }
        lacks(ctx, d, man, &man->variants[k], robust, &one, lack, sizeof lack);
        for (size_t f = 0; f < N_FEATURES; f++) nd->feature[f] |= one.feature[f];
        for (uint32_t e = 0; e < one.n_exts; e++) add_ext(nd, one.exts[e]);
    }
    return 1;
}

/* The device to load onto: the requested one (index or name substring), else the best type that
 * can run the bundle; then the profile and shape set on it (choose). */
static vkc_status pick(vkc_context *ctx, const manifest *m, const char *target, int robust, const devinfo **out,
                       const char **profile, uint8_t *in_set, needs *nd, vkc_error *err) {
    const char *choice = ctx->device_choice ? ctx->device_choice : getenv("VKC_DEVICE");
    int order[64], n = 0, is_index = 0;
    char problems[2048] = "", why[1024];
    size_t used = 0;
    if (target) {
        char names[512] = "";
        size_t nu = 0;
        int found = 0;
        for (uint32_t k = 0; k < m->n_variants; k++) {
            int seen = 0;
            found |= strcmp(m->variants[k].target, target) == 0;
            for (uint32_t q = 0; q < k; q++) seen |= strcmp(m->variants[q].target, m->variants[k].target) == 0;
            if (!seen && nu < sizeof names)
                nu += (size_t)snprintf(names + nu, sizeof names - nu, "%s'%.60s'", nu ? ", " : "", m->variants[k].target);
        }
        if (!found)
            return vkc__fail(err, VKC_ERR_ARGUMENT, "", "Target '%.60s' is not in this bundle; it has %s.", target, names);
    }
    if (choice && !choice[0]) choice = NULL;
    if (choice) {
        const char *p = choice;
        while (*p == ' ') p++;
        is_index = *p != '\0';
        for (; *p; p++) if ((*p < '0' || *p > '9') && *p != ' ') is_index = 0;
    }
    for (uint32_t i = 0; i < ctx->n_devs && n < 64; i++) {
        const devinfo *d = &ctx->devs[i];
        if (ctx->user_pdev && d->pdev != ctx->user_pdev) continue;
        if (choice && is_index && (uint32_t)atoi(choice) != i) continue;
        if (choice && !is_index && !contains_ci(d->props.deviceName, choice)) continue;
        order[n++] = (int)i;
    }
    if (!n)
        return vkc__fail(err, VKC_ERR_NO_DEVICE, "", "No Vulkan device matches %s%s%s (found %u); pass an index or a "
                         "part of a device name (VKC_DEVICE).", choice ? "'" : "the caller's device", choice ? choice : "",
                         choice ? "'" : "", ctx->n_devs);
    for (int a = 1; a < n; a++)  /* stable insertion sort by type rank */
        for (int b = a; b > 0 && type_rank(ctx->devs[order[b]].props.deviceType) < type_rank(ctx->devs[order[b - 1]].props.deviceType); b--) {
            int t = order[b]; order[b] = order[b - 1]; order[b - 1] = t;
        }
    for (int k = 0; k < n; k++) {
        const devinfo *d = &ctx->devs[order[k]];
        if (choose(ctx, d, m, target, robust, profile, in_set, nd, why, sizeof why)) { *out = d; return VKC_OK; }
        if (used < sizeof problems)
            used += (size_t)snprintf(problems + used, sizeof problems - used, "%sdevice %u: %s (%s) lacks: %s",
                                     k ? " | " : "", d->index, d->props.deviceName, type_name(d->props.deviceType), why);
    }
    return vkc__fail(err, VKC_ERR_NO_DEVICE, "", "%s can run this bundle%s%s%s: %s. Choose another device (VKC_DEVICE) "
                     "or compile for a profile this device meets (`--target host`).",
                     choice ? "The requested Vulkan device" : "No Vulkan device", target ? " as target '" : "",
                     target ? target : "", target ? "'" : "", problems);
}

/* ---- the model ------------------------------------------------------------------------------ */

static vkc_status create_device(vkc_model *md, const needs *nd, vkc_error *err) {
    vkc_context *ctx = md->ctx;
    devinfo want = *md->info;  /* a copy of the supported chain, every feature then set to "wanted" */
    float prio = 1.0f;
    VkDeviceQueueCreateInfo q = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, md->info->queue_family, 1, &prio};
    VkDeviceCreateInfo info = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, NULL, 0, 1, &q, 0, NULL, nd->n_exts, nd->exts, NULL};
    void *next = NULL;
    memset(&want.f.features, 0, sizeof want.f.features);
    memset((uint8_t *)&want.f11 + offsetof(VkPhysicalDeviceVulkan11Features, storageBuffer16BitAccess), 0,
           sizeof want.f11 - offsetof(VkPhysicalDeviceVulkan11Features, storageBuffer16BitAccess));
    memset((uint8_t *)&want.f12 + offsetof(VkPhysicalDeviceVulkan12Features, samplerMirrorClampToEdge), 0,
           sizeof want.f12 - offsetof(VkPhysicalDeviceVulkan12Features, samplerMirrorClampToEdge));
    memset((uint8_t *)&want.f13 + offsetof(VkPhysicalDeviceVulkan13Features, robustImageAccess), 0,
           sizeof want.f13 - offsetof(VkPhysicalDeviceVulkan13Features, robustImageAccess));
    want.fcm.cooperativeMatrix = want.fcm.cooperativeMatrixRobustBufferAccess = VK_FALSE;
    memset((uint8_t *)&want.fcm2 + offsetof(coopmat2_features, cooperativeMatrixWorkgroupScope), 0,
           sizeof want.fcm2 - offsetof(coopmat2_features, cooperativeMatrixWorkgroupScope));
    for (size_t i = 0; i < N_FEATURES; i++)
        if (nd->feature[i]) *feature_slot(&want, &FEATURES[i]) = VK_TRUE;
    /* rebuild the chain inside `want` (the copy's pNext pointers point into the original) */
    if (want.has_cm2) { want.fcm2.pNext = next; next = &want.fcm2; }
    if (want.has_cm) { want.fcm.pNext = next; next = &want.fcm; }
    if (want.api >= VK_API_VERSION_1_3) { want.f13.pNext = next; next = &want.f13; }
    if (want.api >= VK_API_VERSION_1_2) { want.f12.pNext = next; next = &want.f12; want.f11.pNext = next; next = &want.f11; }
    want.f.pNext = next;
    if (want.api >= VK_API_VERSION_1_1) info.pNext = &want.f;
    else info.pEnabledFeatures = &want.f.features;
    VKTRY(ctx->vk.vkCreateDevice(md->info->pdev, &info, NULL, &md->device), "creating a logical device");
    md->own_device = 1;
    return VKC_OK;
}

static void load_device_fns(vkc_model *md) {
    PFN_vkGetDeviceProcAddr gdpa = md->ctx->vk.vkGetDeviceProcAddr;
#define LOAD_D(f) md->vk.f = (PFN_##f)gdpa(md->device, #f);
    DEVICE_FNS(LOAD_D)
}

static int memory_type(const devinfo *d, uint32_t bits, VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred) {
    int fallback = -1;
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = d->mem.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (f & required) != required) continue;
        if ((f & preferred) == preferred) return (int)i;
        if (fallback < 0) fallback = (int)i;
    }
    return fallback;
}

/* A device-local, host-visible and coherent memory type whose heap holds 4x `size` (a small BAR heap
 * is left to the driver), or -1. */
static int bar_memory_type(const devinfo *d, uint32_t bits, VkDeviceSize size) {
    VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                 VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (d->mem.memoryTypes[i].propertyFlags & want) == want &&
            d->mem.memoryHeaps[d->mem.memoryTypes[i].heapIndex].size >= 4 * size)
            return (int)i;
    return -1;
}

/* host: host-visible + coherent (cached preferred), mapped; HOST_INPUTS: device-local host-visible
 * memory first where a large heap has it (as runtime_min stages inputs: the host writes them across
 * the bus once and the copy-in is device to device; H200 MobileNetV2 batch 32: 4.16 ms a run from
 * BAR memory in runtime_min, 5.73 ms from cached system memory here). Else device-local, mapped when
 * it happens to be host-visible and coherent (integrated GPUs, lavapipe), so the weights skip a
 * staging copy. */
#define HOST_INPUTS 2
static vkc_status make_buffer(vkc_model *md, buffer *b, VkDeviceSize size, VkBufferUsageFlags usage, int host,
                              const char *what, vkc_error *err) {
    VkMemoryRequirements req;
    VkBufferCreateInfo info = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, size < 4 ? 4 : size, usage,
                               VK_SHARING_MODE_EXCLUSIVE, 0, NULL};
    VkMemoryPropertyFlags coherent = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int type;
    char step[96];
    b->size = info.size;
    snprintf(step, sizeof step, "creating the %s buffer (%llu bytes)", what, (unsigned long long)info.size);
    VKTRY(md->vk.vkCreateBuffer(md->device, &info, NULL, &b->handle), step);
    md->vk.vkGetBufferMemoryRequirements(md->device, b->handle, &req);
    type = host == HOST_INPUTS ? bar_memory_type(md->info, req.memoryTypeBits, req.size) : -1;
    if (type < 0)
        type = host ? memory_type(md->info, req.memoryTypeBits, coherent, VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                    : memory_type(md->info, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    if (type < 0)
        return vkc__fail(err, VKC_ERR_NO_DEVICE, "", "Device %s has no suitable memory type for the %s buffer; choose "
                         "another device.", md->device_name, what);
    {
        VkMemoryAllocateInfo alloc = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size, (uint32_t)type};
        snprintf(step, sizeof step, "allocating %llu bytes for the %s buffer", (unsigned long long)req.size, what);
        VKTRY(md->vk.vkAllocateMemory(md->device, &alloc, NULL, &b->memory), step);
    }
    VKTRY(md->vk.vkBindBufferMemory(md->device, b->handle, b->memory, 0), "binding buffer memory");
    if (host || (md->info->mem.memoryTypes[type].propertyFlags & coherent) == coherent) {
        void *p;
        VKTRY(md->vk.vkMapMemory(md->device, b->memory, 0, VK_WHOLE_SIZE, 0, &p), "mapping a buffer");
        b->mapped = p;
    }
    return VKC_OK;
}

static void free_buffer(vkc_model *md, buffer *b) {
    if (b->mapped) md->vk.vkUnmapMemory(md->device, b->memory);
    if (b->handle) md->vk.vkDestroyBuffer(md->device, b->handle, NULL);
    if (b->memory) md->vk.vkFreeMemory(md->device, b->memory, NULL);
    memset(b, 0, sizeof *b);
}

static void barrier(vkc_model *md, VkCommandBuffer cmd, VkPipelineStageFlags src, VkAccessFlags sa,
                    VkPipelineStageFlags dst, VkAccessFlags da) {
    VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, sa, da};
    md->vk.vkCmdPipelineBarrier(cmd, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

static uint64_t elapsed_ns(const struct timespec *t0, const struct timespec *t) {
    return (uint64_t)((t->tv_sec - t0->tv_sec) * 1000000000LL + (t->tv_nsec - t0->tv_nsec));
}

static vkc_status submit_wait(vkc_model *md, VkCommandBuffer cmd, const char *what, vkc_error *err) {
    VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &cmd, 0, NULL};
    struct timespec t0, t;
    VkResult r;
    if (md->lost)
        return vkc__fail(err, VKC_ERR_DEVICE_LOST, "", "This model cannot run any more: its device was lost or hung "
                         "earlier; load it again.");
    r = md->vk.vkQueueSubmit(md->queue, 1, &si, md->fence);
    if (r != VK_SUCCESS) { if (r == VK_ERROR_DEVICE_LOST) md->lost = 1; return vkfail(err, r, what); }
    r = VK_NOT_READY;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (md->spin_ns) {  /* a blocking wait may sleep past the signal; polling wakes at once */
        uint64_t spin = 2 * md->busy_ns < MAX_SPIN_NS ? 2 * md->busy_ns : MAX_SPIN_NS;
        if (spin < md->spin_ns) spin = md->spin_ns;
        do {
            r = md->vk.vkGetFenceStatus(md->device, md->fence);
            clock_gettime(CLOCK_MONOTONIC, &t);
        } while (r == VK_NOT_READY && elapsed_ns(&t0, &t) < spin);
    }
    if (r == VK_NOT_READY) r = md->vk.vkWaitForFences(md->device, 1, &md->fence, VK_TRUE, md->timeout_ns);
    clock_gettime(CLOCK_MONOTONIC, &t);
    md->busy_ns = elapsed_ns(&t0, &t);
    if (r == VK_TIMEOUT) {
        md->lost = 2;
        return vkc__fail(err, VKC_ERR_DEVICE_LOST, "", "%s did not finish within %.0f s on %s: the kernel hung, or the "
                         "model is too slow for this device (raise timeout_s). Load the model again.", what,
                         (double)md->timeout_ns / 1e9, md->device_name);
    }
    if (r != VK_SUCCESS) { md->lost = 1; return vkfail(err, r, what); }
    VKTRY(md->vk.vkResetFences(md->device, 1, &md->fence), "resetting the fence");
    return VKC_OK;
}

static vkc_status one_shot(vkc_model *md, const char *what, void (*record)(vkc_model *, VkCommandBuffer, void *),
                           void *arg, vkc_error *err) {
    VkCommandBufferAllocateInfo ai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, md->cmd_pool,
                                      VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
    VkCommandBufferBeginInfo bi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                   VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
    VkCommandBuffer cmd;
    vkc_status s;
    VkResult r;
    VKTRY(md->vk.vkAllocateCommandBuffers(md->device, &ai, &cmd), "allocating a command buffer");
    r = md->vk.vkBeginCommandBuffer(cmd, &bi);
    if (r == VK_SUCCESS) {
        record(md, cmd, arg);
        r = md->vk.vkEndCommandBuffer(cmd);
    }
    s = r == VK_SUCCESS ? submit_wait(md, cmd, what, err) : vkfail(err, r, what);
    md->vk.vkFreeCommandBuffers(md->device, md->cmd_pool, 1, &cmd);
    return s;
}

static void rec_poison(vkc_model *md, VkCommandBuffer cmd, void *arg) {
    (void)arg;
    md->vk.vkCmdFillBuffer(cmd, md->arena.handle, 0, md->arena.size / 4 * 4, NAN_BITS);
}

static void rec_zero_state(vkc_model *md, VkCommandBuffer cmd, void *arg) {
    (void)arg;
    md->vk.vkCmdFillBuffer(cmd, md->state.handle, 0, md->state.size / 4 * 4, 0);
}

typedef struct copy_job { VkBuffer src; VkDeviceSize dst_offset, n; } copy_job;

static void rec_copy(vkc_model *md, VkCommandBuffer cmd, void *arg) {
    copy_job *j = arg;
    VkBufferCopy region = {0, j->dst_offset, j->n};
    md->vk.vkCmdCopyBuffer(cmd, j->src, md->weights.handle, 1, &region);
}

static int by_start(const void *a, const void *b) {
    const wrange *x = a, *y = b;
    return x->start != y->start ? (x->start > y->start) - (x->start < y->start) : (x->end > y->end) - (x->end < y->end);
}

/* md->wranges for the shape set (a flat bundle: one range, the whole section). */
static vkc_status pack_weights(vkc_model *md, vkc_error *err) {
    const manifest *m = &md->m;
    uint64_t size = m->variants[0].weights_bytes, align = 0, at = 0;
    uint32_t n = 0, total = 0;
    for (uint32_t j = 0; j < md->n_set; j++) {
        total += md->set[j].v->n_tensors;
        if (md->set[j].v->alignment > align) align = md->set[j].v->alignment;
    }
    if (!(md->wranges = calloc(total + 1, sizeof *md->wranges))) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    if (!m->multi) {
        md->wranges[0].end = size;
        md->n_wranges = 1;
        md->weights_size = size;
        return VKC_OK;
    }
    for (uint32_t j = 0; j < md->n_set; j++)  /* each weight tensor's bytes, the end rounded up to the alignment */
        for (uint32_t i = 0; i < md->set[j].v->n_tensors; i++) {
            const m_tensor *t = &md->set[j].v->tensors[i];
            uint64_t end = (t->offset + t->nbytes + align - 1) / align * align;
            if (t->memory != MEM_WEIGHTS || !t->nbytes) continue;
            md->wranges[n].start = t->offset;
            md->wranges[n++].end = end < size ? end : size;
        }
    qsort(md->wranges, n, sizeof *md->wranges, by_start);
    md->n_wranges = 0;
    for (uint32_t i = 0; i < n; i++) {  /* overlapping ranges merged, then packed in order */
        wrange *last = md->n_wranges ? &md->wranges[md->n_wranges - 1] : NULL;
        if (last && md->wranges[i].start < last->end) {
            if (md->wranges[i].end > last->end) { at += md->wranges[i].end - last->end; last->end = md->wranges[i].end; }
            continue;
        }
        md->wranges[md->n_wranges] = md->wranges[i];
        md->wranges[md->n_wranges++].at = at;
        at += md->wranges[i].end - md->wranges[i].start;
    }
    md->weights_size = at;
    return VKC_OK;
}

/* Where a weight tensor's bytes sit in the (packed) weights buffer. */
static uint64_t packed_offset(const vkc_model *md, uint64_t offset) {
    uint32_t lo = 0, hi = md->n_wranges;
    while (hi - lo > 1) {  /* the last range starting at or before `offset` */
        uint32_t mid = (lo + hi) / 2;
        if (md->wranges[mid].start <= offset) lo = mid;
        else hi = mid;
    }
    return md->wranges[lo].at + offset - md->wranges[lo].start;
}

/* Bytes [from, from + n) of the packed weights, gathered from the WEIGHTS section. */
static void gather(const vkc_model *md, const uint8_t *weights, uint8_t *dst, uint64_t from, uint64_t n) {
    for (uint32_t i = 0; i < md->n_wranges; i++) {
        const wrange *r = &md->wranges[i];
        uint64_t lo = from > r->at ? from : r->at, hi = r->at + (r->end - r->start);
        if (hi > from + n) hi = from + n;
        if (lo < hi) memcpy(dst + (lo - from), weights + r->start + (lo - r->at), (size_t)(hi - lo));
    }
}

static vkc_status upload(vkc_model *md, const uint8_t *weights, vkc_error *err) {
    VkDeviceSize n = md->weights_size;
    vkc_status s;
    if (md->weights.mapped && n) gather(md, weights, md->weights.mapped, 0, n);
    s = one_shot(md, "poisoning the arena", rec_poison, NULL, err);
    if (s == VKC_OK && md->state.handle) s = one_shot(md, "zeroing the state", rec_zero_state, NULL, err);
    if (s != VKC_OK || md->weights.mapped || !n) return s;
    {
        buffer staging;
        memset(&staging, 0, sizeof staging);
        s = make_buffer(md, &staging, n < UPLOAD_CHUNK ? n : UPLOAD_CHUNK, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, 1,
                        "weights staging", err);
        for (VkDeviceSize at = 0; s == VKC_OK && at < n; at += UPLOAD_CHUNK) {
            copy_job j = {staging.handle, at, n - at < UPLOAD_CHUNK ? n - at : UPLOAD_CHUNK};
            gather(md, weights, staging.mapped, at, j.n);
            s = one_shot(md, "uploading the weights", rec_copy, &j, err);
        }
        free_buffer(md, &staging);
    }
    return s;
}

/* Shader modules, descriptor set layouts and pipeline layouts of the modules the shape set uses;
 * kept until vkc_free, so a variant's pipelines can be built on its first run without the file. */
static vkc_status build_modules(vkc_model *md, const vkb_bundle *b, const uint8_t *wanted, vkc_error *err) {
    manifest *m = &md->m;
    md->shaders = calloc(m->n_modules + 1, sizeof *md->shaders);
    md->set_layouts = calloc(m->n_modules + 1, sizeof *md->set_layouts);
    md->layouts = calloc(m->n_modules + 1, sizeof *md->layouts);
    if (!md->shaders || !md->set_layouts || !md->layouts) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    for (uint32_t i = 0; i < m->n_modules; i++) {
        const uint8_t *code;
        size_t size;
        uint32_t *words;
        VkDescriptorSetLayoutBinding binds[64];
        VkResult r;
        if (!wanted[i]) continue;
        vkb_module(b, i, &code, &size);
        words = malloc(size);  /* pCode must be 4-byte aligned; the caller's buffer may not be */
        if (!words) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
        memcpy(words, code, size);
        {
            VkShaderModuleCreateInfo si = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0, size, words};
            r = md->vk.vkCreateShaderModule(md->device, &si, NULL, &md->shaders[i]);
        }
        free(words);
        VKTRY(r, "creating a shader module");
        for (uint32_t k = 0; k < m->modules[i].bindings; k++) {
            binds[k].binding = k;
            binds[k].descriptorType = m->modules[i].texel[k] ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                                                             : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            binds[k].descriptorCount = 1;
            binds[k].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
            binds[k].pImmutableSamplers = NULL;
        }
        {
            VkDescriptorSetLayoutCreateInfo li = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, NULL, 0,
                                                  m->modules[i].bindings, binds};
            VKTRY(md->vk.vkCreateDescriptorSetLayout(md->device, &li, NULL, &md->set_layouts[i]),
                  "creating a descriptor set layout");
        }
        {
            VkPipelineLayoutCreateInfo pi = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL, 0, 1, &md->set_layouts[i], 0, NULL};
            VKTRY(md->vk.vkCreatePipelineLayout(md->device, &pi, NULL, &md->layouts[i]), "creating a pipeline layout");
        }
    }
    return VKC_OK;
}

static int same_kernel(const m_kernel *a, const m_kernel *b) {
    return a->module == b->module && a->n_spec == b->n_spec && !memcmp(a->spec, b->spec, a->n_spec * sizeof *a->spec);
}

/* One variant's pipelines; a kernel with the module and specialization of one built before (by
 * any variant) takes that pipeline, as runtime_min shares them. */
static vkc_status build_pipelines(vkc_model *md, vstate *vs, vkc_error *err) {
    const variant *v = vs->v;
    vkc_status s = VKC_OK;
    if (!(vs->pipelines = calloc(v->n_kernels + 1, sizeof *vs->pipelines)))
        return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    for (uint32_t k = 0; k < v->n_kernels && s == VKC_OK; k++) {
        const m_kernel *kn = &v->kernels[k];
        VkSpecializationMapEntry *entries;
        uint32_t *data;
        VkResult r;
        for (uint32_t p = 0; p < md->n_pipes && !vs->pipelines[k]; p++)
            if (same_kernel(md->pipe_kernels[p], kn)) vs->pipelines[k] = md->pipes[p];
        if (vs->pipelines[k]) continue;
        entries = calloc(kn->n_spec + 1, sizeof *entries);
        data = calloc(kn->n_spec + 1, sizeof *data);
        if (!entries || !data) { free(entries); free(data); return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory"); }
        for (uint32_t e = 0; e < kn->n_spec; e++) {
            entries[e].constantID = kn->spec[e].id;
            entries[e].offset = 4 * e;
            entries[e].size = 4;
            data[e] = kn->spec[e].bits;
        }
        {
            VkSpecializationInfo spec = {kn->n_spec, entries, 4 * (size_t)kn->n_spec, data};
            VkComputePipelineCreateInfo ci = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, NULL, 0,
                {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, NULL, 0, VK_SHADER_STAGE_COMPUTE_BIT,
                 md->shaders[kn->module], "main", &spec}, md->layouts[kn->module], VK_NULL_HANDLE, 0};
            char step[200];
            r = md->vk.vkCreateComputePipelines(md->device, VK_NULL_HANDLE, 1, &ci, NULL, &vs->pipelines[k]);
            snprintf(step, sizeof step, "building the pipeline of kernel %u (%.60s) of variant '%.60s'", k, kn->name,
                     v->name);
            if (r != VK_SUCCESS) s = vkfail(err, r, step);
            else {  /* room for every kernel of every variant was made at load */
                md->pipe_kernels[md->n_pipes] = kn;
                md->pipes[md->n_pipes++] = vs->pipelines[k];
            }
        }
        free(entries);
        free(data);
    }
    return s;
}

static const buffer *memory_of(const vkc_model *md, const m_tensor *t) {
    return t->memory == MEM_ARENA ? &md->arena : t->memory == MEM_WEIGHTS ? &md->weights : &md->state;
}

static void tensor_range(const vkc_model *md, const m_tensor *t, VkBuffer *buf, VkDeviceSize *off, VkDeviceSize *range) {
    *buf = memory_of(md, t)->handle;
    if (t->nbytes) { *off = t->memory == MEM_WEIGHTS ? packed_offset(md, t->offset) : t->offset; *range = t->nbytes; }
    else { *off = 0; *range = 4; }  /* an empty tensor is never read; a zero range is invalid */
}

/* runtime_min's _check_ranges: every range of a variant against the buffers made and the device's limits. */
static vkc_status check_ranges(vkc_model *md, const variant *v, vkc_error *err) {
    const VkPhysicalDeviceLimits *lim = &md->info->props.limits;
    for (uint32_t i = 0; i < v->n_dispatches; i++) {
        const m_dispatch *x = &v->dispatches[i];
        const m_module *mm = &md->m.modules[v->kernels[x->kernel].module];
        for (uint32_t b = 0; b < x->n_bindings; b++) {
            VkBuffer buf;
            VkDeviceSize off, rng, size;
            tensor_range(md, &v->tensors[x->bindings[b]], &buf, &off, &rng);
            size = memory_of(md, &v->tensors[x->bindings[b]])->size;
            if ((mm->texel[b] && (rng / (mm->texel[b] == TEXEL_R32F ? 4 : 16) > lim->maxTexelBufferElements ||
                                  off % lim->minTexelBufferOffsetAlignment)) ||
                off + rng > size || rng > lim->maxStorageBufferRange || off % lim->minStorageBufferOffsetAlignment)
                return vkc__fail(err, VKC_ERR_BUNDLE, "buffer ranges", "variant '%.60s' dispatch %u binding %u (tensor "
                                 "%u): bytes %llu..%llu of a %llu-byte buffer exceed this device's limits", v->name, i,
                                 b, x->bindings[b], (unsigned long long)off, (unsigned long long)(off + rng),
                                 (unsigned long long)size);
        }
    }
    return VKC_OK;
}

static vkc_status descriptor_sets(vkc_model *md, vstate *vs, VkDescriptorSet *sets, vkc_error *err) {
    const variant *m = vs->v;
    uint32_t total = 0, n_texel = 0, n = 0;
    VkDescriptorBufferInfo *infos;
    VkWriteDescriptorSet *writes;
    VkDescriptorSetLayout *layouts;
    vkc_status s = VKC_OK;
    if (!m->n_dispatches) return VKC_OK;
    for (uint32_t i = 0; i < m->n_dispatches; i++) {
        const m_module *mm = &md->m.modules[m->kernels[m->dispatches[i].kernel].module];
        total += m->dispatches[i].n_bindings;
        for (uint32_t b = 0; b < mm->bindings; b++) n_texel += mm->texel[b] != 0;
    }
    {
        VkDescriptorPoolSize sizes[2] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, total - n_texel ? total - n_texel : 1},
                                         {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, n_texel ? n_texel : 1}};
        VkDescriptorPoolCreateInfo pi = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, NULL, 0, m->n_dispatches, 2, sizes};
        VKTRY(md->vk.vkCreateDescriptorPool(md->device, &pi, NULL, &vs->pool), "creating the descriptor pool");
    }
    layouts = calloc(m->n_dispatches, sizeof *layouts);
    infos = calloc(total, sizeof *infos);
    writes = calloc(total, sizeof *writes);
    vs->views = calloc(n_texel + 1, sizeof *vs->views);
    if (!layouts || !infos || !writes || !vs->views) {
        s = vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < m->n_dispatches; i++) layouts[i] = md->set_layouts[m->kernels[m->dispatches[i].kernel].module];
    {
        VkDescriptorSetAllocateInfo ai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, NULL, vs->pool, m->n_dispatches, layouts};
        VkResult r = md->vk.vkAllocateDescriptorSets(md->device, &ai, sets);
        if (r != VK_SUCCESS) { s = vkfail(err, r, "allocating descriptor sets"); goto done; }
    }
    for (uint32_t i = 0; i < m->n_dispatches; i++) {
        const m_dispatch *x = &m->dispatches[i];
        const m_module *mm = &md->m.modules[m->kernels[x->kernel].module];
        for (uint32_t b = 0; b < x->n_bindings; b++) {
            VkWriteDescriptorSet *w = &writes[n];
            VkBuffer buf;
            VkDeviceSize off, rng;
            tensor_range(md, &m->tensors[x->bindings[b]], &buf, &off, &rng);
            w->sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
            w->dstSet = sets[i];
            w->dstBinding = b;
            w->descriptorCount = 1;
            if (mm->texel[b]) {
                /* one view per binding (runtime_min shares one per tensor and format; same bytes) */
                VkBufferViewCreateInfo vi = {VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO, NULL, 0, buf,
                    mm->texel[b] == TEXEL_R32F ? VK_FORMAT_R32_SFLOAT : VK_FORMAT_R32G32B32A32_SFLOAT, off, rng};
                VkResult r = md->vk.vkCreateBufferView(md->device, &vi, NULL, &vs->views[vs->n_views]);
                if (r != VK_SUCCESS) { s = vkfail(err, r, "creating a texel buffer view"); goto done; }
                w->descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
                w->pTexelBufferView = &vs->views[vs->n_views++];
            } else {
                infos[n].buffer = buf;
                infos[n].offset = off;
                infos[n].range = rng;
                w->descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
                w->pBufferInfo = &infos[n];
            }
            n++;
        }
    }
    if (n) md->vk.vkUpdateDescriptorSets(md->device, n, writes, 0, NULL);
done:
    free(layouts);
    free(infos);
    free(writes);
    return s;
}

/* FORMAT.md "How a runtime replays it", step 4, as runtime_min records it; plus two timestamps.
 * The outputs i with fetch[i] (fetch NULL: all) are copied back, into *out. */
static vkc_status record(vkc_model *md, vstate *vs, const uint8_t *fetch, VkCommandBuffer *out, vkc_error *err) {
    const variant *m = vs->v;
    const VkDescriptorSet *sets = vs->sets;
    VkCommandBufferAllocateInfo ai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, md->cmd_pool,
                                      VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
    VkCommandBufferBeginInfo bi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL, 0, NULL};
    VkPipelineStageFlags transfer = VK_PIPELINE_STAGE_TRANSFER_BIT, compute = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
    VkAccessFlags shader_rw = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    VkCommandBuffer cmd;
    VkBufferCopy *copies = calloc(m->n_inputs + m->n_outputs + 1, sizeof *copies);
    uint32_t nc = 0;
    int64_t bound = -1;
    if (!copies) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    {
        VkResult r = md->vk.vkAllocateCommandBuffers(md->device, &ai, out);
        if (r == VK_SUCCESS) r = md->vk.vkBeginCommandBuffer(*out, &bi);
        if (r != VK_SUCCESS) { free(copies); return vkfail(err, r, "beginning the command buffer"); }
    }
    cmd = *out;
    if (md->queries) {
        md->vk.vkCmdResetQueryPool(cmd, md->queries, 0, 2);
        md->vk.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, md->queries, 0);
    }
    for (uint32_t i = 0; i < m->n_inputs; i++) {
        const m_tensor *t = &m->tensors[m->inputs[i].tensor];
        if (t->nbytes) { copies[nc].srcOffset = vs->stage_off[i]; copies[nc].dstOffset = t->offset; copies[nc++].size = t->nbytes; }
    }
    if (nc) md->vk.vkCmdCopyBuffer(cmd, md->in_staging.handle, md->arena.handle, nc, copies);
    barrier(md, cmd, transfer, VK_ACCESS_TRANSFER_WRITE_BIT, compute, shader_rw);
    for (uint32_t i = 0; i < m->n_dispatches; i++) {
        const m_dispatch *x = &m->dispatches[i];
        uint32_t mod = m->kernels[x->kernel].module;
        if (i && x->barrier) barrier(md, cmd, compute, VK_ACCESS_SHADER_WRITE_BIT, compute, shader_rw);
        if (bound != (int64_t)x->kernel) {
            md->vk.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vs->pipelines[x->kernel]);
            bound = x->kernel;
        }
        md->vk.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, md->layouts[mod], 0, 1, &sets[i], 0, NULL);
        md->vk.vkCmdDispatch(cmd, x->groups[0], x->groups[1], x->groups[2]);
    }
    barrier(md, cmd, compute, VK_ACCESS_SHADER_WRITE_BIT, transfer, VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    nc = 0;
    for (uint32_t i = 0; i < m->n_outputs; i++) {
        const m_tensor *t = &m->tensors[m->outputs[i].tensor];
        if (t->nbytes && (!fetch || fetch[i])) {
            copies[nc].srcOffset = t->offset;
            copies[nc].dstOffset = vs->stage_off[m->n_inputs + i];
            copies[nc++].size = t->nbytes;
        }
    }
    if (nc) md->vk.vkCmdCopyBuffer(cmd, md->arena.handle, md->staging.handle, nc, copies);
    barrier(md, cmd, transfer, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    if (md->queries) md->vk.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, md->queries, 1);
    free(copies);
    VKTRY(md->vk.vkEndCommandBuffer(cmd), "recording the command buffer");
    return VKC_OK;
}

/* What a failed build of a variant left (so the next run can try again cleanly). Its pipelines
 * stay in md->pipes, shared. */
static void unbuild_variant(vkc_model *md, vstate *vs) {
    for (uint32_t i = 0; i < vs->n_views; i++) md->vk.vkDestroyBufferView(md->device, vs->views[i], NULL);
    if (vs->cmd) md->vk.vkFreeCommandBuffers(md->device, md->cmd_pool, 1, &vs->cmd);
    if (vs->pool) md->vk.vkDestroyDescriptorPool(md->device, vs->pool, NULL);
    free(vs->views);
    free(vs->pipelines);
    free(vs->sets);
    vs->views = NULL;
    vs->pipelines = NULL;
    vs->sets = NULL;
    vs->n_views = 0;
    vs->cmd = VK_NULL_HANDLE;
    vs->pool = VK_NULL_HANDLE;
}

/* Pipelines, descriptor sets and the command buffer of one variant (its first run, or load). */
static vkc_status build_variant(vkc_model *md, vstate *vs, vkc_error *err) {
    vkc_status s;
    if (vs->built) return VKC_OK;
    unbuild_variant(md, vs);
    if ((s = build_pipelines(md, vs, err)) != VKC_OK) return s;
    if (!(vs->sets = calloc(vs->v->n_dispatches + 1, sizeof *vs->sets)))
        return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    s = descriptor_sets(md, vs, vs->sets, err);
    if (s == VKC_OK) s = record(md, vs, NULL, &vs->cmd, err);
    vs->built = s == VKC_OK;
    return s;
}

/* The command buffer of a built variant copying back the outputs with fetch[i] (NULL: every one),
 * recorded on the first run asking for that set (the lock is held). */
static vkc_status fetching(vkc_model *md, vstate *vs, const uint8_t *fetch, VkCommandBuffer *out, vkc_error *err) {
    uint32_t n = vs->v->n_outputs, all = 1;
    fetch_cmd *grown;
    vkc_status s;
    for (uint32_t i = 0; fetch && i < n; i++) all &= fetch[i] != 0;
    if (!fetch || all) { *out = vs->cmd; return VKC_OK; }
    for (uint32_t k = 0; k < vs->n_fetches; k++)
        if (!memcmp(vs->fetches[k].fetch, fetch, n)) { *out = vs->fetches[k].cmd; return VKC_OK; }
    if (!(grown = realloc(vs->fetches, (vs->n_fetches + 1) * sizeof *grown)))
        return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    vs->fetches = grown;
    if (!(grown[vs->n_fetches].fetch = malloc(n + 1))) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    memcpy(grown[vs->n_fetches].fetch, fetch, n);
    grown[vs->n_fetches].cmd = VK_NULL_HANDLE;
    if ((s = record(md, vs, fetch, &grown[vs->n_fetches].cmd, err)) != VKC_OK) {
        if (grown[vs->n_fetches].cmd) md->vk.vkFreeCommandBuffers(md->device, md->cmd_pool, 1, &grown[vs->n_fetches].cmd);
        free(grown[vs->n_fetches].fetch);
        return s;
    }
    *out = grown[vs->n_fetches++].cmd;
    return VKC_OK;
}

/* Staging offsets of n of a variant's inputs or outputs, one after another; returns the bytes they
 * span. A vstate's stage_off holds its inputs' (in in_staging), then its outputs' (in staging). */
static VkDeviceSize stage_layout(const variant *v, const m_io *io, uint32_t n, VkDeviceSize *offsets) {
    VkDeviceSize at = 0;
    for (uint32_t i = 0; i < n; i++) {
        offsets[i] = at;
        at += (v->tensors[io[i].tensor].nbytes + STAGING_ALIGN - 1) / STAGING_ALIGN * STAGING_ALIGN;
    }
    return at;
}

/* Where a run of vs reads input i, and where it leaves output i. */
static uint8_t *input_at(const vkc_model *md, const vstate *vs, uint32_t i) {
    return md->in_staging.mapped + vs->stage_off[i];
}

static uint8_t *output_at(const vkc_model *md, const vstate *vs, uint32_t i) {
    return md->staging.mapped + vs->stage_off[vs->v->n_inputs + i];
}

static vkc_status build(vkc_model *md, const vkb_bundle *b, const char *target, int robust, int build_all, vkc_error *err) {
    manifest *m = &md->m;
    needs nd;
    vkc_status s;
    VkBufferUsageFlags usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    VkDeviceSize staging = 0, in_staging = 0, arena = 0;
    const char *profile = NULL;
    uint8_t *in_set = calloc(m->n_variants, 1), *wanted = calloc(m->n_modules + 1, 1);
    if (!in_set || !wanted) { free(in_set); free(wanted); return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory"); }
    md->robust = robust;
    s = pick(md->ctx, m, target, robust, &md->info, &profile, in_set, &nd, err);
    for (uint32_t k = 0; s == VKC_OK && k < m->n_variants; k++) md->n_set += in_set[k];
    if (s == VKC_OK && !(md->set = calloc(md->n_set, sizeof *md->set))) s = vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    for (uint32_t k = 0, j = 0; s == VKC_OK && k < m->n_variants; k++) {
        const variant *v = &m->variants[k];
        if (!in_set[k]) continue;
        md->set[j].v = v;
        md->set[j].index = k;
        if (!(md->set[j].stage_off = calloc(v->n_inputs + v->n_outputs + 1, sizeof *md->set[j].stage_off))) {
            s = vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
            break;
        }
        {
            VkDeviceSize in_bytes = stage_layout(v, v->inputs, v->n_inputs, md->set[j].stage_off);
            VkDeviceSize out_bytes = stage_layout(v, v->outputs, v->n_outputs, md->set[j].stage_off + v->n_inputs);
            if (in_bytes > in_staging) in_staging = in_bytes;
            if (out_bytes > staging) staging = out_bytes;
        }
        if (v->arena_bytes > arena) arena = v->arena_bytes;
        for (uint32_t i = 0; i < m->n_modules; i++) {
            wanted[i] |= counts(m, v, i);
            for (uint32_t t = 0; counts(m, v, i) && t < m->modules[i].bindings; t++)
                if (m->modules[i].texel[t]) usage |= VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT;
        }
        j++;
    }
    free(in_set);
    if (s == VKC_OK) {
        uint32_t kernels = 0;
        for (uint32_t j = 0; j < md->n_set; j++) kernels += md->set[j].v->n_kernels;
        md->pipe_kernels = calloc(kernels + 1, sizeof *md->pipe_kernels);
        md->pipes = calloc(kernels + 1, sizeof *md->pipes);
        if (!md->pipe_kernels || !md->pipes) s = vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    }
    if (s != VKC_OK) { free(wanted); return s; }
    snprintf(md->device_name, sizeof md->device_name, "%s", md->info->props.deviceName);
    if (md->ctx->user_device) {
        md->device = md->ctx->user_device;
        if (md->ctx->user_family >= 1024) s = vkc__fail(err, VKC_ERR_ARGUMENT, "", "The caller's queue family index is out of range.");
    } else {
        s = create_device(md, &nd, err);
    }
    if (s != VKC_OK) { free(wanted); return s; }
    load_device_fns(md);
    if (md->ctx->user_device) md->queue = md->ctx->user_queue;
    else md->vk.vkGetDeviceQueue(md->device, md->info->queue_family, 0, &md->queue);
    if ((s = make_buffer(md, &md->arena, arena, usage | VK_BUFFER_USAGE_TRANSFER_SRC_BIT, 0, "arena", err)) ||
        (s = pack_weights(md, err)) || (s = make_buffer(md, &md->weights, md->weights_size, usage, 0, "weights", err)) ||
        (m->variants[0].state_bytes &&  /* one state buffer for every variant (the same state_bytes in all) */
         (s = make_buffer(md, &md->state, m->variants[0].state_bytes, usage | VK_BUFFER_USAGE_TRANSFER_SRC_BIT, 0,
                          "state", err))) ||
        (s = make_buffer(md, &md->in_staging, in_staging, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, HOST_INPUTS, "input staging",
                         err)) ||
        (s = make_buffer(md, &md->staging, staging, VK_BUFFER_USAGE_TRANSFER_DST_BIT, 1, "output staging", err))) {
        free(wanted);
        return s;
    }
    {
        VkCommandPoolCreateInfo pi = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL, 0,
                                      md->ctx->user_device ? md->ctx->user_family : md->info->queue_family};
        VkFenceCreateInfo fi = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, NULL, 0};
        VkResult r = md->vk.vkCreateCommandPool(md->device, &pi, NULL, &md->cmd_pool);
        if (r == VK_SUCCESS) r = md->vk.vkCreateFence(md->device, &fi, NULL, &md->fence);
        if (r == VK_SUCCESS && md->info->timestamp_bits) {
            VkQueryPoolCreateInfo qi = {VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, NULL, 0, VK_QUERY_TYPE_TIMESTAMP, 2, 0};
            r = md->vk.vkCreateQueryPool(md->device, &qi, NULL, &md->queries);
        }
        if (r != VK_SUCCESS) { free(wanted); return vkfail(err, r, "creating the command pool, fence and queries"); }
    }
    s = upload(md, b->weights, err);
    if (s == VKC_OK) s = build_modules(md, b, wanted, err);
    free(wanted);
    for (uint32_t j = 0; s == VKC_OK && j < md->n_set; j++) s = check_ranges(md, md->set[j].v, err);
    for (uint32_t j = 0; s == VKC_OK && j < md->n_set; j++)
        if (build_all || md->n_set == 1) s = build_variant(md, &md->set[j], err);
    return s;
}

vkc_status vkc_load(vkc_context *ctx, const void *data, size_t size, const vkc_load_options *opts, vkc_model **out,
                    vkc_error *err) {
    vkb_bundle b;
    vkc_model *md;
    vkc_status s;
    int robust;
    if (!ctx || !out) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_load needs a context and somewhere to put the model");
    *out = NULL;
    if (!(md = calloc(1, sizeof *md))) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    /* every check before any Vulkan object */
    if ((s = vkc_check_all(data, size, !(opts && opts->trusted), &b, &md->m, &md->spirv_validated, err)) != VKC_OK) {
        free(md);
        return s;
    }
    md->ctx = ctx;
    robust = !opts || opts->robust < 0 ? env_on("VKC_ROBUST", 1) : opts->robust;
    md->timeout_ns = (uint64_t)((opts && opts->timeout_s > 0 ? opts->timeout_s : 300.0) * 1e9);
    pthread_mutex_init(&md->lock, NULL);
    md->lock_made = 1;
    s = build(md, &b, opts && opts->target && opts->target[0] ? opts->target : NULL, robust, opts && opts->build_all, err);
    /* Poll the fence before blocking on it: on the H200 a blocking vkWaitForFences woke ~50 us
     * after the GPU finished (MobileNetV2: wall - GPU 114 -> 67 us); a run longer than 2 ms polls
     * up to twice the last wait (at most 20 ms: ViT-B/16, 3 ms, woke late). Not on a CPU device, where
     * polling would take a core from the driver's own threads. VKC_WAIT_SPIN_US overrides. */
    if (s == VKC_OK)
        md->spin_ns = getenv("VKC_WAIT_SPIN_US") ? (uint64_t)(atof(getenv("VKC_WAIT_SPIN_US")) * 1e3)
                      : md->info->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0 : DEFAULT_SPIN_NS;
    if (s != VKC_OK) {
        vkc_error keep;
        if (err) keep = *err;
        vkc_free(md);
        if (err) *err = keep;
        return s;
    }
    ctx->models++;
    md->counted = 1;
    *out = md;
    return ok(err);
}

void vkc_free(vkc_model *md) {
    if (!md) return;
    if (md->device && md->lost != 2) {  /* a hung device may still run: destroying its objects is undefined */
        if (md->vk.vkDeviceWaitIdle && md->own_device) md->vk.vkDeviceWaitIdle(md->device);
        for (uint32_t j = 0; j < md->n_set; j++) {
            vstate *vs = &md->set[j];
            for (uint32_t i = 0; i < vs->n_views; i++) md->vk.vkDestroyBufferView(md->device, vs->views[i], NULL);
            if (vs->pool) md->vk.vkDestroyDescriptorPool(md->device, vs->pool, NULL);
        }
        for (uint32_t p = 0; p < md->n_pipes; p++) md->vk.vkDestroyPipeline(md->device, md->pipes[p], NULL);
        for (uint32_t i = 0; md->shaders && md->layouts && md->set_layouts && i < md->m.n_modules; i++) {
            if (md->shaders[i]) md->vk.vkDestroyShaderModule(md->device, md->shaders[i], NULL);
            if (md->layouts[i]) md->vk.vkDestroyPipelineLayout(md->device, md->layouts[i], NULL);
            if (md->set_layouts[i]) md->vk.vkDestroyDescriptorSetLayout(md->device, md->set_layouts[i], NULL);
        }
        if (md->queries) md->vk.vkDestroyQueryPool(md->device, md->queries, NULL);
        if (md->fence) md->vk.vkDestroyFence(md->device, md->fence, NULL);
        if (md->cmd_pool) md->vk.vkDestroyCommandPool(md->device, md->cmd_pool, NULL);
        free_buffer(md, &md->staging);
        free_buffer(md, &md->in_staging);
        free_buffer(md, &md->weights);
        free_buffer(md, &md->arena);
        free_buffer(md, &md->state);
        if (md->own_device) md->vk.vkDestroyDevice(md->device, NULL);
    }
    if (md->counted) md->ctx->models--;
    if (md->lock_made) pthread_mutex_destroy(&md->lock);
    for (uint32_t j = 0; md->set && j < md->n_set; j++) {
        free(md->set[j].views);
        free(md->set[j].pipelines);
        free(md->set[j].stage_off);
        free(md->set[j].sets);
        for (uint32_t k = 0; k < md->set[j].n_fetches; k++) free(md->set[j].fetches[k].fetch);
        free(md->set[j].fetches);
    }
    free(md->set);
    free(md->pipes);
    free(md->pipe_kernels);
    free(md->wranges);
    free(md->shaders);
    free(md->layouts);
    free(md->set_layouts);
    vkc_manifest_free(&md->m);
    free(md);
}

/* ---- variants and running -------------------------------------------------------------------- */

static const vstate *current(const vkc_model *md) { return &md->set[md->selected]; }

uint32_t vkc_input_count(const vkc_model *md) { return md ? current(md)->v->n_inputs : 0; }
uint32_t vkc_output_count(const vkc_model *md) { return md ? current(md)->v->n_outputs : 0; }
const char *vkc_device_name(const vkc_model *md) { return md ? md->device_name : ""; }
int vkc_spirv_validated(const vkc_model *md) { return md ? md->spirv_validated : 0; }
const char *vkc_profile(const vkc_model *md) { return md ? md->set[0].v->target : ""; }
uint32_t vkc_variant_count(const vkc_model *md) { return md ? md->n_set : 0; }
const char *vkc_variant_name(const vkc_model *md, uint32_t i) { return md && i < md->n_set ? md->set[i].v->name : NULL; }
uint32_t vkc_selected_variant(const vkc_model *md) { return md ? md->selected : 0; }

static vkc_status info_of(const variant *v, int outputs, uint32_t index, vkc_tensor_info *out) {
    const m_io *io = outputs ? v->outputs : v->inputs;
    const m_tensor *t;
    if (!out || index >= (outputs ? v->n_outputs : v->n_inputs)) return VKC_ERR_ARGUMENT;
    t = &v->tensors[io[index].tensor];
    out->name = io[index].name;
    out->dtype = t->dtype;
    out->rank = t->rank;
    out->shape = t->shape;
    out->nbytes = (size_t)t->nbytes;
    return VKC_OK;
}

vkc_status vkc_input_info(const vkc_model *md, uint32_t i, vkc_tensor_info *out) {
    return md ? info_of(current(md)->v, 0, i, out) : VKC_ERR_ARGUMENT;
}
vkc_status vkc_output_info(const vkc_model *md, uint32_t i, vkc_tensor_info *out) {
    return md ? info_of(current(md)->v, 1, i, out) : VKC_ERR_ARGUMENT;
}
vkc_status vkc_variant_input_info(const vkc_model *md, uint32_t k, uint32_t i, vkc_tensor_info *out) {
    return md && k < md->n_set ? info_of(md->set[k].v, 0, i, out) : VKC_ERR_ARGUMENT;
}
vkc_status vkc_variant_output_info(const vkc_model *md, uint32_t k, uint32_t i, vkc_tensor_info *out) {
    return md && k < md->n_set ? info_of(md->set[k].v, 1, i, out) : VKC_ERR_ARGUMENT;
}

static int find(const m_io *io, uint32_t n, const char *name) {
    if (!name) return -1;
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(io[i].name, name) == 0) return (int)i;
    return -1;
}
int vkc_input_index(const vkc_model *md, const char *name) {
    return md ? find(current(md)->v->inputs, current(md)->v->n_inputs, name) : -1;
}
int vkc_output_index(const vkc_model *md, const char *name) {
    return md ? find(current(md)->v->outputs, current(md)->v->n_outputs, name) : -1;
}

vkc_status vkc_select_variant(vkc_model *md, uint32_t k, vkc_error *err) {
    if (!md || k >= md->n_set)
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "variant %u does not exist (this model has %u)", k, md ? md->n_set : 0);
    md->selected = k;
    return ok(err);
}

/* "1x3x224x224" (a scalar: "scalar"), as `--variant` spells shapes; or, tuple=1, "(1, 3, 224, 224)". */
static size_t put_shape(char *buf, size_t n, size_t used, uint32_t rank, const int64_t *dims, int tuple) {
    if (used >= n) return used;
    if (!rank) return used + (size_t)snprintf(buf + used, n - used, tuple ? "()" : "scalar");
    if (tuple) used += (size_t)snprintf(buf + used, n - used, "(");
    for (uint32_t d = 0; d < rank && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", d ? (tuple ? ", " : "x") : "", (long long)dims[d]);
    if (tuple && used < n) used += (size_t)snprintf(buf + used, n - used, rank == 1 ? ",)" : ")");
    return used;
}

static int same_shape(const m_tensor *t, const vkc_shape *s) {
    return s->rank == t->rank && (!t->rank || (s->dims && memcmp(s->dims, t->shape, t->rank * sizeof *t->shape) == 0));
}

vkc_status vkc_find_variant(const vkc_model *md, const vkc_shape *shapes, uint32_t *out, vkc_error *err) {
    const variant *v0;
    char given[512] = "", compiled[768] = "";
    size_t g = 0, c = 0;
    if (!md || !shapes || !out) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_find_variant needs a model, shapes and an out");
    for (uint32_t k = 0; k < md->n_set; k++) {
        const variant *v = md->set[k].v;
        uint32_t i = 0;
        while (i < v->n_inputs && same_shape(&v->tensors[v->inputs[i].tensor], &shapes[i])) i++;
        if (i == v->n_inputs) { *out = k; return ok(err); }
    }
    /* A variant of the profile that this device cannot run: which, and what it lacks (runtime_min's
     * Model._unmet_message). */
    for (uint32_t k = 0; k < md->m.n_variants; k++) {
        const variant *v = &md->m.variants[k];
        uint32_t i = 0, in_set = 0;
        needs one;
        char lack[1024];
        for (uint32_t q = 0; q < md->n_set; q++) in_set |= md->set[q].v == v;
        if (in_set || strcmp(v->target, md->set[0].v->target) != 0 || v->n_inputs != md->set[0].v->n_inputs) continue;
        while (i < v->n_inputs && same_shape(&v->tensors[v->inputs[i].tensor], &shapes[i])) i++;
        if (i == v->n_inputs && lacks(md->ctx, md->info, &md->m, v, md->robust, &one, lack, sizeof lack))
            return vkc__fail(err, VKC_ERR_ARGUMENT, "", "these input shapes are variant '%.80s', which device %s cannot "
                             "run: it lacks %s; run on a device that has it, or compile for a profile this device "
                             "meets (--target host)", v->name, md->device_name, lack);
    }
    /* None: the message of bundles/variants.py no_variant_message, "input 'ids' has shape (1, 64);
     * this bundle was compiled for ids=1x32, ids=1x128" (several inputs: "inputs have shapes a=(1, 2),
     * b=(3,); this bundle was compiled for a=1x2,b=3; a=2x2,b=3"). */
    v0 = md->set[0].v;
    if (v0->n_inputs == 1) {
        g = (size_t)snprintf(given, sizeof given, "input '%.60s' has shape ", v0->inputs[0].name);
        g = put_shape(given, sizeof given, g, shapes[0].rank, shapes[0].dims, 1);
    } else {
        g = (size_t)snprintf(given, sizeof given, "inputs have shapes ");
        for (uint32_t i = 0; i < v0->n_inputs && g < sizeof given; i++) {
            g += (size_t)snprintf(given + g, sizeof given - g, "%s%.60s=", i ? ", " : "", v0->inputs[i].name);
            g = put_shape(given, sizeof given, g, shapes[i].rank, shapes[i].dims, 1);
        }
    }
    for (uint32_t k = 0; k < md->n_set; k++) {
        const variant *v = md->set[k].v;
        for (uint32_t i = 0; i < v->n_inputs; i++) {
            const m_tensor *t = &v->tensors[v->inputs[i].tensor];
            if (c < sizeof compiled)
                c += (size_t)snprintf(compiled + c, sizeof compiled - c, "%s%.60s=", i ? "," : !k ? "" :
                                      v->n_inputs == 1 ? ", " : "; ", v->inputs[i].name);
            c = put_shape(compiled, sizeof compiled, c, t->rank, t->shape, 0);
        }
    }
    return vkc__fail(err, VKC_ERR_ARGUMENT, "", "%s; this bundle was compiled for %s", given, compiled);
}

/* Inputs of 4 MiB or more are copied in by four threads: one thread writes device memory across
   the bus at a fraction of the link's rate (runtime_min, which does the same, measured 1.76 ->
   1.05 ms of host time for ResNet-50's 19 MB batch-32 input on an H200). A part whose thread
   cannot be started is copied by the calling thread. */
#define COPY_SPLIT_BYTES ((size_t)4 << 20)
#define COPY_THREADS 4

typedef struct { unsigned char *dst; const unsigned char *src; size_t n; } copy_part;

static void *copy_part_run(void *arg) {
    const copy_part *p = arg;
    memcpy(p->dst, p->src, p->n);
    return NULL;
}

static void copy_in(void *dst, const void *src, size_t n) {
    if (n < COPY_SPLIT_BYTES) {
        memcpy(dst, src, n);
        return;
    }
    copy_part parts[COPY_THREADS];
    pthread_t threads[COPY_THREADS];
    int started[COPY_THREADS] = {0};
    for (int i = 0; i < COPY_THREADS; i++) {
        size_t lo = n * (size_t)i / COPY_THREADS, hi = n * (size_t)(i + 1) / COPY_THREADS;
        parts[i] = (copy_part){(unsigned char *)dst + lo, (const unsigned char *)src + lo, hi - lo};
    }
    for (int i = 1; i < COPY_THREADS; i++)
        started[i] = pthread_create(&threads[i], NULL, copy_part_run, &parts[i]) == 0;
    for (int i = 0; i < COPY_THREADS; i++)
        if (!started[i]) copy_part_run(&parts[i]);
    for (int i = 1; i < COPY_THREADS; i++)
        if (started[i]) pthread_join(threads[i], NULL);
}

static vkc_status check_inputs(const variant *m, const void *const *inputs, vkc_error *err) {
    if (m->n_inputs && !inputs) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_run needs the model's %u inputs", m->n_inputs);
    for (uint32_t i = 0; i < m->n_inputs; i++)
        if (!inputs[i] && m->tensors[m->inputs[i].tensor].nbytes)
            return vkc__fail(err, VKC_ERR_ARGUMENT, "", "input %u ('%s') is NULL", i, m->inputs[i].name);
    return VKC_OK;
}

/* One run of vs with the lock held: inputs in, the command buffer copying back the outputs with
 * fetch[i] (NULL: all), and those of them with outputs[i] out (outputs may be NULL). */
static vkc_status run_locked(vkc_model *md, vstate *vs, const void *const *inputs, void *const *outputs,
                             const uint8_t *fetch, vkc_error *err) {
    const variant *m = vs->v;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    vkc_status s = vs->built ? VKC_OK : build_variant(md, vs, err);
    if (s == VKC_OK) s = fetching(md, vs, fetch, &cmd, err);
    for (uint32_t i = 0; s == VKC_OK && i < m->n_inputs; i++)  /* written in place: no copy */
        if (inputs[i] != (const void *)input_at(md, vs, i))
            copy_in(input_at(md, vs, i), inputs[i], (size_t)m->tensors[m->inputs[i].tensor].nbytes);
    if (s == VKC_OK) s = submit_wait(md, cmd, "running the model", err);
    if (s == VKC_OK && outputs)
        for (uint32_t i = 0; i < m->n_outputs; i++)
            if (outputs[i] && (!fetch || fetch[i]) && outputs[i] != (void *)output_at(md, vs, i))
                memcpy(outputs[i], output_at(md, vs, i), (size_t)m->tensors[m->outputs[i].tensor].nbytes);
    return s;
}

static vkc_status run_variant(vkc_model *md, vstate *vs, const void *const *inputs, void *const *outputs,
                              const uint8_t *fetch, vkc_error *err) {
    vkc_status s = check_inputs(vs->v, inputs, err);
    if (s != VKC_OK) return s;
    pthread_mutex_lock(&md->lock);
    s = run_locked(md, vs, inputs, outputs, fetch, err);
    pthread_mutex_unlock(&md->lock);
    return s == VKC_OK ? ok(err) : s;
}

void *vkc_input_data(vkc_model *md, uint32_t index) {
    const vstate *vs = md ? &md->set[md->selected] : NULL;
    return vs && index < vs->v->n_inputs ? (void *)input_at(md, vs, index) : NULL;
}

const void *vkc_output_data(const vkc_model *md, uint32_t index) {
    const vstate *vs = md ? &md->set[md->selected] : NULL;
    return vs && index < vs->v->n_outputs ? (const void *)output_at(md, vs, index) : NULL;
}

vkc_status vkc_run(vkc_model *md, const void *const *inputs, void *const *outputs, vkc_error *err) {
    if (!md) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_run needs a model");
    return run_variant(md, &md->set[md->selected], inputs, outputs, NULL, err);
}

vkc_status vkc_run_variant(vkc_model *md, uint32_t k, const void *const *inputs, void *const *outputs, vkc_error *err) {
    if (!md || k >= md->n_set)
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "variant %u does not exist (this model has %u)", k, md ? md->n_set : 0);
    return run_variant(md, &md->set[k], inputs, outputs, NULL, err);
}

vkc_status vkc__run_part(vkc_model *md, uint32_t k, const void *const *inputs, uint32_t out, uint64_t offset,
                         void *dst, size_t n, vkc_error *err) {
    uint8_t *fetch;
    vstate *vs;
    vkc_status s;
    if (!md || k >= md->n_set) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "variant %u does not exist", k);
    vs = &md->set[k];
    if (out < vs->v->n_outputs && offset + n > vs->v->tensors[vs->v->outputs[out].tensor].nbytes)
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "bytes %llu..%llu are past the end of output '%s'",
                         (unsigned long long)offset, (unsigned long long)(offset + n), vs->v->outputs[out].name);
    if ((s = check_inputs(vs->v, inputs, err)) != VKC_OK) return s;
    if (!(fetch = calloc(vs->v->n_outputs + 1, 1))) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    if (out < vs->v->n_outputs) fetch[out] = 1;
    pthread_mutex_lock(&md->lock);
    s = run_locked(md, vs, inputs, NULL, fetch, err);
    if (s == VKC_OK && out < vs->v->n_outputs) memcpy(dst, output_at(md, vs, out) + offset, n);
    pthread_mutex_unlock(&md->lock);
    free(fetch);
    return s == VKC_OK ? ok(err) : s;
}

vkc_status vkc_run_fetch(vkc_model *md, uint32_t k, const void *const *inputs, void *const *outputs, vkc_error *err) {
    uint8_t *fetch;
    vkc_status s;
    if (!md || k >= md->n_set)
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "variant %u does not exist (this model has %u)", k, md ? md->n_set : 0);
    if (!(fetch = calloc(md->set[k].v->n_outputs + 1, 1))) return vkc__fail(err, VKC_ERR_OUT_OF_MEMORY, "", "out of memory");
    for (uint32_t i = 0; outputs && i < md->set[k].v->n_outputs; i++) fetch[i] = outputs[i] != NULL;
    s = run_variant(md, &md->set[k], inputs, outputs, fetch, err);
    free(fetch);
    return s;
}

vkc_status vkc_run_shapes(vkc_model *md, const vkc_shape *shapes, const void *const *inputs, void *const *outputs,
                          vkc_error *err) {
    uint32_t k;
    vkc_status s = vkc_find_variant(md, shapes, &k, err);
    return s == VKC_OK ? run_variant(md, &md->set[k], inputs, outputs, NULL, err) : s;
}

vkc_status vkc_run_named(vkc_model *md, const vkc_buffer *inputs, size_t n_inputs, vkc_buffer *outputs, size_t n_outputs,
                         vkc_error *err) {
    const void *ins[256];
    void *outs[256];
    const variant *m;
    if (!md) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_run_named needs a model");
    m = current(md)->v;
    if (m->n_inputs > 256 || m->n_outputs > 256)
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_run_named handles at most 256 inputs and outputs; use vkc_run");
    memset(ins, 0, sizeof ins);
    memset(outs, 0, sizeof outs);
    for (size_t i = 0; i < n_inputs; i++) {
        int k = vkc_input_index(md, inputs[i].name);
        if (k < 0) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "unknown input '%.100s'", inputs[i].name ? inputs[i].name : "(null)");
        if (ins[k]) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "input '%s' is given twice", m->inputs[k].name);
        if (inputs[i].nbytes != m->tensors[m->inputs[k].tensor].nbytes)
            return vkc__fail(err, VKC_ERR_ARGUMENT, "", "input '%s': expected %llu bytes, got %llu", m->inputs[k].name,
                             (unsigned long long)m->tensors[m->inputs[k].tensor].nbytes, (unsigned long long)inputs[i].nbytes);
        ins[k] = inputs[i].data ? inputs[i].data : (const void *)"";
    }
    for (uint32_t k = 0; k < m->n_inputs; k++)
        if (!ins[k]) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "missing input '%s'", m->inputs[k].name);
    for (size_t i = 0; i < n_outputs; i++) {
        int k = vkc_output_index(md, outputs[i].name);
        if (k < 0) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "unknown output '%.100s'", outputs[i].name ? outputs[i].name : "(null)");
        if (outputs[i].nbytes != m->tensors[m->outputs[k].tensor].nbytes || !outputs[i].data)
            return vkc__fail(err, VKC_ERR_ARGUMENT, "", "output '%s': expected a buffer of %llu bytes, got %llu",
                             m->outputs[k].name, (unsigned long long)m->tensors[m->outputs[k].tensor].nbytes,
                             (unsigned long long)outputs[i].nbytes);
        outs[k] = outputs[i].data;
    }
    return vkc_run(md, ins, outs, err);
}

void vkc_device_bytes(const vkc_model *md, uint64_t *arena, uint64_t *weights) {
    if (arena) *arena = md ? md->arena.size : 0;
    if (weights) *weights = md ? md->weights_size : 0;
}

double vkc_last_gpu_ns(vkc_model *md) {
    uint64_t stamps[2];
    if (!md || !md->queries) return -1;
    if (md->vk.vkGetQueryPoolResults(md->device, md->queries, 0, 2, sizeof stamps, stamps, 8,
                                     VK_QUERY_RESULT_64_BIT) != VK_SUCCESS) return -1;
    {
        uint64_t mask = md->info->timestamp_bits >= 64 ? ~0ull : ((1ull << md->info->timestamp_bits) - 1);
        return (double)((stamps[1] - stamps[0]) & mask) * md->info->props.limits.timestampPeriod;
    }
}

/* ---- state (format 1.3) ---------------------------------------------------------------------- */

/* Every variant holds the same state, at the same bytes (check `manifest`): the first one's serves. */
static const variant *stateful(const vkc_model *md) { return md->set[0].v; }

uint32_t vkc_state_count(const vkc_model *md) { return md ? stateful(md)->n_state : 0; }

vkc_status vkc_state_info(const vkc_model *md, uint32_t i, vkc_tensor_info *out) {
    const m_tensor *t;
    if (!md || !out || i >= stateful(md)->n_state) return VKC_ERR_ARGUMENT;
    t = &stateful(md)->tensors[stateful(md)->state[i].tensor];
    out->name = stateful(md)->state[i].name;
    out->dtype = t->dtype;
    out->rank = t->rank;
    out->shape = t->shape;
    out->nbytes = (size_t)t->nbytes;
    return VKC_OK;
}

int vkc_state_index(const vkc_model *md, const char *name) {
    if (!md || !name) return -1;
    for (uint32_t i = 0; i < stateful(md)->n_state; i++)
        if (strcmp(stateful(md)->state[i].name, name) == 0) return (int)i;
    return -1;
}

/* State tensor `name`, its size checked against `nbytes` (runtime_min's messages). */
static vkc_status state_tensor(const vkc_model *md, const char *name, const void *data, size_t nbytes,
                               const m_tensor **out, vkc_error *err) {
    const variant *v;
    int i;
    if (!md) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "the state functions need a model");
    v = stateful(md);
    if ((i = vkc_state_index(md, name)) < 0) {
        char held[512] = "none";
        size_t used = 0;
        for (uint32_t k = 0; k < v->n_state && used < sizeof held; k++)
            used += (size_t)snprintf(held + used, sizeof held - used, "%s'%.60s'", k ? ", " : "", v->state[k].name);
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "'%.100s' is not a state of this model; its state: %s",
                         name ? name : "(null)", held);
    }
    *out = &v->tensors[v->state[i].tensor];
    if (nbytes != (*out)->nbytes || (!data && nbytes)) {
        char shape[256];
        size_t used = (size_t)snprintf(shape, sizeof shape, "%s[", vkc_dtype_name((*out)->dtype));
        for (uint32_t d = 0; d < (*out)->rank && used < sizeof shape; d++)
            used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%lld", d ? ", " : "", (long long)(*out)->shape[d]);
        if (used < sizeof shape) snprintf(shape + used, sizeof shape - used, "]");
        return vkc__fail(err, VKC_ERR_ARGUMENT, "", "state '%s': expected a buffer of %llu bytes (%s), got %zu%s",
                         name, (unsigned long long)(*out)->nbytes, shape, nbytes, data ? "" : " at NULL");
    }
    return VKC_OK;
}

vkc_status vkc_reset_state(vkc_model *md, vkc_error *err) {
    vkc_status s = VKC_OK;
    if (!md) return vkc__fail(err, VKC_ERR_ARGUMENT, "", "vkc_reset_state needs a model");
    pthread_mutex_lock(&md->lock);
    if (md->state.handle) s = one_shot(md, "zeroing the state", rec_zero_state, NULL, err);
    pthread_mutex_unlock(&md->lock);
    return s == VKC_OK ? ok(err) : s;
}

typedef struct state_copy { VkBuffer src, dst; VkBufferCopy region; } state_copy;

/* The copy, then its writes made visible to the host (a read) and to the next run's shaders (a write). */
static void rec_state_copy(vkc_model *md, VkCommandBuffer cmd, void *arg) {
    state_copy *c = arg;
    md->vk.vkCmdCopyBuffer(cmd, c->src, c->dst, 1, &c->region);
    barrier(md, cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT);
}

/* State tensor t to `out` (read) or from `in` (write), through a host-visible buffer of its size. */
static vkc_status state_transfer(vkc_model *md, const m_tensor *t, void *out, const void *in, vkc_error *err) {
    buffer staging;
    vkc_status s;
    if (!t->nbytes) return ok(err);
    memset(&staging, 0, sizeof staging);
    pthread_mutex_lock(&md->lock);
    s = make_buffer(md, &staging, t->nbytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 1,
                    "state staging", err);
    if (s == VKC_OK) {
        state_copy c = {out ? md->state.handle : staging.handle, out ? staging.handle : md->state.handle,
                        {out ? t->offset : 0, out ? 0 : t->offset, t->nbytes}};
        if (in) memcpy(staging.mapped, in, (size_t)t->nbytes);
        s = one_shot(md, out ? "reading the state" : "writing the state", rec_state_copy, &c, err);
        if (s == VKC_OK && out) memcpy(out, staging.mapped, (size_t)t->nbytes);
    }
    free_buffer(md, &staging);
    pthread_mutex_unlock(&md->lock);
    return s == VKC_OK ? ok(err) : s;
}

vkc_status vkc_read_state(vkc_model *md, const char *name, void *data, size_t nbytes, vkc_error *err) {
    const m_tensor *t;
    vkc_status s = state_tensor(md, name, data, nbytes, &t, err);
    return s == VKC_OK ? state_transfer(md, t, data, NULL, err) : s;
}

vkc_status vkc_write_state(vkc_model *md, const char *name, const void *data, size_t nbytes, vkc_error *err) {
    const m_tensor *t;
    vkc_status s = state_tensor(md, name, data, nbytes, &t, err);
    return s == VKC_OK ? state_transfer(md, t, NULL, data, err) : s;
}
