"""Where a batch-1 transformer product's time goes (ViT-B/16's QKV, 197x2304x768 fp16, the nvidia
profile's 32x32 tile, K steps of 64, two in flight): the kernel as it is, without global loads in
its loop, without its loop's barriers (racy), and the same product at K 64 and 256 (1 and 4 steps),
warm. Bundles compiled here (`compile`), timed there."""
import json, os, re, sys
sys.path[:0] = ['benchmarks/h200', 'tests', '.bench']
import numpy as np
from onnx import helper
import compiler
import compiler.assemble as asm
from compiler import codegen
from compiler.targets import TARGETS
from coopmat import model

src = open('.bench/s15_diag.py').read()
exec(src[:src.index('real = codegen.render')].split('from runtime_min import load')[1])  # cut()
BAR = re.compile(r"            barrier\(\);   // every subgroup is done with this step's tiles\n"
                 r"            if \(k \+ BK < k_end\) \{\n                stash(\d)\(0\);\n                barrier\(\);\n            \}\n")


def cut2(s, name):
    if name == 'deep_nobar':
        assert len(BAR.findall(s)) == 2
        return BAR.sub(lambda mm: f"            if (k + BK < k_end) stash{mm.group(1)}(0);\n", s)
    return cut(s, name)


RUNS = [(768, 'deep'), (768, 'deep_nofetch'), (768, 'deep_nobar'), (256, 'deep'), (64, 'as_is'), (768, 'deep')]
real = codegen.render
os.makedirs('.bench/g15s', exist_ok=True)
rng = np.random.default_rng(0)
for depth, name in RUNS:
    path = f'.bench/g15s/{depth}_{name}.vkb'
    m = model([helper.make_node('MatMul', ['X', 'W'], ['Y'])], [('X', [197, depth]), ('W', [depth, 2304])], 'Y', (), [197, 2304])
    if 'compile' in sys.argv:
        asm.render = lambda k, name=name: cut2(real(k), name) if k.template == 'matmul_coopmat' else real(k)
        open(path, 'wb').write(compiler.compile_model(m, target=TARGETS['nvidia'], precision='fp16', io='fp16'))
        continue
    from compiler.host import warm_up
    from runtime_min import load
    feeds = {'X': rng.standard_normal((197, depth)).astype(np.float16),
             'W': (rng.standard_normal((depth, 2304)) / depth ** .5).astype(np.float16)}
    with load(open(path, 'rb').read()) as vm:
        warm_up(vm, feeds)
        prof = vm.profile(feeds, repeat=20)
    us = sum(p.seconds for p in prof if 'matmul' in p.kernel) * 1e6
    print(json.dumps(dict(depth=depth, cut=name, us=round(us, 2), tflops=round(2 * 197 * 2304 * depth / us / 1e6, 1),
                          kernels=[p.kernel for p in prof])), flush=True)
