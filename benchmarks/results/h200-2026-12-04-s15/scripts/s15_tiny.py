import numpy as np, compiler
from onnx import helper, TensorProto, numpy_helper
g = helper.make_graph([helper.make_node('MatMul', ['X', 'W'], ['Y'])], 't',
    [helper.make_tensor_value_info('X', TensorProto.FLOAT, [4, 8])], [helper.make_tensor_value_info('Y', TensorProto.FLOAT, [4, 8])],
    [numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), 'W')])
m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]); m.ir_version = 8
open('.bench/tiny.vkb', 'wb').write(compiler.compile_model(m))
