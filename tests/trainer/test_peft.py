"""PEFT adapters and `es_target_modules`: TRL's GRPOTrainer PEFT scenarios with only the names swapped, plus the ES
specifics (update formula on the adapter, save/load round trip, merged save, resume, drift)."""

import json

import pytest
import torch
from utils import make_args as shared_make_args
from utils import prompt_dataset, tiny_llama, tiny_tokenizer

from hf_es import ESTrainer
from hf_es.trainer.adapters import adapter_summary

peft = pytest.importorskip("peft")
from peft import LoraConfig, PeftModel  # noqa: E402


def target_token_reward(completion_ids, **kwargs):
    """Mean generated token id (scaled): any change of a completion changes it, so members rarely tie."""
    return [sum(ids) / max(len(ids), 1) / 49152 for ids in completion_ids]


def make_args(output_dir, **overrides):
    """`tests/utils.make_args` with this module's settings, writing to `output_dir` itself."""
    settings = dict(learning_rate=0.1, population_size=6, per_device_train_batch_size=3, max_completion_length=8)
    return shared_make_args(output_dir, output_dir=str(output_dir), **{**settings, **overrides})


def make_trainer(tmp_path, model=None, peft_config=None, reward_funcs=target_token_reward, **overrides):
    return ESTrainer(
        model=model if model is not None else tiny_llama(),
        reward_funcs=reward_funcs,
        args=make_args(tmp_path / "out", **overrides),
        train_dataset=prompt_dataset(12),
        processing_class=tiny_tokenizer(),
        peft_config=peft_config,
    )


def test_training_peft(tmp_path):
    # TRL's `test_training_peft` with GRPOConfig/GRPOTrainer swapped for ESConfig/ESTrainer (and a callable reward).
    model = tiny_llama()
    base_param_names = [f"base_model.model.{n}" for n, _ in model.named_parameters()]
    trainer = make_trainer(tmp_path, model=model, peft_config=LoraConfig())

    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert isinstance(trainer.model, PeftModel)
    # Check that the peft params have changed and the base model params have not changed (bit for bit: ES never
    # touches a frozen tensor).
    num_lora = 0
    for n, param in previous_trainable_params.items():
        new_param = trainer.model.get_parameter(n)
        if n in base_param_names or "base_layer" in n:
            assert torch.equal(param, new_param), f"Parameter {n} has changed."
        else:
            assert "lora_" in n
            num_lora += 1
            assert not torch.equal(param, new_param), f"Parameter {n} has not changed."
    assert num_lora == 8  # LoraConfig() on Llama: q_proj and v_proj of 2 layers, A and B


def test_master_covers_only_the_adapter_and_the_update_is_the_formula(tmp_path):
    from hf_es.es import make_population, zscore

    rewards_seen = []

    def recording_reward(completion_ids, **kwargs):
        values = target_token_reward(completion_ids)
        rewards_seen.append(sum(values) / len(values))
        return values

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    trainer = make_trainer(tmp_path, peft_config=lora, reward_funcs=recording_reward, max_steps=1)
    centre = trainer.backend.centre
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert set(centre.master) == trainable and all(".lora_" in n for n in trainable)
    # 2 layers x (q: A 4x32 + B 32x4, v: A 4x32 + B 16x4)
    assert centre.num_parameters == 2 * (4 * 32 + 32 * 4 + 4 * 32 + 16 * 4)
    assert adapter_summary(trainer.model) == {
        "evolved_parameters": centre.num_parameters,
        "total_parameters": centre.num_parameters + sum(p.numel() for p in tiny_llama().parameters()),
        "peft_type": "LORA",
        "r": 4,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "v_proj"],
    }
    before = {n: t.clone() for n, t in centre.master.items()}
    trainer.train()
    members = make_population(0, 0, 6)
    z = zscore(torch.tensor(rewards_seen))
    for name in (
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
        "base_model.model.model.layers.1.self_attn.v_proj.lora_B.default.weight",
    ):
        expected = before[name] + 0.1 / 6 * sum(
            float(z[i]) * centre.noise.full(m.seed, name, before[name].shape) for i, m in enumerate(members)
        )
        assert torch.allclose(centre.master[name], expected, atol=1e-6)
        assert torch.equal(trainer.model.get_parameter(name).data, centre.master[name])  # restored to the centre


def test_adapter_save_load_round_trip_and_merged_save_on_request(tmp_path):
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    trainer = make_trainer(tmp_path, peft_config=lora)
    base_before = {n: p.clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    trainer.train()
    out = tmp_path / "out"
    trainer.save_model()
    assert (out / "adapter_model.safetensors").is_file() and (out / "adapter_config.json").is_file()
    assert not (out / "model.safetensors").exists()  # the adapter, as PeftModel.save_pretrained writes it
    assert not (out / "merged").exists()  # only on request

    reloaded = PeftModel.from_pretrained(tiny_llama(), str(out))
    reloaded_params = dict(reloaded.named_parameters())
    for name, master in trainer.backend.centre.master.items():
        assert torch.equal(reloaded_params[name].data, master), name

    trainer.args.save_merged_model = True
    trainer.save_model(str(tmp_path / "with_merged"))
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "with_merged" / "merged"))
    expected = reloaded.merge_and_unload()
    for name, param in expected.named_parameters():
        assert torch.allclose(merged.get_parameter(name), param, atol=1e-7), name
    q_name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged.get_parameter(q_name), tiny_llama().get_parameter(q_name))  # the adapter is in
    # Merging worked on a copy: the trainer's base weights are still bit-identical.
    for name, param in base_before.items():
        assert torch.equal(trainer.model.get_parameter(name), param), name


def test_resume_from_adapter_checkpoint_reproduces_the_uninterrupted_run(tmp_path):
    lora = LoraConfig(r=2, target_modules=["q_proj"])
    full = make_trainer(tmp_path / "a", peft_config=lora, max_steps=2)
    full.train()
    first = make_trainer(tmp_path / "b", peft_config=lora, max_steps=2, save_strategy="steps", save_steps=1)
    first.train()
    checkpoint = tmp_path / "b" / "out" / "checkpoint-1"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    resumed = make_trainer(tmp_path / "c", peft_config=lora, max_steps=2)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    for name, master in full.backend.centre.master.items():
        assert torch.equal(resumed.backend.centre.master[name], master), name


def test_model_card_drift_is_measured_on_the_merged_weights(tmp_path):
    base_dir = tmp_path / "base"
    tiny_llama().save_pretrained(base_dir)
    tiny_tokenizer().save_pretrained(base_dir)
    lora = LoraConfig(r=4, target_modules=["v_proj"])
    trainer = make_trainer(tmp_path, model=str(base_dir), peft_config=lora, max_steps=1)
    trainer.train()
    trainer.save_model()
    with open(tmp_path / "out" / "drift_stats.json") as f:
        drift = json.load(f)
    assert not drift["missing_in_base"] and not drift["missing_in_tuned"]
    changed = {name for name, stats in drift["per_tensor"].items() if stats["num_unchanged"] < stats["numel"]}
    assert changed == {f"model.layers.{i}.self_attn.v_proj.weight" for i in range(2)}


def test_es_target_modules_evolves_only_the_selection(tmp_path):
    selection = ["o_proj", "input_layernorm"]
    trainer = make_trainer(tmp_path, es_target_modules=selection, sigma=0.2)
    before = {n: p.clone() for n, p in trainer.model.named_parameters()}
    selected = {n for n in before if ".o_proj." in n or ".input_layernorm." in n}
    assert set(trainer.backend.centre.master) == selected  # no fp32 master for the rest
    summary = adapter_summary(trainer.model, selection)
    assert summary["es_target_modules"] == selection
    assert (
        summary["evolved_parameters"]
        == sum(before[n].numel() for n in selected)
        == trainer.backend.centre.num_parameters
    )
    trainer.train()
    for name, param in trainer.model.named_parameters():
        if name in selected:
            assert not torch.equal(param, before[name]), f"Parameter {name} has not changed."
        else:
            assert torch.equal(param, before[name]), f"Parameter {name} has changed."


def test_es_target_modules_regex_and_no_match_error(tmp_path):
    trainer = make_trainer(tmp_path, es_target_modules=r".*\.layers\.1\..*", max_steps=1)
    assert set(trainer.backend.centre.master) == {
        n for n, _ in trainer.model.named_parameters() if n.startswith("model.layers.1.")
    }
    with pytest.raises(ValueError, match=r"selects no parameter.*q_proj"):
        make_trainer(tmp_path, es_target_modules=["attention"])


def test_peft_and_selection_are_refused_with_vllm(tmp_path):
    for kwargs in ({"peft_config": LoraConfig()}, {"es_target_modules": ["q_proj"]}):
        with pytest.raises(ValueError, match="use_vllm=True.*transformers backend"):
            make_trainer(tmp_path, use_vllm=True, **kwargs)


def test_peft_config_errors_name_the_fix(tmp_path):
    with pytest.raises(TypeError, match="peft.PeftConfig"):
        make_trainer(tmp_path, peft_config={"r": 8})
    wrapped = peft.get_peft_model(tiny_llama(), LoraConfig())
    with pytest.raises(ValueError, match="merge_and_unload"):
        make_trainer(tmp_path, model=wrapped, peft_config=LoraConfig())


def test_a_peft_model_passed_directly_evolves_its_adapter(tmp_path):
    wrapped = peft.get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["o_proj"]))
    trainer = make_trainer(tmp_path, model=wrapped)
    assert set(trainer.backend.centre.master) == {n for n, p in wrapped.named_parameters() if p.requires_grad}
    assert len(trainer.backend.centre.master) == 4  # o_proj of 2 layers, A and B
