"""Gone: expr.Renderer renders trees on every dtype, and each op's dtypes follow from its texts in
elementwise_ops.py. These names stay only until support_table.py imports them from there."""
from .elementwise_ops import FLOAT64_OPS, INTEGER_OPS  # noqa: F401
