"""The forms exporters write around parameters (tests/exported_forms.py: Identity of
initializers, tied and shared weights, Identity on graph inputs and outputs, inference Dropout,
same-dtype Cast, same-shape Reshape/Expand, identity Transpose) go through every fusion: the
no-ops are gone before the pattern passes, the patterns fuse as they do without them, and the
results match onnxruntime."""
from __future__ import annotations

import pytest

from tests import exported_forms
from tests.harness import check_against_onnxruntime, passes_graph

NOOPS = {"Identity", "Dropout", "Cast", "Expand", "Transpose"}


@pytest.mark.parametrize("library_init", [True, False], ids=["library_init", "random"])
def test_post_ln_block(library_init):
    model = exported_forms.post_ln_block(library_init=library_init)
    ops = [n.op_type for n in passes_graph(model).nodes]
    assert ops.count("vkc.LayerNorm") == 3
    assert ops.count("vkc.Attention") == 1
    assert not NOOPS & set(ops), ops
    check_against_onnxruntime(model)


def test_tied_embeddings():
    model = exported_forms.tied_embeddings()
    ops = [n.op_type for n in passes_graph(model).nodes]
    assert "vkc.LayerNorm" in ops and "Identity" not in ops, ops
    check_against_onnxruntime(model)


def test_shared_conv_weights():
    model = exported_forms.shared_conv_weights()
    ops = [n.op_type for n in passes_graph(model).nodes]
    assert "BatchNormalization" not in ops and "Identity" not in ops, ops
    check_against_onnxruntime(model)
