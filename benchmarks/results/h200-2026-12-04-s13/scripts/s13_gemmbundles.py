import sys, os
from dataclasses import replace
sys.path.insert(0, 'benchmarks/h200')
import compiler
from compiler.targets import TARGETS
from coopmat import SWEEP, model
from onnx import helper
base = TARGETS['nvidia']
for i in [3, 5, 6, 7, 8, 11, 12, 13, 14]:
    t, k, v, st = SWEEP[i]
    target = replace(base, coopmat_tiles=(t,), coopmat_k=k, coopmat_load=v, coopmat_stages=st)
    m = model([helper.make_node('MatMul', ['X', 'W'], ['Y'])], [('X', [8192, 8192]), ('W', [8192, 8192])], 'Y', (), [8192, 8192])
    b = compiler.compile_model(m, target=target, precision='fp16', io='fp16')
    open(f'.bench/g/sweep{i}.vkb', 'wb').write(b if isinstance(b, bytes) else bytes(b))
    print(i, t, k, st)
