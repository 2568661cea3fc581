"""Issue 21: the start-up check proves that perturbations reach the logits, group by group, and restore exactly."""

from __future__ import annotations

import pytest
import torch
from utils import make_args, make_trainer, prompt_dataset, target_token_reward, tiny_llama, tiny_tokenizer

from hf_es import ESTrainer
from hf_es.es import NoiseTable
from hf_es.generation import TransformersGenerationBackend
from hf_es.trainer.probe import PerturbationsDoNotLand, check_perturbations_land, weight_group

NOISE = NoiseTable(size=1 << 16, chunk_size=1 << 10)
GROUPS = ["embeddings / LM head", "attention", "MLP", "norms"]


class DetachedCopyBackend(TransformersGenerationBackend):
    """Hands ES a copy of the weights: what an engine that repacks or caches its weights does in effect."""

    def live_weights(self) -> dict[str, torch.Tensor]:
        return {name: tensor.clone() for name, tensor in super().live_weights().items()}


def test_weight_groups_follow_hf_parameter_names():
    assert weight_group("model.layers.0.self_attn.q_proj.weight") == "attention"
    assert weight_group("model.layers.0.mlp.down_proj.weight") == "MLP"
    assert weight_group("model.embed_tokens.weight") == "embeddings / LM head"
    assert weight_group("lm_head.weight") == "embeddings / LM head"
    assert weight_group("model.layers.3.input_layernorm.weight") == "norms"
    assert weight_group("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight") == "adapters"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_backend_that_computes_with_its_live_weights_passes_and_is_left_at_the_centre(dtype):
    backend = TransformersGenerationBackend(tiny_llama().to(dtype), tiny_tokenizer())
    centre = backend.init_centre(NOISE)
    before = backend.prompt_logits(["Hello there"])
    probe = check_perturbations_land(backend)
    assert list(probe.groups) == GROUPS and probe.skipped == []
    assert probe.forwards == 1 + 2 * len(GROUPS)
    for name, tensor in centre.parameters.items():
        assert torch.equal(tensor, centre.master[name].to(dtype)), name
    assert torch.equal(backend.prompt_logits(["Hello there"]), before)


def test_a_backend_whose_live_weights_are_a_detached_copy_stops_naming_the_group():
    backend = DetachedCopyBackend(tiny_llama(), tiny_tokenizer())
    backend.init_centre(NOISE)
    with pytest.raises(
        PerturbationsDoNotLand, match=r"Perturbing the embeddings / LM head weights .* leaves the logits"
    ):
        check_perturbations_land(backend)


def test_groups_a_low_rank_centre_does_not_perturb_are_skipped_not_failed():
    backend = TransformersGenerationBackend(tiny_llama(), tiny_tokenizer())
    backend.init_centre(NOISE, perturbation="low_rank", rank=1, non_matrix_noise="none")
    probe = check_perturbations_land(backend)
    assert probe.skipped == ["norms"] and probe.forwards == 1 + 2 * 3


def test_the_trainer_checks_at_start_unless_disabled(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("hf_es.trainer.es_trainer.check_perturbations_land", calls.append)
    trainer = make_trainer(tmp_path)
    assert calls == [trainer.backend]
    make_trainer(tmp_path, check_perturbations=False)
    assert len(calls) == 1


def test_a_trainer_whose_backend_does_not_see_the_writes_stops_before_training(tmp_path):
    model = tiny_llama()
    with pytest.raises(PerturbationsDoNotLand, match="in-place writes do not reach generation"):
        ESTrainer(
            model=model,
            reward_funcs=target_token_reward,
            args=make_args(tmp_path),
            train_dataset=prompt_dataset(4),
            processing_class=tiny_tokenizer(),
            generation_backend=DetachedCopyBackend(model, tiny_tokenizer()),
        )


def test_the_check_runs_again_after_a_resume(tmp_path, monkeypatch):
    first = make_trainer(tmp_path, max_steps=1, save_strategy="steps", save_steps=1)
    first.train()
    calls = []
    monkeypatch.setattr("hf_es.trainer.es_trainer.check_perturbations_land", calls.append)
    resumed = make_trainer(tmp_path, max_steps=2, save_strategy="no")
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-1"))
    assert calls == [resumed.backend, resumed.backend]  # at construction, then on the resumed centre
