// Runs the JNI layer (native/android/vkc_jni.c, built for the desktop JDK) as VkcModel.kt calls it,
// for tests/native/test_native.py (no kotlinc here): `java JniCheck.java LIB BUNDLE INPUT.bin SHAPE OUT.bin`.
// Loads BUNDLE from a direct ByteBuffer, finds the variant for SHAPE (e.g. 3x3x16x16; one float32
// input), runs it on INPUT.bin's bytes, writes output 0 to OUT.bin, runs it again with the input
// written in place (nativeInputBuffer) and prints what it saw; then asks for a shape the bundle lacks
// and prints the error.
// `java JniCheck.java LIB generate BUNDLE IDS N`: nativeGenerate after the prompt IDS (1,2,3) of N
// tokens, greedy, then streamed to a LongPredicate, stopped by it after 3, sampled twice by seed;
// nativeResetState; a sequence past the cache: what each gave, a line each.
package dev.vkc;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

public class JniCheck {
    public static void main(String[] args) throws Exception {
        System.load(args[0]);
        if (args[1].equals("generate")) {
            generate(args);
            return;
        }
        ByteBuffer bundle = direct(Files.readAllBytes(Path.of(args[1])));
        long h = VkcModel.nativeLoadBuffer(bundle);
        long[] shape = Arrays.stream(args[3].split("x")).mapToLong(Long::parseLong).toArray();
        int variant = VkcModel.nativeFind(h, new long[][] {shape});
        ByteBuffer[] outs = new ByteBuffer[VkcModel.nativeCount(h, true)];
        for (int i = 0; i < outs.length; i++) {
            long[] spec = VkcModel.nativeSpec(h, variant, true, i);  // dtype, then the shape
            outs[i] = ByteBuffer.allocateDirect((int) (Arrays.stream(spec, 1, spec.length).reduce(1, (a, b) -> a * b) * 4));
        }
        VkcModel.nativeRun(h, variant, new ByteBuffer[] {direct(Files.readAllBytes(Path.of(args[2])))}, outs);
        try (FileChannel out = FileChannel.open(Path.of(args[4]), java.nio.file.StandardOpenOption.CREATE,
                                                java.nio.file.StandardOpenOption.WRITE)) {
            out.write(outs[0]);
        }
        // In place: the input written into the memory the run reads (no copy in nativeRun), the same output.
        ByteBuffer first = ByteBuffer.allocateDirect(outs[0].capacity()).put(outs[0].duplicate().position(0));
        ByteBuffer in = VkcModel.nativeInputBuffer(h, variant, 0);
        in.put(Files.readAllBytes(Path.of(args[2]))).position(0);
        VkcModel.nativeRun(h, variant, new ByteBuffer[] {in}, outs);
        System.out.println("in place " + (outs[0].position(0).equals(first.position(0)) ? "same" : "differs"));
        System.out.println("profile " + VkcModel.nativeProfile(h) + " variants " + VkcModel.nativeVariantCount(h)
                           + " variant " + variant + " input " + VkcModel.nativeName(h, false, 0));
        try {
            VkcModel.nativeFind(h, new long[][] {{2, 3, 16, 16}});
        } catch (RuntimeException e) {
            System.out.println("error " + e.getClass().getSimpleName() + ": " + e.getMessage());
        }
        VkcModel.nativeClose(h);
    }

    static void generate(String[] args) throws Exception {
        long h = VkcModel.nativeLoadBuffer(direct(Files.readAllBytes(Path.of(args[2]))));
        long[] prompt = Arrays.stream(args[3].split(",")).mapToLong(Long::parseLong).toArray();
        int n = Integer.parseInt(args[4]);
        System.out.println("tokens " + Arrays.toString(VkcModel.nativeGenerate(h, prompt, n, 0, 0, 1, -1, -1, null)));
        List<Long> seen = new ArrayList<>();
        VkcModel.nativeGenerate(h, prompt, n, 0, 0, 1, -1, -1, t -> seen.add(t));
        System.out.println("streamed " + seen);
        long[] stopped = VkcModel.nativeGenerate(h, prompt, n, 0, 0, 1, -1, -1, t -> t < 0);
        System.out.println("stopped " + Arrays.toString(stopped));
        long[] a = VkcModel.nativeGenerate(h, prompt, n, 0.8, 5, 0.9, 7, -1, null);
        long[] b = VkcModel.nativeGenerate(h, prompt, n, 0.8, 5, 0.9, 7, -1, null);
        System.out.println("sampled " + (Arrays.equals(a, b) ? "same" : "differs") + " " + a.length);
        VkcModel.nativeResetState(h);
        System.out.println("reset ok");
        try {
            VkcModel.nativeGenerate(h, prompt, 1000, 0, 0, 1, -1, -1, null);
        } catch (RuntimeException e) {
            System.out.println("error " + e.getClass().getSimpleName() + ": " + e.getMessage());
        }
        VkcModel.nativeClose(h);
    }

    static ByteBuffer direct(byte[] bytes) {
        return ByteBuffer.allocateDirect(bytes.length).order(ByteOrder.nativeOrder()).put(bytes).position(0);
    }
}

/** The natives of VkcModel.kt's companion object (same JNI symbols). */
class VkcModel {
    static native long nativeLoadBuffer(ByteBuffer bundle);
    static native int nativeCount(long handle, boolean outputs);
    static native String nativeName(long handle, boolean outputs, int index);
    static native long[] nativeSpec(long handle, int variant, boolean outputs, int index);
    static native String nativeProfile(long handle);
    static native int nativeVariantCount(long handle);
    static native int nativeFind(long handle, long[][] shapes);
    static native void nativeRun(long handle, int variant, ByteBuffer[] inputs, ByteBuffer[] outputs);
    static native ByteBuffer nativeInputBuffer(long handle, int variant, int index);
    static native long[] nativeGenerate(long handle, long[] prompt, int maxNewTokens, double temperature, int topK,
                                        double topP, long seed, long eos, java.util.function.LongPredicate onToken);
    static native void nativeResetState(long handle);
    static native void nativeClose(long handle);
}

class VkcException extends RuntimeException {
    VkcException(String message) {
        super(message);
    }
}
