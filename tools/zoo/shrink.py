"""Shrink a transformers config to a small model of the same architecture: width 32, 2 layers,
2 heads, a small vocabulary and small images; nested configs (text, vision, audio, encoder,
decoder) likewise. Attribute names differ between families, so each size has its list."""
from __future__ import annotations

HIDDEN = 32
FFN = 64
LAYERS = 2
HEADS = 2
VOCAB = 128
POSITIONS = 64
IMAGE = 32
PATCH = 8

SIZES = (  # (small value, the attribute names that hold it)
    (HIDDEN, ("hidden_size", "d_model", "n_embd", "embed_dim", "word_embed_proj_dim", "projection_dim",
             "embedding_size", "d_embed", "text_embed_dim", "vision_embed_dim", "encoder_hidden_size")),
    (FFN, ("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner",
          "moe_intermediate_size", "shared_expert_intermediate_size", "mlp_dim", "d_inner",
          "linear_units", "decoder_intermediate_size", "encoder_intermediate_size")),
    (LAYERS, ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
             "num_encoder_layers", "num_decoder_layers", "depth", "num_blocks")),
    (HEADS, ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads",
            "num_heads", "num_key_value_heads", "num_kv_heads", "n_kv_heads")),
    (VOCAB, ("vocab_size",)),
    (POSITIONS, ("max_position_embeddings", "n_positions", "max_source_positions", "max_target_positions",
                "n_ctx", "max_seq_len", "seq_length")),
    (IMAGE, ("image_size",)),
    (PATCH, ("patch_size",)),
)
SMALL_INTS = {"num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
              "head_dim": HIDDEN // HEADS, "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8,
              "qk_nope_head_dim": 8, "v_head_dim": 16, "hidden_dim": FFN, "dim": HIDDEN,
              "num_mel_bins": 16, "conv_dim_last": HIDDEN, "attention_window": 8}
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
             "cls_token_id", "unk_token_id", "mask_token_id", "image_token_id", "video_token_id")


def shrink_config(config, depth: int = 0):
    """The config, changed in place and returned."""
    for size, names in SIZES:
        for name in names:
            value = getattr(config, name, None)
            if isinstance(value, bool) or value is None:
                continue
            if isinstance(value, int) and value > size:
                setattr(config, name, size)
            elif isinstance(value, (list, tuple)) and name in ("image_size", "patch_size"):
                setattr(config, name, [min(v, size) for v in value])
    for name, small in SMALL_INTS.items():
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > small:
            setattr(config, name, small)
    if isinstance(getattr(config, "depths", None), (list, tuple)):  # hierarchical vision models
        config.depths = [1] * len(config.depths)
    for name in ("hidden_sizes", "embed_dims", "hidden_dims"):
        value = getattr(config, name, None)
        if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
            setattr(config, name, [min(v, HIDDEN * 2 ** i) for i, v in enumerate(value)])
    if isinstance(getattr(config, "num_heads", None), (list, tuple)):
        config.num_heads = [min(h, HEADS) for h in config.num_heads]
    if isinstance(getattr(config, "layer_types", None), (list, tuple)):
        config.layer_types = list(config.layer_types)[:_layers(config)]
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        for name in TOKEN_IDS:
            value = getattr(config, name, None)
            if isinstance(value, int) and value >= vocab:
                setattr(config, name, vocab - 1 - TOKEN_IDS.index(name))
    if depth < 3:
        for name in list(vars(config)):
            sub = getattr(config, name, None)
            if hasattr(sub, "to_diff_dict") and sub is not config:
                shrink_config(sub, depth + 1)
    return config


def _layers(config) -> int:
    for name in SIZES[2][1]:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return LAYERS
