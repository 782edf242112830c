/* JNI layer of dev.vkc.VkcModel (VkcModel.kt): load a bundle from an uncompressed APK asset in place
 * (AAsset_getBuffer: the weights go from the asset's mapping to the device, no copy in between),
 * run it with direct ByteBuffers, close it. Errors become dev.vkc.VkcException with the runtime's
 * message (which names the failed bundle check).
 *
 * Built by native/android/CMakeLists.txt with the NDK; on Linux with -DVKC_JNI_DESKTOP against the
 * JDK's jni.h (tests/native), which leaves out the AssetManager entry point. */
#include <jni.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef VKC_JNI_DESKTOP
#include <android/asset_manager.h>
#include <android/asset_manager_jni.h>
#endif

#include "vkc.h"

typedef struct handle {
    vkc_context *ctx;
    vkc_model *model;
} handle;

static void throw_vkc(JNIEnv *env, const char *message) {
    jclass cls = (*env)->FindClass(env, "dev/vkc/VkcException");
    if (!cls) { (*env)->ExceptionClear(env); cls = (*env)->FindClass(env, "java/lang/RuntimeException"); }
    if (cls) (*env)->ThrowNew(env, cls, message);
}

static jlong load_bytes(JNIEnv *env, const void *data, size_t size) {
    handle *h = calloc(1, sizeof *h);
    vkc_error e;
    if (!h) { throw_vkc(env, "out of memory"); return 0; }
    if (vkc_open(NULL, &h->ctx, &e) != VKC_OK || vkc_load(h->ctx, data, size, NULL, &h->model, &e) != VKC_OK) {
        vkc_close(h->ctx);
        free(h);
        throw_vkc(env, e.message);
        return 0;
    }
    return (jlong)(intptr_t)h;
}

#ifndef VKC_JNI_DESKTOP
JNIEXPORT jlong JNICALL Java_dev_vkc_VkcModel_nativeLoadAsset(JNIEnv *env, jclass cls, jobject assets, jstring name) {
    AAssetManager *mgr = AAssetManager_fromJava(env, assets);
    const char *path = (*env)->GetStringUTFChars(env, name, NULL);
    AAsset *asset = mgr && path ? AAssetManager_open(mgr, path, AASSET_MODE_BUFFER) : NULL;
    const void *data;
    jlong h = 0;
    (void)cls;
    if (!asset) {
        throw_vkc(env, "cannot open the asset (is it in src/main/assets?)");
    } else if (!(data = AAsset_getBuffer(asset))) {
        throw_vkc(env, "cannot map the asset; store .vkb assets uncompressed (androidResources { noCompress += \"vkb\" })");
    } else {
        h = load_bytes(env, data, (size_t)AAsset_getLength64(asset));
    }
    if (asset) AAsset_close(asset);  /* the model keeps nothing of the asset */
    if (path) (*env)->ReleaseStringUTFChars(env, name, path);
    return h;
}
#endif

JNIEXPORT jlong JNICALL Java_dev_vkc_VkcModel_nativeLoadBuffer(JNIEnv *env, jclass cls, jobject buffer) {
    void *data = (*env)->GetDirectBufferAddress(env, buffer);
    jlong size = (*env)->GetDirectBufferCapacity(env, buffer);
    (void)cls;
    if (!data || size < 0) { throw_vkc(env, "the bundle must be a direct ByteBuffer"); return 0; }
    return load_bytes(env, data, (size_t)size);
}

static handle *get(JNIEnv *env, jlong ptr) {
    if (!ptr) throw_vkc(env, "this model was closed");
    return (handle *)(intptr_t)ptr;
}

JNIEXPORT jint JNICALL Java_dev_vkc_VkcModel_nativeCount(JNIEnv *env, jclass cls, jlong ptr, jboolean outputs) {
    handle *h = get(env, ptr);
    (void)cls;
    return h ? (jint)(outputs ? vkc_output_count(h->model) : vkc_input_count(h->model)) : 0;
}

/* Input or output i of a variant (of the model's shape set; names and dtypes are the same in all). */
static int info(JNIEnv *env, jlong ptr, jint variant, jboolean outputs, jint i, vkc_tensor_info *t) {
    handle *h = get(env, ptr);
    if (!h) return 0;
    if ((outputs ? vkc_variant_output_info(h->model, (uint32_t)variant, (uint32_t)i, t)
                 : vkc_variant_input_info(h->model, (uint32_t)variant, (uint32_t)i, t)) != VKC_OK) {
        throw_vkc(env, "no such variant, input or output index");
        return 0;
    }
    return 1;
}

JNIEXPORT jint JNICALL Java_dev_vkc_VkcModel_nativeVariantCount(JNIEnv *env, jclass cls, jlong ptr) {
    handle *h = get(env, ptr);
    (void)cls;
    return h ? (jint)vkc_variant_count(h->model) : 0;
}

JNIEXPORT jstring JNICALL Java_dev_vkc_VkcModel_nativeProfile(JNIEnv *env, jclass cls, jlong ptr) {
    handle *h = get(env, ptr);
    (void)cls;
    return h ? (*env)->NewStringUTF(env, vkc_profile(h->model)) : NULL;
}

/* The variant compiled for these input shapes (one long[] per input, in input order). */
JNIEXPORT jint JNICALL Java_dev_vkc_VkcModel_nativeFind(JNIEnv *env, jclass cls, jlong ptr, jobjectArray shapes) {
    handle *h = get(env, ptr);
    vkc_shape *s;
    uint32_t n, k = 0;
    jint found = -1;
    vkc_error e;
    (void)cls;
    if (!h) return -1;
    n = vkc_input_count(h->model);
    if ((*env)->GetArrayLength(env, shapes) != (jsize)n) { throw_vkc(env, "find needs one shape per input"); return -1; }
    if (!(s = calloc(n + 1, sizeof *s))) { throw_vkc(env, "out of memory"); return -1; }
    for (uint32_t i = 0; i < n; i++) {
        jlongArray a = (jlongArray)(*env)->GetObjectArrayElement(env, shapes, (jsize)i);
        jsize rank = a ? (*env)->GetArrayLength(env, a) : 0;
        int64_t *dims = malloc(((size_t)rank + 1) * sizeof *dims);
        if (!a || !dims) { free(dims); throw_vkc(env, a ? "out of memory" : "a shape is null"); goto done; }
        (*env)->GetLongArrayRegion(env, a, 0, rank, (jlong *)dims);
        s[i].rank = (uint32_t)rank;
        s[i].dims = dims;
        (*env)->DeleteLocalRef(env, a);
    }
    if (vkc_find_variant(h->model, s, &k, &e) != VKC_OK) throw_vkc(env, e.message);
    else found = (jint)k;
done:
    for (uint32_t i = 0; i < n; i++) free((void *)s[i].dims);
    free(s);
    return found;
}

JNIEXPORT jstring JNICALL Java_dev_vkc_VkcModel_nativeName(JNIEnv *env, jclass cls, jlong ptr, jboolean outputs, jint i) {
    vkc_tensor_info t;
    (void)cls;
    return info(env, ptr, 0, outputs, i, &t) ? (*env)->NewStringUTF(env, t.name) : NULL;
}

/* dtype (vkc_dtype), then the shape, of a variant's input or output */
JNIEXPORT jlongArray JNICALL Java_dev_vkc_VkcModel_nativeSpec(JNIEnv *env, jclass cls, jlong ptr, jint variant,
                                                             jboolean outputs, jint i) {
    vkc_tensor_info t;
    jlongArray out;
    (void)cls;
    if (!info(env, ptr, variant, outputs, i, &t)) return NULL;
    out = (*env)->NewLongArray(env, (jsize)t.rank + 1);
    if (out) {
        jlong dtype = t.dtype;
        (*env)->SetLongArrayRegion(env, out, 0, 1, &dtype);
        for (uint32_t k = 0; k < t.rank; k++) {
            jlong d = t.shape[k];
            (*env)->SetLongArrayRegion(env, out, (jsize)k + 1, 1, &d);
        }
    }
    return out;
}

/* Run a variant. inputs/outputs: direct ByteBuffers in model order (an output may be null: skipped),
 * each exactly the variant's tensor's size, in native (little-endian) order. */
JNIEXPORT void JNICALL Java_dev_vkc_VkcModel_nativeRun(JNIEnv *env, jclass cls, jlong ptr, jint variant,
                                                      jobjectArray inputs, jobjectArray outputs) {
    handle *h = get(env, ptr);
    const void *ins[256];
    void *outs[256];
    vkc_error e;
    uint32_t n_in, n_out;
    (void)cls;
    if (!h) return;
    n_in = vkc_input_count(h->model);
    n_out = vkc_output_count(h->model);
    if (n_in > 256 || n_out > 256 || (*env)->GetArrayLength(env, inputs) != (jsize)n_in ||
        (*env)->GetArrayLength(env, outputs) != (jsize)n_out) {
        throw_vkc(env, "run needs one buffer per input and one slot per output");
        return;
    }
    for (uint32_t k = 0; k < n_in + n_out; k++) {
        int is_out = k >= n_in;
        uint32_t i = is_out ? k - n_in : k;
        jobject b = (*env)->GetObjectArrayElement(env, is_out ? outputs : inputs, (jsize)i);
        vkc_tensor_info t;
        void *p;
        if ((is_out ? vkc_variant_output_info(h->model, (uint32_t)variant, i, &t)
                    : vkc_variant_input_info(h->model, (uint32_t)variant, i, &t)) != VKC_OK) {
            throw_vkc(env, "no such variant");
            return;
        }
        if (!b && is_out) { outs[i] = NULL; continue; }
        p = b ? (*env)->GetDirectBufferAddress(env, b) : NULL;
        if (!p || (*env)->GetDirectBufferCapacity(env, b) != (jlong)t.nbytes) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s '%s' needs a direct ByteBuffer of exactly %zu bytes",
                     is_out ? "output" : "input", t.name, t.nbytes);
            throw_vkc(env, msg);
            return;
        }
        if (is_out) outs[i] = p;
        else ins[i] = p;
        (*env)->DeleteLocalRef(env, b);
    }
    if (vkc_run_variant(h->model, (uint32_t)variant, ins, outs, &e) != VKC_OK) throw_vkc(env, e.message);
}

/* The memory a run of `variant` reads input `index` from, as a direct ByteBuffer: passed back to
 * nativeRun as that input, vkc_run skips its copy (the app wrote the input there). */
JNIEXPORT jobject JNICALL Java_dev_vkc_VkcModel_nativeInputBuffer(JNIEnv *env, jclass cls, jlong ptr, jint variant,
                                                                 jint index) {
    handle *h = get(env, ptr);
    vkc_tensor_info t;
    vkc_error e;
    (void)cls;
    if (!h) return NULL;
    if (vkc_variant_input_info(h->model, (uint32_t)variant, (uint32_t)index, &t) != VKC_OK) {
        throw_vkc(env, "no such variant or input");
        return NULL;
    }
    if (vkc_select_variant(h->model, (uint32_t)variant, &e) != VKC_OK) {
        throw_vkc(env, e.message);
        return NULL;
    }
    return (*env)->NewDirectByteBuffer(env, vkc_input_data(h->model, (uint32_t)index), (jlong)t.nbytes);
}

/* Each token to the app's java.util.function.LongPredicate; false (or an exception) ends the sequence. */
typedef struct listener { JNIEnv *env; jobject predicate; jmethodID test; } listener;

static int on_token(void *user, int64_t token) {
    listener *l = user;
    jboolean more = (*l->env)->CallBooleanMethod(l->env, l->predicate, l->test, (jlong)token);
    return (*l->env)->ExceptionCheck(l->env) || !more;
}

/* vkc_generate: token ids after `prompt` (the state reset first). temperature 0: greedy; topP 0
 * means 1; seed < 0: from the clock; eos < 0: none; onToken (a LongPredicate, may be null) sees each
 * token as it comes. */
JNIEXPORT jlongArray JNICALL Java_dev_vkc_VkcModel_nativeGenerate(JNIEnv *env, jclass cls, jlong ptr, jlongArray prompt,
                                                                 jint max_new, jdouble temperature, jint top_k,
                                                                 jdouble top_p, jlong seed, jlong eos, jobject on) {
    handle *h = get(env, ptr);
    vkc_generate_options o;
    listener l = {env, on, NULL};
    jsize n = prompt ? (*env)->GetArrayLength(env, prompt) : 0;
    int64_t *ids, *tokens;
    uint32_t made = 0;
    jlongArray out = NULL;
    vkc_error e;
    vkc_status st;
    (void)cls;
    if (!h) return NULL;
    if (max_new < 0 || top_k < 0) { throw_vkc(env, "maxNewTokens and topK must be >= 0"); return NULL; }
    memset(&o, 0, sizeof o);
    o.temperature = temperature;
    o.top_k = (uint32_t)top_k;
    o.top_p = top_p;
    o.seeded = seed >= 0;
    o.seed = (uint64_t)seed;
    o.has_eos = eos >= 0;
    o.eos_token_id = eos;
    if (on) {
        jclass pc = (*env)->FindClass(env, "java/util/function/LongPredicate");
        if (!pc || !(l.test = (*env)->GetMethodID(env, pc, "test", "(J)Z"))) return NULL;  /* exception pending */
        o.on_token = on_token;
        o.user = &l;
    }
    ids = malloc(((size_t)n + 1) * sizeof *ids);
    tokens = malloc(((size_t)max_new + 1) * sizeof *tokens);
    if (!ids || !tokens) {
        free(ids);
        free(tokens);
        throw_vkc(env, "out of memory");
        return NULL;
    }
    if (n) (*env)->GetLongArrayRegion(env, prompt, 0, n, (jlong *)ids);
    st = vkc_generate(h->model, ids, (size_t)n, (uint32_t)max_new, &o, tokens, &made, &e);
    if ((*env)->ExceptionCheck(env)) {  /* the callback threw: that exception goes on */
    } else if (st != VKC_OK) {
        throw_vkc(env, e.message);
    } else if ((out = (*env)->NewLongArray(env, (jsize)made)) != NULL) {
        (*env)->SetLongArrayRegion(env, out, 0, (jsize)made, (const jlong *)tokens);
    }
    free(ids);
    free(tokens);
    return out;
}

/* Every state tensor back to zeros, as at load. */
JNIEXPORT void JNICALL Java_dev_vkc_VkcModel_nativeResetState(JNIEnv *env, jclass cls, jlong ptr) {
    handle *h = get(env, ptr);
    vkc_error e;
    (void)cls;
    if (h && vkc_reset_state(h->model, &e) != VKC_OK) throw_vkc(env, e.message);
}

JNIEXPORT void JNICALL Java_dev_vkc_VkcModel_nativeClose(JNIEnv *env, jclass cls, jlong ptr) {
    handle *h = (handle *)(intptr_t)ptr;
    (void)env;
    (void)cls;
    if (!h) return;
    vkc_free(h->model);
    vkc_close(h->ctx);
    free(h);
}
