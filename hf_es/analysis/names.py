"""Parameter-name rules of the drift report: which module type and which transformer block a tensor belongs to."""

from __future__ import annotations

import re

__all__ = ["layer_index", "module_type"]

_MODULE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("lm_head", re.compile(r"(^|\.)(lm_head|embed_out|output_layer)\.")),
    (
        "embedding",
        re.compile(r"(^|\.)(embed_tokens|wte|wpe|word_embeddings|embed_in|embed_positions|position_embeddings)\."),
    ),
    ("norm", re.compile(r"(norm|ln_\d|ln_f|ln_attn|ln_mlp|layernorm)[^.]*\.(weight|bias)$", re.IGNORECASE)),
    ("attn_qkv", re.compile(r"\.(qkv_proj|c_attn|query_key_value|Wqkv|in_proj)\.")),
    ("attn_q", re.compile(r"\.(q_proj|query|q_a_proj|q_b_proj)\.")),
    ("attn_k", re.compile(r"\.(k_proj|key)\.")),
    ("attn_v", re.compile(r"\.(v_proj|value)\.")),
    ("attn_kv", re.compile(r"\.(kv_a_proj_with_mqa|kv_b_proj)\.")),
    (
        "attn_o",
        re.compile(
            r"\.(o_proj|out_proj|attn\.c_proj|attention\.dense|self_attention\.dense|attention\.output\.dense)\."
        ),
    ),
    (
        "mlp",
        re.compile(
            r"\.(mlp|feed_forward|ffn|experts|block_sparse_moe|gate_proj|up_proj|down_proj|fc1|fc2|c_fc|w1|w2|w3|dense_h_to_4h|dense_4h_to_h|intermediate|output)\b"
        ),
    ),
)
_LAYER_PATTERN = re.compile(r"\.(?:layers|h|blocks|layer|decoder_layers)\.(\d+)\.")


def module_type(name: str) -> str:
    """Classifies a parameter name into the module types the drift report groups by.

    Args:
        name (`str`): Fully qualified parameter name, e.g. `"model.layers.3.self_attn.q_proj.weight"`.

    Returns:
        `str`: One of `"embedding"`, `"lm_head"`, `"norm"` (LayerNorm / RMSNorm weights and biases), `"attn_q"`,
        `"attn_k"`, `"attn_v"`, `"attn_o"`, `"attn_qkv"` (fused projections), `"attn_kv"`, `"mlp"`, `"bias"` (biases
        of any other linear layer; norm biases stay `"norm"`) or `"other"`.
    """
    for kind, pattern in _MODULE_PATTERNS[:3]:
        if pattern.search(name):
            return kind
    if name.endswith(".bias"):
        return "bias"
    for kind, pattern in _MODULE_PATTERNS[3:]:
        if pattern.search(name):
            return kind
    return "other"


def layer_index(name: str) -> int | None:
    """Returns the transformer block index of a parameter (`model.layers.7.mlp...` -> `7`), or `None`."""
    match = _LAYER_PATTERN.search(name)
    return int(match.group(1)) if match else None
