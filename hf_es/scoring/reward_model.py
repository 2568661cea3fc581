"""Reward models as reward functions: a sequence-classification model scores completions the way TRL's
`GRPOTrainer` does, behind the same call convention as any other reward function.

TRL's read-out (trl 1.x `GRPOTrainer._calculate_rewards`): a conversational prompt is joined with its completion and
rendered with the reward model's chat template; a plain-text prompt is concatenated with the completion; the texts are
tokenized right-padded without special tokens, and the reward is `logits[:, 0]` at the last non-padded token (the model
reads `config.pad_token_id` to find it). ES scores every member's completions, so one call per member scores
`per_device_train_batch_size x num_generations` texts, in batches of `batch_size` rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["RewardModelReward", "is_reward_model", "load_reward_model", "resolve_reward_models"]


def is_reward_model(reward_func: Any) -> bool:
    """Whether an entry of `reward_funcs` names or is a model (TRL's rule: a string, or a `torch.nn.Module`)."""
    return isinstance(reward_func, (str, torch.nn.Module))


def load_reward_model(name_or_path: str, model_init_kwargs: dict[str, Any] | None = None) -> PreTrainedModel:
    """Loads a reward model as TRL does: `AutoModelForSequenceClassification.from_pretrained(..., num_labels=1)`.

    Args:
        name_or_path: Hub id or local folder.
        model_init_kwargs: Extra `from_pretrained` arguments (e.g. `dtype`, `revision`).

    Returns:
        The model in evaluation mode.
    """
    kwargs = dict(model_init_kwargs or {})
    kwargs.pop("device_map", None)  # placed on the training device by RewardModelReward
    return AutoModelForSequenceClassification.from_pretrained(name_or_path, num_labels=1, **kwargs).eval()


class RewardModelReward:
    """A sequence-classification model in the reward-function convention `f(prompts, completions, **kwargs)`.

    Args:
        model (`PreTrainedModel`): A model with a one-logit classification head.
        processing_class (`PreTrainedTokenizerBase`, *optional*): Its tokenizer (TRL's `reward_processing_classes`);
            loaded from the model's name when omitted.
        device (`str` or `torch.device`, *optional*): Where it runs (the training device); defaults to the model's.
        batch_size (`int`, *optional*): Texts per forward pass (`None`: all of a call at once).
        chat_template_kwargs (`dict`, *optional*): Passed to the chat template, as TRL does.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        processing_class: PreTrainedTokenizerBase | None = None,
        device: str | torch.device | None = None,
        batch_size: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        model_id = str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
        if processing_class is None:
            processing_class = AutoTokenizer.from_pretrained(model_id)
        if processing_class.pad_token_id is None:
            processing_class.pad_token = processing_class.eos_token
        # The score is read at the last non-padded token, which the model finds through its pad token id.
        model.config.get_text_config().pad_token_id = processing_class.pad_token_id
        if device is not None:
            model = model.to(device)
        self.model = model.eval()
        self.processing_class = processing_class
        self.batch_size = batch_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.__name__ = model_id.rstrip("/").split("/")[-1]  # TRL's reward name: the model id's last part

    def texts(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[str]:
        """The texts the model scores, formatted as TRL formats them."""
        from trl.data_utils import apply_chat_template, is_conversational

        if is_conversational({"prompt": prompts[0]}):
            return [
                apply_chat_template(
                    {"messages": list(p) + list(c)}, self.processing_class, **self.chat_template_kwargs
                )["text"]
                for p, c in zip(prompts, completions)
            ]
        return [p + c for p, c in zip(prompts, completions)]

    @torch.inference_mode()
    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """Scores each (prompt, completion) pair; `kwargs` (dataset columns, trainer state) are not used."""
        texts = self.texts(prompts, completions)
        device = next(self.model.parameters()).device
        step = self.batch_size or len(texts) or 1
        scores: list[float] = []
        for start in range(0, len(texts), step):
            inputs = self.processing_class(
                text=texts[start : start + step],
                return_tensors="pt",
                padding=True,
                padding_side="right",
                add_special_tokens=False,
            ).to(device)
            scores += self.model(**inputs).logits[:, 0].float().tolist()
        return scores


def resolve_reward_models(
    reward_funcs: Any,
    reward_processing_classes: Any = None,
    *,
    model_init_kwargs: dict[str, Any] | None = None,
    device: str | torch.device | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[Any]:
    """`reward_funcs` with every reward model (name or model) turned into a [`RewardModelReward`], as TRL accepts them.

    Args:
        reward_funcs: A reward function, a model id / path, a model, or a list of those.
        reward_processing_classes: A tokenizer or a list with one entry per reward function (`None` for functions and
            for models whose tokenizer is loaded from their name), as in TRL.
        model_init_kwargs: `from_pretrained` arguments for reward models given by name.
        device: The training device the models run on.
        chat_template_kwargs: Passed to the reward models' chat templates.

    Returns:
        The reward functions, reward models wrapped; other entries unchanged.
    """
    if reward_funcs is None:
        return []
    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    if reward_processing_classes is None:
        classes = [None] * len(funcs)
    else:
        classes = (
            list(reward_processing_classes)
            if isinstance(reward_processing_classes, (list, tuple))
            else [reward_processing_classes]
        )
    if len(classes) != len(funcs):
        raise ValueError(
            f"reward_processing_classes has {len(classes)} entries but reward_funcs has {len(funcs)}: pass one per "
            "reward function (None for plain functions), as in TRL."
        )
    resolved = []
    for func, processing_class in zip(funcs, classes):
        if isinstance(func, str):
            func = load_reward_model(func, model_init_kwargs)
        if isinstance(func, torch.nn.Module):
            func = RewardModelReward(func, processing_class, device=device, chat_template_kwargs=chat_template_kwargs)
        elif processing_class is not None:
            raise ValueError(
                f"reward_processing_classes gives a tokenizer for {getattr(func, '__name__', func)!r}, which is not a "
                "reward model; use None for reward functions."
            )
        resolved.append(func)
    return resolved
