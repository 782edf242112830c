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
              "qk_nope_head_dim": 8, "v_head_dim": 16, "rotary_dim": HIDDEN // HEADS // 2, "hidden_dim": FFN,
              "dim": HIDDEN, "n_group": 2, "topk_group": 1, "num_groups": 2,
              "num_mel_bins": 16, "conv_dim_last": HIDDEN, "attention_window": 8}
# Per-head widths: those equal before shrinking stay equal (an MLA model's rotary embedding is
# head_dim wide, its rotated part qk_rope_head_dim: both 64 in DeepSeek-V2's config).
HEAD_DIMS = ("head_dim", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
             "cls_token_id", "unk_token_id", "mask_token_id", "image_token_id", "video_token_id")


def shrink_config(config, depth: int = 0):
    """The config, changed in place and returned."""
    widths = {name: getattr(config, name) for name in HEAD_DIMS if _is_int(getattr(config, name, None))}
    before = {name: value for name, value in vars(config).items() if _is_int(value)}
    stages = _stage_count(config)
    for size, names in SIZES:
        for name in names:
            value = getattr(config, name, None)
            if isinstance(value, bool) or value is None:
                continue
            if size == LAYERS and value == stages:  # a hierarchical model's stages, one per depth
                continue
            if isinstance(value, int) and value > size:
                setattr(config, name, size)
            elif isinstance(value, (list, tuple)) and name in ("image_size", "patch_size"):
                setattr(config, name, [min(v, size) for v in value])
    for name, small in SMALL_INTS.items():
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > small:
            setattr(config, name, small)
    if getattr(config, "num_experts_per_tok", 0) is None and _is_int(getattr(config, "n_routed_experts", None)):
        config.num_experts_per_tok = SMALL_INTS["num_experts_per_tok"]  # a default left for the user to set
    _keep_equal(config, widths)
    _groups_follow(config, before)
    if _is_int(getattr(config, "qk_head_dim", None)) and {"qk_nope_head_dim", "qk_rope_head_dim"} <= set(widths):
        config.qk_head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
    _mrope_sections(config)
    if isinstance(getattr(config, "depths", None), (list, tuple)):  # hierarchical vision models
        config.depths = [1] * len(config.depths)
        _window_fits(config)
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


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _stage_count(config) -> int | None:
    """How many stages a hierarchical model has (a depth each): its layer count where that is it."""
    depths = getattr(config, "depths", None)
    return len(depths) if isinstance(depths, (list, tuple)) else None


def _keep_equal(config, widths: dict) -> None:
    """Per-head widths equal before shrinking take the smallest of their shrunk values."""
    for original in set(widths.values()):
        names = [n for n, v in widths.items() if v == original]
        small = min(getattr(config, n) for n in names)
        for name in names:
            setattr(config, name, small)


def _mrope_sections(config) -> None:
    """A multimodal rotary embedding (Qwen2-VL's, GLM-4V's) splits the rotary half of a head
    into temporal, height and width sections, 2:3:3 by default (16, 24, 24 of 64), a default
    the modeling code holds, sized for the full head; the config says it takes one
    (mrope_section among the keys its rope validation ignores). Shrunk, the sections are the
    shrunk half's, 2:3:3."""
    if "mrope_section" not in getattr(type(config), "ignore_keys_at_rope_validation", ()):
        return
    rope = getattr(config, "rope_parameters", None)
    heads = getattr(config, "num_attention_heads", None)
    if not isinstance(rope, dict) or not _is_int(heads) or not _is_int(getattr(config, "hidden_size", None)):
        return
    head = getattr(config, "head_dim", None) or config.hidden_size // heads
    half = int(head * rope.get("partial_rotary_factor", 1.0)) // 2
    rope["mrope_section"] = [half - 2 * (3 * half // 8), 3 * half // 8, 3 * half // 8]


def _window_fits(config) -> None:
    """A windowed hierarchical model (Swin) sized for 224 pixels has its last stage one window
    wide (7 patches of 32 pixels); the shrunk image's last stage is as wide as its window."""
    window, image, patch = (getattr(config, n, None) for n in ("window_size", "image_size", "patch_size"))
    if _is_int(window) and _is_int(image) and _is_int(patch):
        config.window_size = min(window, max(1, image // patch // 2 ** (len(config.depths) - 1)))


def _groups_follow(config, before: dict) -> None:
    """A convolution's group count equal to a width before shrinking (Mimi's depthwise
    upsampling: upsample_groups = hidden_size) takes that width's shrunk value."""
    shrunk = {before[n]: getattr(config, n) for n in before if getattr(config, n, None) != before[n]}
    for name, value in before.items():
        if name.endswith("groups") and getattr(config, name) == value and value in shrunk:
            setattr(config, name, shrunk[value])
