"""Graph -> Graph passes, in the order the compiler runs them (after fold_constants)."""
from .einsum import rewrite_einsum
from .elementwise import fuse_elementwise_chains, to_elementwise
from .fuse_epilogues import fuse_epilogues
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .fuse_layernorm import fuse_layernorm
from .outputs import materialize_outputs, remove_dead_nodes
from .precision import apply_precision
from .split_large_weights import split_large_weights
from .views import make_views

# fuse_layernorm reads the ONNX ops of a normalization chain, so it runs before to_elementwise
# turns them into expression nodes (and after make_views, so a Reshape is no chain step).
# apply_precision retypes to float16 once normalizations are single nodes, and before
# to_elementwise, so that its Casts fuse into elementwise chains and epilogues.
PIPELINE = [rewrite_einsum, make_views, fold_batchnorm, split_large_weights, fuse_layernorm,
            apply_precision, to_elementwise, remove_dead_nodes, fuse_elementwise_chains,
            fuse_epilogues, materialize_outputs]


def run_passes(graph):
    for p in PIPELINE:
        graph = p(graph)
    return graph
