"""On the GPU machine: a VK_KHR_cooperative_matrix GEMM with no shared memory and no barriers, as a
measured alternative to vkc's matmul_coopmat (which stages A and B through shared memory). Each
subgroup loads its own A and B fragments straight from global memory (the workgroup's subgroups
share them through L1), one 16-deep K step ahead of the products that use them.

    GLSLC=... python3 -m benchmarks.probes.khr_direct_probe 8192,4096 2x4x4x2 2x2x4x4 ...

Tiles are WMxWNxSMxSN: WM x WN subgroups of 32, each SM x SN accumulators of 16x16 (a workgroup
tile of WM*SM*16 x WN*SN*16). Sizes must be whole tiles (no edge handling: a probe). Runs through
coopmat2_probe.py's device and harness (rows of C checked against numpy; cuBLAS fp16 in the same
run).
"""
import json, os, sys, tempfile


from benchmarks.cli import exit_on_help
from benchmarks.probes.coopmat2_probe import HARNESS_INTERFACE, Gpu, compile_glsl, cublas, run
from benchmarks.probes.coopmat_peak import ACC, FRAG_A as FA, FRAG_B as FB


def source(wn: int, sm: int, sn: int) -> str:
    accs = [(i, j) for i in range(sm) for j in range(sn)]
    out = ["""#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_cooperative_matrix : require
""" + HARNESS_INTERFACE + "void main() {\n"]
    out.append(f"    const uint sg = gl_SubgroupID, wm = sg / {wn}, wn = sg % {wn};\n"
               f"    const uint row = gl_WorkGroupID.y * BM + wm * {sm * 16}, col = gl_WorkGroupID.x * BN + wn * {sn * 16};\n")
    out += [f"    {ACC} acc_{i}_{j} = {ACC}(0.0);\n" for i, j in accs]

    def loads(s, k):
        return ([f"        coopMatLoad(a{s}_{i}, A, (row + {16 * i}) * K + {k}, K, gl_CooperativeMatrixLayoutRowMajor);\n"
                 for i in range(sm)] +
                [f"        coopMatLoad(b{s}_{j}, B, ({k}) * N + col + {16 * j}, N, gl_CooperativeMatrixLayoutRowMajor);\n"
                 for j in range(sn)])
    for s in (0, 1):
        out += [f"    {FA} a{s}_{i};\n" for i in range(sm)] + [f"    {FB} b{s}_{j};\n" for j in range(sn)]
    out.append("    {\n")
    out += loads(0, "0")
    out.append("    }\n    for (uint k = 0; k < K; k += 32) {\n")
    for s, nxt in ((0, 1), (1, 0)):
        k_next = "k + 16" if s == 0 else "k + 32"
        out.append(f"        if ({k_next} < K) {{\n")
        out += ["    " + line for line in loads(nxt, k_next)]
        out.append("        }\n")
        out += [f"        acc_{i}_{j} = coopMatMulAdd(a{s}_{i}, b{s}_{j}, acc_{i}_{j});\n" for i, j in accs]
    out.append("    }\n")
    for i, j in accs:
        out.append(f"    {{ coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c = "
                   f"coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(acc_{i}_{j});\n"
                   f"      coopMatStore(c, C, (row + {16 * i}) * N + col + {16 * j}, N, gl_CooperativeMatrixLayoutRowMajor); }}\n")
    out.append("}\n")
    return "".join(out)


def main(argv):
    shapes = [tuple(int(v) for v in s.split("x")) if "x" in s else (int(s),) * 3 for s in argv[0].split(",")]
    gpu = Gpu(coopmat2=True)
    for shape in shapes:
        cu = cublas(shape)
        for spec in argv[1:]:
            wm, wn, sm, sn = (int(v) for v in spec.split("x"))
            with tempfile.NamedTemporaryFile("w", suffix=".comp", delete=False) as f:
                f.write(source(wn, sm, sn))
            try:
                r = run(gpu, shape, (wm * sm * 16, wn * sn * 16, 16, wm * wn * 32), compile_glsl(f.name), reps=20)
            except Exception as e:
                r = dict(error=f"{type(e).__name__}: {e}")
            finally:
                os.unlink(f.name)
                gpu.release()
            if cu and "tflops" in r:
                r.update(cublas_ms=cu, pct_of_cublas=100 * cu / r["ms"])
            print(json.dumps(dict(shape="x".join(map(str, shape)), tile=spec, **r)), flush=True)


if __name__ == "__main__":
    exit_on_help(__doc__)
    main(sys.argv[1:])
