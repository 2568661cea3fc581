"""ESTrainer accepts every GRPOTrainer argument of the installed TRL by name, and explains the ones ES refuses."""

from __future__ import annotations

import inspect

import pytest
import trl
from transformers import Trainer
from utils import make_args, prompt_dataset, target_token_reward, tiny_llama, tiny_tokenizer

from hf_es import ESTrainer
from hf_es.trainer.trl_compat import GRPO_ONLY_ARGUMENTS


def make_trainer(tmp_path, **trainer_kwargs) -> ESTrainer:
    return ESTrainer(
        model=tiny_llama(),
        reward_funcs=target_token_reward,
        args=make_args(tmp_path),
        train_dataset=prompt_dataset(4),
        processing_class=tiny_tokenizer(),
        **trainer_kwargs,
    )


def _parameters(func) -> list[str]:
    return [name for name in inspect.signature(func).parameters if name != "self"]


def test_every_grpo_trainer_argument_is_accepted_in_the_same_order():
    grpo = _parameters(trl.GRPOTrainer.__init__)
    ours = _parameters(ESTrainer.__init__)
    assert ours[: len(grpo)] == grpo, "a TRL upgrade changed GRPOTrainer's arguments: handle them in ESTrainer"
    handled_by_refusal = set(GRPO_ONLY_ARGUMENTS)
    assert handled_by_refusal <= set(grpo)


@pytest.mark.parametrize("name", sorted(GRPO_ONLY_ARGUMENTS))
def test_grpo_only_arguments_work_as_none_and_are_refused_with_the_fix(tmp_path, name):
    trainer = make_trainer(tmp_path, **{name: None})
    assert trainer.backend is not None
    with pytest.raises(ValueError, match=name) as caught:
        make_trainer(tmp_path, **{name: object()})
    message = str(caught.value)
    assert "Evolution Strategies" in message
    assert any(word in message for word in ("reward", "generation_backend", "bf16"))


def test_quantization_config_is_refused_with_the_reason(tmp_path):
    from transformers import BitsAndBytesConfig

    with pytest.raises(ValueError, match="plain floating-point weights"):
        make_trainer(tmp_path, quantization_config=BitsAndBytesConfig(load_in_4bit=True))


def test_push_to_hub_and_end_keep_the_trainer_signatures(tmp_path):
    assert _parameters(ESTrainer.push_to_hub) == _parameters(trl.GRPOTrainer.push_to_hub)
    trainer = make_trainer(tmp_path)
    ended = []
    trainer.accelerator.end_training = lambda: ended.append(True)
    trainer.end()
    assert ended == [True]
    assert ESTrainer.end is Trainer.end or _parameters(ESTrainer.end) == _parameters(Trainer.end)


def test_signature_test_fails_on_an_unhandled_argument(monkeypatch):
    """The coverage check above is not vacuous: a GRPOTrainer with one more argument breaks it."""

    def grpo_init(self, *args, new_argument=None, **kwargs):  # pragma: no cover - signature only
        pass

    params = list(inspect.signature(trl.GRPOTrainer.__init__).parameters.values())
    extra = inspect.Parameter("new_argument", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
    grpo_init.__signature__ = inspect.Signature(params + [extra])
    monkeypatch.setattr(trl.GRPOTrainer, "__init__", grpo_init)
    with pytest.raises(AssertionError):
        test_every_grpo_trainer_argument_is_accepted_in_the_same_order()


def test_every_model_card_keyword_of_trl_and_trainer_is_accepted_and_used(tmp_path):
    """`push_to_hub(**kwargs)` passes its keywords to `create_model_card`, in TRL as in `Trainer`."""
    from huggingface_hub import ModelCard

    keywords = set(_parameters(trl.GRPOTrainer.create_model_card)) | set(_parameters(Trainer.create_model_card))
    trainer = make_trainer(tmp_path)
    trainer.create_model_card(**{name: None for name in keywords})  # every name accepted
    trainer.create_model_card(model_name="my-es-model", dataset_name="my/dataset", tags="my-tag", license="mit")
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert "my-tag" in card.data.tags and "hf_es" in card.data.tags
    assert card.data.license == "mit"
    assert "my/dataset" in (card.data.datasets or [])
    assert "my-es-model" in card.text
