"""Graph -> Graph passes, in the order the compiler runs them (after fold_constants)."""
from .. import verify
from .cache_reads import bound_cache_reads
from .cache_row_stores import store_rows_in_cache
from .common_subexpressions import merge_common_subexpressions
from .concat_slices import place_concat_inputs
from .contrib_attention import expand_contrib_attention
from .onnx_attention import expand_onnx_attention
from .einsum import rewrite_einsum
from .elementwise import fuse_elementwise_chains, to_elementwise
from .empty_results import drop_empty_results
from .fuse_attention import fuse_attention
from .fuse_epilogues import fuse_epilogues
from .fuse_gelu import fuse_gelu
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .fuse_layernorm import fuse_layernorm
from .fuse_rotary import fuse_rotary
from .gather_nd import rewrite_gather_nd
from .group_query_attention import expand_group_query_attention
from .in_place_scatter import scatter_in_place
from .int8_cache import quantize_cache
from .interleaved_slices import merge_interleaved_slices
from .merge_projections import merge_projections
from .normalized_products import normalize_in_products
from .outputs import materialize_outputs, remove_dead_nodes
from .precision import apply_precision
from .quantize_weights import quantize_weights
from .quantized_matmul import pack_quantized_matmuls
from .rolls import roll_slices
from .rotary_in_attention import rotate_in_attention
from .scatter_elements import rewrite_scatter_elements
from .scale_products import scale_products
from .sliced_products import slice_products
from .row_transposes import move_row_transposes
from .sink_row_selection import sink_row_selection
from .split_large_weights import split_large_weights
from .split_parts import read_split_parts_in_place
from .store_casts import absorb_store_casts
from .transposes_in_place import (normalize_across_transposes, read_transposes_in_place, store_transposes_in_producers,
                                  take_transposes_into_layouts)
from .views import make_views

# Repeated per-layer work (a mask, a cast) is merged first, so every later pass sees it once.
# Float weights quantized at compile time (--weights) and block-quantized MatMul weights become
# MatMulNBits next, before any pass reads MatMuls.
# Contrib attention and Einsum become MatMuls next, so the fusions see one form (the per-layer
# scalars the attention expansions write merged again); rotary
# embeddings fuse while their head splits are still Reshape and Transpose nodes. The pattern
# fusions (LayerNorm, attention) read ONNX ops, so they run before to_elementwise turns those
# into expression nodes, and after make_views, so a Reshape is no step of a chain;
# take_transposes_into_layouts, once Transposes that move nothing are views, leaves a prompt's
# head splits to the layouts of their readers, so that its projections merge as a decode step's;
# merge_projections and move_row_transposes hand attention one packed Q/K/V projection, as GPT-2's
# export has, and Transposes it reads as strides; merged first, so that a Transpose the three
# projections read (HF Swin's window partition) moves across the one product.
# sink_row_selection walks raw row-wise ONNX ops, before views and fusions (which then see fewer rows).
# drop_empty_results, once views are aliases, leaves the fusions no reader of nothing.
# apply_precision retypes to float16 once those are single nodes, and before to_elementwise, so
# that its Casts fuse into elementwise chains and epilogues (or into a normalization's store:
# absorb_store_casts, once chains are fused); normalize_across_transposes and read_transposes_in_place once chains are fused (fuse_epilogues may then store a product
# permuted for its reader), store_transposes_in_producers once epilogues are. quantize_cache makes the caches int8 once their
# float type is settled, before scatter_in_place writes them in place; store_rows_in_cache and rotate_in_attention then fold a
# decode step's cache writes and rotation into the kernels around them. place_concat_inputs comes last: it
# places values in memory, once the graph's nodes are final.
PIPELINE = [merge_common_subexpressions, quantize_weights, pack_quantized_matmuls, expand_contrib_attention, expand_group_query_attention, expand_onnx_attention, merge_common_subexpressions, rewrite_einsum, rewrite_gather_nd, rewrite_scatter_elements, fuse_rotary, roll_slices, merge_interleaved_slices, sink_row_selection, make_views, drop_empty_results, slice_products, fold_batchnorm,
            split_large_weights, fuse_layernorm, fuse_gelu, take_transposes_into_layouts, merge_projections, move_row_transposes, read_split_parts_in_place, fuse_attention,
            bound_cache_reads, scale_products, apply_precision, quantize_cache, to_elementwise, remove_dead_nodes, fuse_elementwise_chains,
            normalize_across_transposes, read_transposes_in_place, fuse_epilogues, absorb_store_casts, store_transposes_in_producers, normalize_in_products, scatter_in_place, store_rows_in_cache, rotate_in_attention, materialize_outputs, place_concat_inputs]


def run_passes(graph):
    """Every pass of PIPELINE; with VKC_VERIFY=1 the IR verifier checks the graph before the
    first and after each (compiler/verify.py), naming the pass that broke it."""
    check = verify.enabled()
    if check:
        verify.verify(graph, after="the frontend and fold_constants")
    dead_nodes = False
    for p in PIPELINE:
        graph = p(graph)
        if check:
            dead_nodes = dead_nodes or p.__name__ == verify.DEAD_NODES_GONE_AFTER
            verify.verify(graph, after=p.__name__, dead_nodes=dead_nodes)
    return graph
