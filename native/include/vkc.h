/* vkc.h: the native vkc runtime. Loads a `.vkb` bundle (bundles/FORMAT.md) from memory and replays it
 * on a Vulkan device, as runtime_min does, for apps without Python (Android, C/C++ programs).
 *
 *     vkc_context *ctx;  vkc_model *m;  vkc_error e;
 *     if (vkc_open(NULL, &ctx, &e)) { fprintf(stderr, "%s\n", e.message); return 1; }
 *     if (vkc_load(ctx, data, size, NULL, &m, &e)) { ... e.check names the failed check ... }
 *     const void *ins[1] = {x};  void *outs[1] = {y};
 *     vkc_run(m, ins, outs, &e);                     // by index; vkc_run_named() by name
 *     vkc_free(m);  vkc_close(ctx);
 *
 * `data` (an mmap of the file, or AAsset_getBuffer of an uncompressed asset) is only read during
 * vkc_load: the weights go from it to the device once, and nothing of it is kept afterwards.
 * Every offset, size, binding and dispatch of the bundle is checked (the same checks, by the same
 * names, as the Python reader) before any Vulkan object is created.
 *
 * Threads: a model may be run from several threads; its runs are serialized by a lock. Distinct
 * models run side by side (each has its own VkDevice unless the caller provides one).
 *
 * Variants (format 1.2): a bundle may hold several kernel sets, one per (device profile, input
 * shapes) pair. vkc_load picks the profile for the device (FORMAT.md "Which variant runs"; or the
 * one named by vkc_load_options.target); the variants of that profile are the model's shape set.
 * vkc_run_shapes runs the variant whose input shapes equal the given ones; vkc_run runs the
 * selected one (vkc_select_variant; the first by default). A variant's pipelines are built on its
 * first run (all at load with build_all); one arena, sized for the largest variant, serves all.
 *
 * State (format 1.3): a bundle may keep tensors on the device from one run to the next (a decoder's
 * KV cache). They are not inputs or outputs of a run: one buffer holds them for every variant, zeros
 * at load, and each run reads what the run before it left. vkc_reset_state zeros them again (a new
 * sequence); vkc_read_state / vkc_write_state copy one out or in by name.
 */
#ifndef VKC_H
#define VKC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VKC_VERSION "0.3.0"  /* 0.2: format 1.2 variants; 0.3: format 1.3 state, vkc_run_fetch, vkc_generate */

typedef enum vkc_status {
    VKC_OK = 0,
    VKC_ERR_ARGUMENT,        /* a NULL pointer, an unknown input name, a wrong byte count */
    VKC_ERR_BUNDLE,          /* the bundle failed a check; vkc_error.check names it ("section checksum",
                              * "manifest json", "manifest", "spirv interface", "barrier", ...) */
    VKC_ERR_NO_LOADER,       /* libvulkan could not be loaded */
    VKC_ERR_NO_DEVICE,       /* no Vulkan device (or not the requested one) can run the bundle */
    VKC_ERR_VULKAN,          /* a Vulkan call failed; the message names the step and the VkResult */
    VKC_ERR_DEVICE_LOST,     /* the device was lost or a run timed out: load the model again */
    VKC_ERR_OUT_OF_MEMORY    /* a host allocation failed */
} vkc_status;

typedef struct vkc_error {
    vkc_status code;
    char check[40];          /* for VKC_ERR_BUNDLE: the check's name (FORMAT.md); else "" */
    char message[1024];      /* a full sentence: what failed, the values involved, what to do */
} vkc_error;

/* Element types, in bundles/dtypes.py order. */
typedef enum vkc_dtype {
    VKC_FLOAT32 = 0, VKC_FLOAT16, VKC_INT32, VKC_INT64, VKC_UINT8, VKC_INT8, VKC_BOOL,
    VKC_FLOAT64, VKC_INT16, VKC_UINT16, VKC_UINT32, VKC_UINT64,
    /* format 1.2: ONNX's low-precision types, in memory as ONNX packs them */
    VKC_BFLOAT16, VKC_FLOAT8_E4M3FN, VKC_FLOAT8_E4M3FNUZ, VKC_FLOAT8_E5M2, VKC_FLOAT8_E5M2FNUZ,
    VKC_UINT4, VKC_INT4, VKC_FLOAT4_E2M1FN, VKC_FLOAT8_E8M0FNU, VKC_UINT2, VKC_INT2, VKC_DTYPE_COUNT
} vkc_dtype;

const char *vkc_dtype_name(vkc_dtype dtype);  /* "float32", ... (the manifest's and numpy's names) */
size_t vkc_dtype_size(vkc_dtype dtype);       /* bytes per element (bool: 1; 1 for the 4- and 2-bit types) */
/* Bytes of `count` elements: ceil(count * bits / 8) (int4: two per byte, the first in the low nibble). */
uint64_t vkc_dtype_nbytes(vkc_dtype dtype, uint64_t count);

typedef struct vkc_open_options {
    /* Device choice: an index or a name substring; NULL means $VKC_DEVICE, else the best type
     * that can run the bundle: discrete GPU, integrated, virtual, CPU (runtime_min's order). */
    const char *device;
    /* 1: the Khronos validation layer with synchronization validation and a debug messenger that
     * prints to stderr and counts (vkc_validation_messages). 0: off. -1: $VKC_VALIDATION. */
    int validation;
    /* The caller's Vulkan objects, all optional. With `instance` (and its vkGetInstanceProcAddr),
     * vkc uses that instance and does not destroy it. With `physical_device`, `device`, `queue`
     * and `queue_family` too, models are loaded onto that device: vkc checks the physical
     * device's features and limits but cannot see which features the caller enabled, so the
     * caller must have enabled those the bundle needs (vkc_required_features) and must not use
     * `queue` while a vkc_run is in flight. */
    void *instance;                  /* VkInstance */
    void *get_instance_proc_addr;    /* PFN_vkGetInstanceProcAddr; NULL: dlopen the loader */
    void *physical_device;           /* VkPhysicalDevice */
    void *device_handle;             /* VkDevice */
    void *queue;                     /* VkQueue */
    uint32_t queue_family;
} vkc_open_options;

typedef struct vkc_load_options {
    int robust;            /* robustBufferAccess: 1 on, 0 off, -1 default ($VKC_ROBUST, else on) */
    double timeout_s;      /* a run taking longer is an error (device lost); 0: 300 s */
    /* The profile (a variant's target.name) to run instead of the one the device choice rule picks;
     * NULL: the rule. It must exist in the bundle and the device must meet its requirements. */
    const char *target;
    int build_all;         /* 1: build every variant's pipelines at load; 0: each on its first run */
    /* 1: the app built this bundle itself: skip SPIR-V validation. 0 (default): every module passes
     * SPIRV-Tools' validator before the driver sees it (an invalid module can crash a driver);
     * a refused module fails the check "spirv validation", naming the module and the validator's
     * message. The library (libSPIRV-Tools-shared.so, or $VKC_SPIRV_TOOLS) is dlopened; without
     * it modules run unvalidated and one line on stderr says so (vkc_spirv_validated tells). */
    int trusted;
} vkc_load_options;

typedef struct vkc_context vkc_context;
typedef struct vkc_model vkc_model;

/* One input's shape, for picking a variant (vkc_find_variant, vkc_run_shapes). */
typedef struct vkc_shape {
    uint32_t rank;
    const int64_t *dims;   /* rank entries (may be NULL for rank 0) */
} vkc_shape;

typedef struct vkc_tensor_info {
    const char *name;      /* the ONNX name */
    vkc_dtype dtype;
    uint32_t rank;
    const int64_t *shape;
    size_t nbytes;         /* what vkc_run reads (inputs) or writes (outputs) */
} vkc_tensor_info;

/* A Vulkan instance (or the caller's), the device list. opts may be NULL. Open one context and keep
 * it for the process's models: NVIDIA's driver refuses a 31st vkCreateInstance in one process
 * (VK_ERROR_INCOMPATIBLE_DRIVER, measured on an H200), which opening a context per model reaches. */
vkc_status vkc_open(const vkc_open_options *opts, vkc_context **out, vkc_error *err);
void vkc_close(vkc_context *ctx);           /* after every model of it was freed */

/* Check `data` (the whole .vkb file) and build the model on a device. opts may be NULL. */
vkc_status vkc_load(vkc_context *ctx, const void *data, size_t size, const vkc_load_options *opts,
                    vkc_model **out, vkc_error *err);
void vkc_free(vkc_model *model);

/* Every check vkc_load applies to the bytes (container, manifest, module interfaces, barriers, SPIR-V
 * validation), and nothing else: no Vulkan. For tools and fuzzing. */
vkc_status vkc_check(const void *data, size_t size, vkc_error *err);

/* 1 when every module of the model passed SPIRV-Tools' validator at load; 0 when it was loaded
 * trusted or no validator library was found. */
int vkc_spirv_validated(const vkc_model *model);
/* The validator library's version, or NULL when none can be loaded (modules then run unvalidated). */
const char *vkc_spirv_validator(void);

uint32_t vkc_input_count(const vkc_model *model);
uint32_t vkc_output_count(const vkc_model *model);
/* Inputs and outputs of the selected variant (names and dtypes are the same in every variant). */
vkc_status vkc_input_info(const vkc_model *model, uint32_t index, vkc_tensor_info *out);
vkc_status vkc_output_info(const vkc_model *model, uint32_t index, vkc_tensor_info *out);
int vkc_input_index(const vkc_model *model, const char *name);   /* -1 when absent */
int vkc_output_index(const vkc_model *model, const char *name);
const char *vkc_device_name(const vkc_model *model);

/* Run once. inputs[i] holds input i (vkc_input_info(i).nbytes bytes, little-endian, C order);
 * outputs[i] receives output i (NULL: skip that output). */
vkc_status vkc_run(vkc_model *model, const void *const *inputs, void *const *outputs, vkc_error *err);

/* In place I/O, for the selected variant: the host-visible memory the next run copies input i from,
 * and the memory a run leaves output i in. An app that writes input i there (a decoded camera
 * frame, say) and passes that same pointer as inputs[i] saves vkc_run its copy; output i can be
 * read there after the run instead of being copied out.
 * Rules (the runtime cannot enforce them on raw pointers):
 * - Lifetime: valid until the next vkc_select_variant, vkc_run_variant or vkc_run_shapes of another
 *   variant, or vkc_free; after vkc_free the memory is unmapped and freed: never touch it again.
 * - Never write it, or read outputs there, while a run of the model is in flight: vkc_run reads
 *   the inputs there and writes the outputs there.
 * - It is one memory for every run of the model: any vkc_run copies its own inputs into it. A
 *   thread using it in place holds a lock of the app's across writing, vkc_run and reading, and
 *   every other thread that runs the model takes that lock too (or each thread loads its own
 *   model). Runs themselves are serialized by the model's lock; the in-place memory is not. */
void *vkc_input_data(vkc_model *model, uint32_t index);       /* NULL: no such input */
const void *vkc_output_data(const vkc_model *model, uint32_t index);

typedef struct vkc_buffer {
    const char *name;
    void *data;            /* for an input, only read */
    size_t nbytes;         /* must equal the tensor's nbytes */
} vkc_buffer;

/* Run once with buffers by name: every input once; any subset of the outputs. */
vkc_status vkc_run_named(vkc_model *model, const vkc_buffer *inputs, size_t n_inputs, vkc_buffer *outputs,
                         size_t n_outputs, vkc_error *err);

/* ---- variants (format 1.2; a 1.1 bundle is one variant) ---- */

const char *vkc_profile(const vkc_model *model);                     /* the chosen target.name */
uint32_t vkc_variant_count(const vkc_model *model);                  /* variants of that profile */
const char *vkc_variant_name(const vkc_model *model, uint32_t variant);
vkc_status vkc_variant_input_info(const vkc_model *model, uint32_t variant, uint32_t index, vkc_tensor_info *out);
vkc_status vkc_variant_output_info(const vkc_model *model, uint32_t variant, uint32_t index, vkc_tensor_info *out);

/* The variant whose input shapes equal `shapes` (shapes[i] is input i's) exactly. None:
 * VKC_ERR_ARGUMENT, the message naming the shapes given and the shapes compiled. */
vkc_status vkc_find_variant(const vkc_model *model, const vkc_shape *shapes, uint32_t *variant, vkc_error *err);

/* The variant vkc_run, vkc_run_named and vkc_input_info/vkc_output_info use (0 after load). Not to be
 * called while another thread uses the model; vkc_run_shapes needs no selection. */
vkc_status vkc_select_variant(vkc_model *model, uint32_t variant, vkc_error *err);
uint32_t vkc_selected_variant(const vkc_model *model);

/* Run one variant as vkc_run does: inputs[i] holds that variant's input i, outputs[i] receives its
 * output i (vkc_variant_input_info / vkc_variant_output_info). The selection is left as it was. */
vkc_status vkc_run_variant(vkc_model *model, uint32_t variant, const void *const *inputs, void *const *outputs,
                           vkc_error *err);
/* vkc_run_variant copying back from the device only the outputs whose outputs[i] is not NULL (outputs
 * NULL: none); the others are computed and stay on the device (a decode step's token id without its
 * logits; a prefill chunk's nothing). Each set of outputs asked for records a command buffer of its
 * own on its first run, kept until vkc_free. An output not fetched keeps, at vkc_output_data, what
 * an earlier run left there. */
vkc_status vkc_run_fetch(vkc_model *model, uint32_t variant, const void *const *inputs, void *const *outputs,
                         vkc_error *err);
/* vkc_find_variant, then vkc_run_variant. */
vkc_status vkc_run_shapes(vkc_model *model, const vkc_shape *shapes, const void *const *inputs,
                          void *const *outputs, vkc_error *err);

/* GPU time of the last run (timestamps around the whole command buffer), in ns; -1 when the queue
 * has no timestamps. */
double vkc_last_gpu_ns(vkc_model *model);

/* Device memory the model holds: the arena (the largest variant's) and the weights uploaded (the
 * ranges its shape set uses, packed; a flat bundle's whole WEIGHTS section). */
void vkc_device_bytes(const vkc_model *model, uint64_t *arena, uint64_t *weights);

/* ---- state (format 1.3; a bundle without state has none) ---- */

uint32_t vkc_state_count(const vkc_model *model);
/* State tensor i: its name (the ONNX graph input it replaces), dtype, shape and nbytes. */
vkc_status vkc_state_info(const vkc_model *model, uint32_t index, vkc_tensor_info *out);
int vkc_state_index(const vkc_model *model, const char *name);   /* -1 when absent */
/* Every state tensor back to zeros, as at load. */
vkc_status vkc_reset_state(vkc_model *model, vkc_error *err);
/* Copy state tensor `name` out as the last run left it, or in for the next run. `nbytes` must be its
 * vkc_state_info nbytes; an unknown name or another size is VKC_ERR_ARGUMENT, the message naming the
 * model's state or the size expected. Serialized with runs by the model's lock. */
vkc_status vkc_read_state(vkc_model *model, const char *name, void *data, size_t nbytes, vkc_error *err);
vkc_status vkc_write_state(vkc_model *model, const char *name, const void *data, size_t nbytes, vkc_error *err);

/* ---- token generation with a decoder whose KV cache is the state (runtime_min.generate) ---- */

/* Options of vkc_generate; all zeros: greedy, the default names, no end token. */
typedef struct vkc_generate_options {
    const char *ids;        /* the token ids input, int64 [1, S]; NULL: "input_ids" */
    const char *position;   /* the cache rows already filled, int64 [1]; NULL: "position" */
    const char *logits;     /* the output [1, S, vocab], float32 or float16; NULL: "logits" */
    double temperature;     /* 0: greedy (the argmax, ties to the first index); > 0: sample */
    uint32_t top_k;         /* sample from the top_k likeliest tokens; 0: all */
    double top_p;           /* ... the fewest of them whose probability reaches top_p, in (0, 1]; 0: 1 */
    int seeded;             /* 1: draws from `seed` (the same tokens for the same seed); 0: from the clock */
    uint64_t seed;
    int has_eos;            /* 1: stop after the token eos_token_id */
    int64_t eos_token_id;
    uint32_t max_context;   /* the cache rows; 0: the smallest second-last axis of the state tensors */
    /* Each token as it comes (streaming), may be NULL; a nonzero return stops the generation there. */
    int (*on_token)(void *user, int64_t token);
    void *user;
    /* Fed instead of `position` where the bundle has no such input (onnxruntime-genai's model
     * builder): int64 [1, N], the first rows filled + S entries 1, the rest 0; NULL: "attention_mask" */
    const char *attention_mask;
} vkc_generate_options;

/* Up to max_new_tokens token ids after `prompt` (n_prompt ids), into tokens (room for max_new_tokens;
 * the inputs fed: the ids and `position`, or the ids and `attention_mask` [1, N] where the bundle
 * has no `position`, N bounding the sequence like the cache's rows;
 * may be NULL with on_token), their count into *n_tokens; stops after eos_token_id. The state is
 * reset first: each call is a new sequence. The prompt runs in chunks of the longest variant
 * (input ids length S) that fits what is left, then one token a run on the S = 1 variant; each run
 * replays that variant's command buffer copying back only the last row of logits, or with greedy
 * decoding and an output "<logits>_argmax" (vkc compile --argmax-output logits) only that int64, or
 * sampling from top_k below the vocabulary with outputs "<logits>_topk_values" / "_topk_indices" of
 * at least top_k (--top-k-output logits:K) only those, the same draws (and prefill chunks before
 * the last nothing). Refused before anything runs, one line each: an empty
 * prompt, a bundle without state or without those inputs and output (or with other inputs), no
 * S = 1 variant, prompt + max_new_tokens past the cache's rows, sampling options out of range.
 * The state is one per model: generate on one model from one thread at a time. */
vkc_status vkc_generate(vkc_model *model, const int64_t *prompt, size_t n_prompt, uint32_t max_new_tokens,
                        const vkc_generate_options *opts, int64_t *tokens, uint32_t *n_tokens, vkc_error *err);

/* Warnings and errors the validation layer reported through vkc's messenger (validation on). */
uint32_t vkc_validation_messages(const vkc_context *ctx);

#ifdef __cplusplus
}
#endif
#endif /* VKC_H */
