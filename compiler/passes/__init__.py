"""Graph -> Graph passes, in the order the compiler runs them (after fold_constants)."""
from .contrib_attention import expand_contrib_attention
from .elementwise import fuse_elementwise_chains, to_elementwise
from .fuse_attention import fuse_attention
from .fuse_epilogues import fuse_epilogues
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .outputs import materialize_outputs, remove_dead_nodes
from .split_large_weights import split_large_weights
from .views import make_views

PIPELINE = [expand_contrib_attention, make_views, fold_batchnorm, split_large_weights,
            fuse_attention, to_elementwise, remove_dead_nodes, fuse_elementwise_chains,
            fuse_epilogues, materialize_outputs]


def run_passes(graph):
    for p in PIPELINE:
        graph = p(graph)
    return graph
