package dev.vkc

import android.content.res.AssetManager
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.FloatBuffer
import java.util.function.LongPredicate

/** A failed bundle check, device choice or Vulkan call; the message says which and why. */
class VkcException(message: String) : RuntimeException(message)

/**
 * A vkc bundle loaded onto the device's GPU (through the native runtime, libvkc_jni.so).
 *
 *     VkcModel.load(assets, "model.vkb").use { m ->
 *         val out = m.run(mapOf("input" to inputBuffer))   // direct ByteBuffers, native order
 *     }
 *
 * The asset must be stored uncompressed (`vkc package --android` sets `noCompress += "vkb"`): it is
 * read in place and nothing of it is kept after load. Runs of one model are serialized.
 *
 * A bundle with several variants (format 1.2): load picks the profile for the device ([profile]);
 * `run(feeds, shapes)` runs the variant compiled for those input shapes (an error lists the
 * compiled ones); `run(feeds)` runs the first variant, whose shapes [inputs] and [outputs] give.
 *
 * A decoder whose KV cache is the bundle's state (format 1.3): [generate] streams token ids after a
 * prompt; [resetState] zeros the state.
 */
class VkcModel private constructor(private var handle: Long) : AutoCloseable {
    data class TensorSpec(val name: String, val dtype: Int, val shape: LongArray) {
        val bytes: Int get() = (shape.fold(1L) { a, b -> a * b } * DTYPE_BYTES[dtype]).toInt()
    }

    val inputs: List<TensorSpec> = specs(0, false)
    val outputs: List<TensorSpec> = specs(0, true)
    /** The device profile (target name) load chose, and how many shape variants it has. */
    val profile: String = nativeProfile(handle)
    val variantCount: Int = nativeVariantCount(handle)

    private fun specs(variant: Int, out: Boolean) = (0 until nativeCount(handle, out)).map { i ->
        val s = nativeSpec(handle, variant, out, i)
        TensorSpec(nativeName(handle, out, i), s[0].toInt(), s.copyOfRange(1, s.size))
    }

    /** Runs the first variant once; inputs by name (direct ByteBuffers of exactly the tensor's bytes). */
    fun run(feeds: Map<String, ByteBuffer>): Map<String, ByteBuffer> = runVariant(0, feeds)

    /** Runs the variant compiled for exactly these input shapes (every input named). */
    fun run(feeds: Map<String, ByteBuffer>, shapes: Map<String, LongArray>): Map<String, ByteBuffer> =
        runVariant(variantFor(shapes), feeds)

    /** The variant compiled for exactly these input shapes (every input named). */
    private fun variantFor(shapes: Map<String, LongArray>): Int = nativeFind(handle, inputs.map {
        shapes[it.name] ?: throw IllegalArgumentException("missing the shape of ${it.name}") }.toTypedArray())

    /** The memory the run reads input [name] from (of the variant for [shapes]; null: the first), as a
     *  direct ByteBuffer: write the input there and pass this buffer to run, which then copies
     *  nothing in. Valid until a run of another variant, or close(). */
    fun inputBuffer(name: String, shapes: Map<String, LongArray>? = null): ByteBuffer {
        val index = inputs.indexOfFirst { it.name == name }
        require(index >= 0) { "unknown input $name; the model takes ${inputs.map { it.name }}" }
        return nativeInputBuffer(handle, if (shapes == null) 0 else variantFor(shapes), index)
            .order(ByteOrder.nativeOrder())
    }

    private fun runVariant(variant: Int, feeds: Map<String, ByteBuffer>): Map<String, ByteBuffer> {
        val unknown = feeds.keys - inputs.map { it.name }.toSet()
        require(unknown.isEmpty()) { "unknown inputs $unknown; the model takes ${inputs.map { it.name }}" }
        val ins = inputs.map { feeds[it.name] ?: throw IllegalArgumentException("missing input ${it.name}") }
        val outSpecs = if (variant == 0) outputs else specs(variant, true)
        val outs = outSpecs.map { ByteBuffer.allocateDirect(it.bytes).order(ByteOrder.nativeOrder()) }
        nativeRun(handle, variant, ins.toTypedArray(), outs.toTypedArray())
        return outSpecs.map { it.name }.zip(outs).toMap()
    }

    /** float32 convenience: each FloatBuffer is copied into a direct buffer. */
    fun runFloats(feeds: Map<String, FloatBuffer>): Map<String, FloatBuffer> =
        run(feeds.mapValues { (_, f) ->
            ByteBuffer.allocateDirect(f.remaining() * 4).order(ByteOrder.nativeOrder()).also {
                it.asFloatBuffer().put(f.duplicate())
            }
        }).mapValues { (_, b) -> b.asFloatBuffer() }

    /**
     * Token ids after [prompt], for a decoder whose KV cache is the bundle's state (vkc_generate: the
     * state is reset first, the prompt runs in chunks of the compiled lengths, then one token a run).
     * Greedy unless [temperature] > 0 (then [topK], [topP] and [seed] >= 0 for repeatable draws);
     * ends after [eosTokenId]; [onToken] sees each token as it comes and ends the sequence by
     * returning false.
     */
    fun generate(prompt: LongArray, maxNewTokens: Int, temperature: Double = 0.0, topK: Int = 0, topP: Double = 1.0,
                 seed: Long? = null, eosTokenId: Long? = null, onToken: ((Long) -> Boolean)? = null): LongArray =
        nativeGenerate(handle, prompt, maxNewTokens, temperature, topK, topP, seed ?: -1, eosTokenId ?: -1,
                       onToken?.let { f -> LongPredicate { f(it) } })

    /** Every state tensor back to zeros, as at load (generate does it itself). */
    fun resetState() = nativeResetState(handle)

    override fun close() {
        if (handle != 0L) nativeClose(handle)
        handle = 0L
    }

    companion object {
        init { System.loadLibrary("vkc_jni") }

        /** dtype codes, in vkc.h's order (vkc_dtype). */
        val DTYPE_NAMES = listOf("float32", "float16", "int32", "int64", "uint8", "int8", "bool",
                                 "float64", "int16", "uint16", "uint32", "uint64")
        private val DTYPE_BYTES = intArrayOf(4, 2, 4, 8, 1, 1, 1, 8, 2, 2, 4, 8)

        @JvmStatic fun load(assets: AssetManager, name: String) = VkcModel(nativeLoadAsset(assets, name))
        @JvmStatic fun load(bundle: ByteBuffer) = VkcModel(nativeLoadBuffer(bundle))

        @JvmStatic private external fun nativeLoadAsset(assets: AssetManager, name: String): Long
        @JvmStatic private external fun nativeLoadBuffer(bundle: ByteBuffer): Long
        @JvmStatic private external fun nativeCount(handle: Long, outputs: Boolean): Int
        @JvmStatic private external fun nativeName(handle: Long, outputs: Boolean, index: Int): String
        @JvmStatic private external fun nativeSpec(handle: Long, variant: Int, outputs: Boolean, index: Int): LongArray
        @JvmStatic private external fun nativeProfile(handle: Long): String
        @JvmStatic private external fun nativeVariantCount(handle: Long): Int
        @JvmStatic private external fun nativeFind(handle: Long, shapes: Array<LongArray>): Int
        @JvmStatic private external fun nativeRun(handle: Long, variant: Int, inputs: Array<ByteBuffer>,
                                                  outputs: Array<ByteBuffer?>)
        @JvmStatic private external fun nativeInputBuffer(handle: Long, variant: Int, index: Int): ByteBuffer
        @JvmStatic private external fun nativeGenerate(handle: Long, prompt: LongArray, maxNewTokens: Int,
                                                       temperature: Double, topK: Int, topP: Double, seed: Long,
                                                       eos: Long, onToken: LongPredicate?): LongArray
        @JvmStatic private external fun nativeResetState(handle: Long)
        @JvmStatic private external fun nativeClose(handle: Long)
    }
}
