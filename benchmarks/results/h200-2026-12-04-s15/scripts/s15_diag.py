"""Where the KHR kernel's K-step time goes (8192^3 fp16, warm): the profile kernel as it is, and with
parts of its K loop taken out (timing only; the results of the cut forms are wrong):
nofetch  no global loads in the loop (the first step's registers are written again every step);
l1fetch  every step loads the first step's addresses (L1 hits);
nobar    the stash without its barriers (racy);
nostash  global loads kept (folded into one register) but no stash and no barriers;
late     the global loads issued after the step's products instead of before them.
Also the steady-state warm-up: profile cold, warm_up's time, profile warm."""
import json, os, sys, time
sys.path[:0] = ['benchmarks/h200', 'tests']
import numpy as np
from onnx import helper
import compiler
import compiler.assemble as asm
from compiler import codegen
from compiler.host import warm_up
from compiler.targets import TARGETS
from coopmat import model, sweep_target
from runtime_min import load

FETCH = '        if (more) fetch0(k0 + BK);\n'
BLOCK = ('        barrier();   // every subgroup is done with this step\'s tiles\n        if (more) {\n'
         '            stash0(0);\n            barrier();\n        }\n')
ACC = 'coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator>'


FENCE = '        controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsNone, gl_SemanticsRelaxed);\n'
DEEP_FETCH = ['            if (k + 2 * BK < k_end) fetch0(k + 2 * BK);\n', '            if (k + 2 * BK < k_end) fetch1(k + 2 * BK);\n']


def cut(src, name):
    if name == 'coherent':
        assert ') readonly buffer A_buffer' in src
        return src.replace(') readonly buffer A_buffer', ') coherent readonly buffer A_buffer').replace(
            ') readonly buffer B_buffer', ') coherent readonly buffer B_buffer')
    if name.startswith('deep'):
        assert all(f in src for f in DEEP_FETCH)
        for f in DEEP_FETCH:
            src = src.replace(f, '' if name == 'deep_nofetch' else f + ('    ' + FENCE if name == 'deep_fence' else ''))
        return src
    assert name == 'as_is' or (FETCH in src and BLOCK in src), name
    if name in ('loadonly', 'loadsum', 'nomul'):
        # every loaded register folded into `sink` (so no load is dead code), which decides nothing
        src = src.replace('int tid, m0,', 'uvec4 sink = uvec4(0u);\nint tid, m0,')
        fold = ('        for (int r = 0; r < A_PER; ++r) sink ^= a_next0[r];\n'
                '        for (int r = 0; r < B_PER; ++r) sink ^= b_next0[r];\n')
        if name != 'nomul':
            src = src.replace(BLOCK, fold)
        first = '    coopMatStore(acc_0_0,'
        src = src.replace(first, f'    if (sink.x == 0x12345u) acc_0_0 = {ACC}(1.0);\n' + first, 1)
        if name != 'loadsum':
            loop = src.index('        for (int kk = 0; kk < BK; kk += LK) {')
            end = src.index('\n        }\n', loop) + len('\n        }\n')
            src = src[:loop] + src[end:]
        return src
    if name.startswith('pf'):
        # an L2 prefetch PF steps ahead: one 4-byte load per 32-byte sector of that step's tiles,
        # folded into a register a step later (row-major A and B, whole tiles only)
        ahead = int(name[2:])
        src = src.replace('int tid, m0,', 'uint pf_sink = 0u, pf_last = 0u;\nint tid, m0,')
        pf = f'''        pf_sink ^= pf_last;
        pf_last = 0u;
        if (k0 + {ahead} * BK < k_end) {{
            const int kp = k0 + {ahead} * BK;
            for (int s = tid; s < A_OUTER * A_INNER / 16; s += THREADS) {{
                const int o = s / (A_INNER / 16), i = (s - o * (A_INNER / 16)) * 16;
                pf_last ^= A[(a_base + (m0 + o) * SA_M + (kp + i) * SA_K) / 8].x;
            }}
            for (int s = tid; s < B_OUTER * B_INNER / 16; s += THREADS) {{
                const int o = s / (B_INNER / 16), i = (s - o * (B_INNER / 16)) * 16;
                pf_last ^= B[(b_base + (kp + o) * SB_K + (n0 + i) * SB_N) / 8].x;
            }}
        }}
'''
        src = src.replace(FETCH, pf + FETCH)
        first = '    coopMatStore(acc_0_0,'
        return src.replace(first, f'    if (pf_sink == 0x12345u) acc_0_0 = {ACC}(1.0);\n' + first, 1)
    if name == 'fence':
        return src.replace(FETCH, FETCH + FENCE)
    if name == 'nofetch':
        return src.replace(FETCH, '')
    if name == 'l1fetch':
        return src.replace(FETCH, '        if (more) fetch0(k_begin);\n')
    if name == 'nobar':
        return src.replace(BLOCK, '        if (more) stash0(0);\n')
    if name == 'nostash':
        src = src.replace('int tid, m0,', 'uint sink = 0u;\nint tid, m0,')
        src = src.replace(BLOCK, '        if (more) sink ^= a_next0[0].x ^ b_next0[1].y;\n')
        first = '    coopMatStore(acc_0_0,'
        return src.replace(first, f'    if (sink == 0x12345u) acc_0_0 = {ACC}(1.0);\n' + first, 1)
    if name == 'late':
        src = src.replace(FETCH, '')
        return src.replace(BLOCK, '        if (more) fetch0(k0 + BK);\n' + BLOCK)
    return src


real = codegen.render
compile_only = 'compile' in sys.argv
size = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 8192
depth = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else size
rng = np.random.default_rng(0)
x = rng.standard_normal((size, depth)).astype(np.float16)
w = (rng.standard_normal((depth, size)) / depth ** .5).astype(np.float16)
feeds = {'X': x, 'W': w}
onnx_model = model([helper.make_node('MatMul', ['X', 'W'], ['Y'])], [('X', [size, depth]), ('W', [depth, size])], 'Y', (), [size] * 2)
os.makedirs('.bench/g15', exist_ok=True)
first = True
from dataclasses import replace
EXTRA = {'q32d': ((2, 2, 4, 4), 32, 1), 'q32': ((2, 2, 4, 4), 32, 1), 'q16': ((2, 2, 4, 4), 16, 1), 'q32s2': ((2, 2, 4, 4), 32, 2),
         'q48': ((2, 2, 4, 4), 48, 1), 'q16s2': ((2, 2, 4, 4), 16, 2), 'w48': ((2, 4, 4, 4), 48, 1), 'n48': ((2, 4, 4, 2), 48, 1), 'w16s2': ((2, 4, 4, 4), 16, 2), 'w16s1': ((2, 4, 4, 4), 16, 1), 'w32s2': ((2, 4, 4, 4), 32, 2)}


def target_of(entry):
    if entry in EXTRA:
        t, k, st = EXTRA[entry]
        return replace(TARGETS['nvidia'], coopmat_tiles=(t,), coopmat_k=k, coopmat_load=8, coopmat_stages=st,
                       **({'coopmat_deep_prefetch': 8} if entry.endswith('d') else {}))
    return sweep_target(entry)


CUTS = ('as_is', 'nofetch', 'l1fetch', 'nobar', 'nostash', 'late', 'as_is')
DEEP = ('deep', 'deep_nofetch', 'deep_fence')
RUNS = [(3, CUTS), (5, CUTS)] + [(e, ('as_is',)) for e in EXTRA]
if 'run7' in sys.argv:
    RUNS = [(5, ('as_is',)), ('q32s2', ('as_is',)), (0, ('as_is',)), ('q16s2', ('as_is',)), ('w16s2', ('as_is',)),
            (1, ('as_is',)), ('q32', ('as_is',)), (3, ('as_is',))]
if 'run6' in sys.argv:
    RUNS = [(5, ('as_is',)), ('q32', ('as_is', 'nofetch')), ('q16', ('as_is',)), ('q32s2', ('as_is',)), ('q16s2', ('as_is',)),
            ('q32d', ('deep',)), ('q48', ('as_is',)), ('w48', ('as_is',)), (16, ('deep',))]
if 'run5' in sys.argv:
    RUNS = [(5, ('as_is', 'coherent')), (16, ('deep', 'coherent')), (3, ('as_is', 'coherent')), ('w48', ('as_is', 'coherent', 'nofetch')), ('n48', ('as_is',))]
if 'l2' in sys.argv:
    RUNS = [(5, ('as_is', 'nofetch')), (3, ('as_is', 'nofetch'))]
if 'run4' in sys.argv:
    RUNS = [(5, ('as_is', 'pf2', 'pf4', 'pf8', 'nofetch')), (3, ('as_is', 'pf2', 'pf4', 'nofetch')), (5, ('as_is',))]
if 'run3' in sys.argv:
    RUNS = [(5, ('as_is', 'loadonly', 'loadsum', 'nomul')), (3, ('as_is', 'loadonly', 'loadsum', 'nomul'))]
if 'run2' in sys.argv:
    RUNS = [(5, ('as_is', 'fence', 'nofetch')), (16, DEEP), (3, ('as_is', 'fence')), (15, DEEP), (5, ('as_is',))]
for entry, names in RUNS:
    for name in names:
        asm.render = lambda k, name=name: cut(real(k), name) if k.template == 'matmul_coopmat' else real(k)
        path = f'.bench/g15/d{entry}_{name}_{size}x{depth}.vkb'
        if compile_only or not os.path.exists(path):
            b = compiler.compile_model(onnx_model, target=target_of(entry), precision='fp16', io='fp16')
        else:
            b = open(path, 'rb').read()
        with open(path, 'wb') as f:
            f.write(b)
        if compile_only:
            print(entry, name, len(b)); continue
        with load(b) as vm:
            vm.run(feeds)
            extra = {}
            if first:
                time.sleep(3)
                cold = sum(p.seconds for p in vm.profile(feeds, repeat=3))
                t0 = time.perf_counter()
                warm_up(vm, feeds)
                extra = dict(cold_ms=round(cold * 1e3, 3), warm_up_s=round(time.perf_counter() - t0, 2))
                first = False
            else:
                warm_up(vm, feeds)
            prof = vm.profile(feeds, repeat=10)
        us = sum(p.seconds for p in prof if 'matmul' in p.kernel) * 1e6
        print(json.dumps(dict(entry=entry, cut=name, us=round(us, 1), tflops=round(2 * size * size * depth / us / 1e6, 1), depth=depth,
                              kernels=sorted({p.kernel for p in prof}), **extra)), flush=True)
