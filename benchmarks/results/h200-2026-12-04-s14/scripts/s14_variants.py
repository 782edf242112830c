"""Kernel-text variants at 8192^3 and 1576x2304x768 (fp16 MatMul, inputs fp16), each warmed up before
its profile: the KHR profile kernel and the coopmat2 128x256 tile as they are and with A and B
declared `restrict`; coopmat2 tiles with 16 K steps a loop iteration and BK 16."""
import json, sys
from dataclasses import replace
sys.path[:0] = ['benchmarks/h200', 'tests']
import numpy as np
from onnx import helper
import compiler
import compiler.assemble as asm
from compiler import codegen
from compiler.host import warm_up
from compiler.targets import TARGETS
from coopmat import model
from runtime_min import load

real = codegen.render
def restrict(src):
    return src.replace(') readonly buffer A_buffer', ') restrict readonly buffer A_buffer').replace(
        ') readonly buffer B_buffer', ') restrict readonly buffer B_buffer')
EDITS = {'as_is': lambda s: s, 'restrict': restrict}
base = TARGETS['nvidia']
cm2 = lambda t: replace(base, coopmat2_tile=t)
RUNS = [('khr', base, 'as_is'), ('khr', base, 'restrict'), ('cm2 u8', cm2((128, 256, 32, 256, 8)), 'as_is'),
        ('cm2 u8', cm2((128, 256, 32, 256, 8)), 'restrict'), ('cm2 u16', cm2((128, 256, 32, 256, 16)), 'as_is'),
        ('cm2 bk16 u16', cm2((128, 256, 16, 256, 16)), 'as_is'), ('cm2 u8', cm2((128, 256, 32, 256, 8)), 'as_is')]
for m_, n_, k_ in ((8192, 8192, 8192), (1576, 2304, 768)):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m_, k_)).astype(np.float16)
    w = (rng.standard_normal((k_, n_)) / k_ ** .5).astype(np.float16)
    rows = rng.choice(m_, 64, replace=False)
    ref = x[rows].astype(np.float32) @ w.astype(np.float32)
    onnx_model = model([helper.make_node('MatMul', ['X', 'W'], ['Y'])], [('X', [m_, k_]), ('W', [k_, n_])], 'Y', (), [m_, n_])
    for label, target, edit in RUNS:
        asm.render = lambda kernel, edit=edit: EDITS[edit](real(kernel)) if kernel.template.startswith('matmul_coopmat') else real(kernel)
        b = compiler.compile_model(onnx_model, target=target, precision='fp16', io='fp16')
        feeds = {'X': x, 'W': w}
        with load(b) as vm:
            got = vm.run(feeds)['Y'].astype(np.float32)
            warm_up(vm, feeds, 0.5)
            prof = vm.profile(feeds, repeat=10)
        us = sum(p.seconds for p in prof if 'matmul' in p.kernel) * 1e6
        err = float(np.linalg.norm(got[rows] - ref) / np.linalg.norm(ref))
        print(json.dumps(dict(size=f'{m_}x{n_}x{k_}', kernel=label, edit=edit, us=round(us, 1),
                              tflops=round(2 * m_ * n_ * k_ / us / 1e6, 1), rel_rows=err,
                              kernels=[p.kernel for p in prof])), flush=True)
