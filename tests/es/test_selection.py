"""`select_parameters`: PEFT's `target_modules` convention applied to parameter names."""

import pytest

from hf_es.es.selection import module_names, select_parameters

NAMES = [
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.q_proj.bias",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.mlp.gate_proj.weight",
    "model.layers.0.input_layernorm.weight",
    "model.layers.0.post_attention_layernorm.weight",
    "model.layers.1.self_attn.q_proj.weight",
    "model.layers.1.input_layernorm.weight",
    "model.norm.weight",
]


def test_none_selects_everything_in_order():
    assert select_parameters(NAMES, None) == NAMES


def test_list_matches_module_name_suffixes_at_a_dot():
    assert select_parameters(NAMES, ["q_proj", "v_proj"]) == [
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.q_proj.bias",
        "model.layers.0.self_attn.v_proj.weight",
        "model.layers.1.self_attn.q_proj.weight",
    ]
    # "norm" is the final norm only: "input_layernorm" does not end with ".norm".
    assert select_parameters(NAMES, ["norm"]) == ["model.norm.weight"]
    assert select_parameters(NAMES, ["input_layernorm", "norm"]) == [
        "model.layers.0.input_layernorm.weight",
        "model.layers.1.input_layernorm.weight",
        "model.norm.weight",
    ]
    assert select_parameters(NAMES, ["layers.1.self_attn.q_proj"]) == ["model.layers.1.self_attn.q_proj.weight"]


def test_list_entry_can_name_a_single_parameter():
    assert select_parameters(NAMES, ["q_proj.bias"]) == ["model.layers.0.self_attn.q_proj.bias"]


def test_string_is_a_full_match_regex():
    assert select_parameters(NAMES, r".*\.(k_proj|o_proj)") == [
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
    ]
    assert select_parameters(NAMES, r".*layers\.1\..*") == [
        "model.layers.1.self_attn.q_proj.weight",
        "model.layers.1.input_layernorm.weight",
    ]


def test_regex_must_match_the_whole_name():
    with pytest.raises(ValueError, match="selects no parameter.*regular expression.*q_proj"):
        select_parameters(NAMES, "q_proj")


def test_no_match_lists_the_module_names():
    with pytest.raises(ValueError) as info:
        select_parameters(NAMES, ["proj"])
    message = str(info.value)
    assert "['proj'] selects no parameter" in message
    for leaf in ("embed_tokens", "q_proj", "input_layernorm", "norm"):
        assert leaf in message
    assert "layers.0" not in message  # layer indices are collapsed


@pytest.mark.parametrize("bad", [[], [""], ["q_proj", 3]])
def test_bad_list_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="non-empty list of module names"):
        select_parameters(NAMES, bad)


def test_invalid_regex_is_a_clear_error():
    with pytest.raises(ValueError, match="not a valid regular expression"):
        select_parameters(NAMES, "(q_proj")


def test_module_names_are_leaves_without_layer_indices():
    assert module_names(NAMES) == [
        "embed_tokens",
        "gate_proj",
        "input_layernorm",
        "k_proj",
        "norm",
        "o_proj",
        "post_attention_layernorm",
        "q_proj",
        "v_proj",
    ]


@pytest.mark.parametrize(
    "target_modules", [["q_proj", "v_proj"], ["self_attn.o_proj", "gate_proj"], r".*\.1\..*_proj"]
)
def test_selects_the_modules_peft_would_target(target_modules):
    """The same `target_modules` selects here exactly the linear layers `LoraConfig` puts adapters on."""
    peft = pytest.importorskip("peft")
    from utils import tiny_llama

    model = tiny_llama()
    names = [name for name, _ in model.named_parameters()]
    linear_weights = {f"{name}.weight" for name, module in model.named_modules() if type(module).__name__ == "Linear"}
    ours = {
        name.removesuffix(".weight") for name in select_parameters(names, target_modules) if name in linear_weights
    }
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=target_modules))
    theirs = {
        name.removeprefix("base_model.model.").removesuffix(".lora_A.default")
        for name, _ in wrapped.named_modules()
        if name.endswith(".lora_A.default")
    }
    assert ours == theirs and ours
