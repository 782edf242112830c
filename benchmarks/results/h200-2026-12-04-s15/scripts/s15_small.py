"""Tile candidates at the transformers' batch-1 products (ViT-B/16: 197 rows; BERT-base: 128 rows), fp16,
H200: every candidate applied to all of them at once (compiler.tune.measure, warm), each problem's
time per candidate, then the fastest per problem."""
import itertools, json, sys
sys.path[:0] = ['.']
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from dataclasses import replace
from compiler.targets import TARGETS
from compiler.tune import measure, candidates

rng = np.random.default_rng(0)
nodes, inputs, inits, outputs = [], [], [], []
for rows in (197, 128):
    for k in (768, 3072):
        inputs.append(helper.make_tensor_value_info(f'X{rows}_{k}', TensorProto.FLOAT, [rows, k]))
    for name, k, n in (('qkv', 768, 2304), ('proj', 768, 768), ('fc1', 768, 3072), ('fc2', 3072, 768)):
        w, b = f'W{rows}{name}', f'B{rows}{name}'
        inits += [numpy_helper.from_array((rng.standard_normal((k, n)) / k ** .5).astype(np.float32), w),
                  numpy_helper.from_array((rng.standard_normal(n) * .1).astype(np.float32), b)]
        nodes += [helper.make_node('MatMul', [f'X{rows}_{k}', w], [f'M{rows}{name}']),
                  helper.make_node('Add', [f'M{rows}{name}', b], [f'Y{rows}{name}'])]
        outputs.append(helper.make_tensor_value_info(f'Y{rows}{name}', TensorProto.FLOAT, [rows, n]))
m = helper.make_model(helper.make_graph(nodes, 'small', inputs, outputs, inits),
                      opset_imports=[helper.make_opsetid('', 17)])
m.ir_version = 8
base = TARGETS['nvidia']
if 'split' in sys.argv:
    # more split-K slices for the products whose 32x32 tiles already give min_workgroups
    fields = [{}] + [dict(coopmat_workgroups=w, coopmat_short_k=0, **({'coopmat_split_steps': s} if s else {}))
                     for w, s in ((528, 0), (1056, 0), (528, 2), (1056, 2), (2112, 2), (2112, 1))] + \
        [dict(coopmat_workgroups=1056), dict(coopmat_workgroups=2112, coopmat_short_k=0, coopmat_split_steps=2,
                                             coopmat_k=32), dict(coopmat_k=128, coopmat_workgroups=1056, coopmat_short_k=0,
                                                                 coopmat_split_steps=1)]
else:
    TILES = [(2, 2, 1, 1), (2, 2, 1, 2), (2, 2, 2, 2), (2, 2, 2, 4), (2, 4, 4, 2), (2, 2, 4, 4), (1, 4, 2, 1), (2, 4, 2, 2)]
    fields = [{}] + candidates(base, 'fp16', log=lambda *a: None)
    fields += [dict(coopmat_tiles=(t,), coopmat_k=k) for t, k in itertools.product(TILES, (32, 64, 128, 256))
               if dict(coopmat_tiles=(t,), coopmat_k=k) not in fields]
    fields += [dict(coopmat_tiles=(t,), coopmat_split_steps=s) for t, s in itertools.product(TILES[:4], (2, 4))]
    fields += [dict(coopmat_workgroups=w) for w in (66, 132, 264)]
if 'list' in sys.argv:
    print(len(fields)); sys.exit()
_, measured = measure(m, base, fields, precision='fp16', repeat=10)
for problem in measured[0]:
    times = sorted((mm[problem], i) for i, mm in enumerate(measured) if problem in mm)
    print(json.dumps(dict(problem=problem, own_us=round(measured[0][problem] * 1e6, 2),
                          best=[(round(t * 1e6, 2), str(fields[i])) for t, i in times[:5]])), flush=True)
print(json.dumps(dict(fields=[str(f) for f in fields], us=[{p: round(t * 1e6, 2) for p, t in mm.items()} for mm in measured])))
