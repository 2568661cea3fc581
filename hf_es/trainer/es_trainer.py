"""[`ESTrainer`]: Evolution Strategies post-training with TRL's GRPOTrainer interface.

One step, as in the paper: lay out N members (seeded directions), evaluate this process's share of them on the
step's shared mini-batch (perturb in place, generate, score), exchange only the N rewards, shape them, and apply the
identical update on every process. The trainer reuses `transformers.Trainer` for the loop, callbacks, logging,
checkpoints and Hub pushes; it replaces the optimizer with the ES update and never runs a backward pass.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object
from datasets import Dataset, IterableDataset
from safetensors.torch import load_file, save_file
from torch.utils.data import BatchSampler, DataLoader, Sampler
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
)
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, set_seed, sort_checkpoints
from transformers.utils import logging

from ..es import (
    check_same_noise_on_every_process,
    estimate_update,
    get_fitness_shaping,
    make_noise_source,
    make_population,
    master_device_for,
    stable_seed,
)
from ..generation import GenerationBackend, GenerationResult, SamplingConfig, TransformersGenerationBackend
from ..models import base_model_id
from ..rewards import get_reward_stats
from .es_config import ESConfig
from .reward_calls import TRAINER_REWARD_ARGS, RewardTimeout, call_with_timeout, missing_column
from .utils import RewardTally, write_redacted_training_args

logger = logging.get_logger(__name__)

__all__ = ["ESTrainer", "RewardFunctionError"]

RewardFunc = Callable[..., Sequence[float | None]]

ES_MASTER_NAME = "es_master.safetensors"
ES_STATE_NAME = "es_state.json"
LINEAGE_NAME = "hf_es_lineage.json"
# Checkpoints are written under this prefix and renamed to `checkpoint-N` once complete. The name matches neither
# Trainer's `checkpoint-*` glob (rotation, resume) nor anything pushed to the Hub (`_*` is ignored).
STAGING_PREFIX = f"_tmp-{PREFIX_CHECKPOINT_DIR}-"
_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
# Not pushed to the repo root: checkpoint and staging folders, TensorBoard runs, the fp32 master (resume-only).
_HUB_ROOT_IGNORE = ("_*", f"{PREFIX_CHECKPOINT_DIR}-*", "runs/*", ES_MASTER_NAME)
# Reward-function arguments the trainer always passes (TRL's convention); any other required one is a dataset column.
# ES state fields that must match between a checkpoint and the resuming run for the resume to be exact.
_RESUME_FIELDS = (
    "seed",
    "noise_seed",
    "noise_type",
    "noise_table_size",
    "population_size",
    "sigma",
    "estimator",
    "fitness_shaping",
    "per_device_train_batch_size",
    "shuffle_dataset",
    "num_generations",
    "max_completion_length",
    "temperature",
    "top_p",
    "top_k",
)


class RewardFunctionError(RuntimeError):
    """A reward function raised, hung, returned the wrong number of values, or a non-finite value."""


class ProcessFailedError(RuntimeError):
    """Another process of a multi-process run failed during the ES step; raised on every healthy process."""


def _valid_text(text: str) -> tuple[str, bool]:
    """Replaces what cannot be UTF-8 (lone surrogates, e.g. from bytes decoded with `surrogateescape`) by U+FFFD."""
    try:
        text.encode("utf-8")
        return text, False
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", errors="surrogatepass")
    return raw.decode("utf-8", errors="replace"), True


class _EpochShuffleSampler(Sampler[int]):
    """Shuffles with a generator seeded by (seed, epoch): every process draws the same order, and a resumed run
    draws the same order as an uninterrupted one."""

    def __init__(self, num_samples: int, seed: int, shuffle: bool):
        self.num_samples, self.seed, self.shuffle, self.epoch = num_samples, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(range(self.num_samples))
        generator = torch.Generator().manual_seed(stable_seed(self.seed, self.epoch, "data"))
        return iter(torch.randperm(self.num_samples, generator=generator).tolist())

    def __len__(self) -> int:
        return self.num_samples


class _EpochBatchSampler(BatchSampler):
    """Batches of `_EpochShuffleSampler` that forward `set_epoch`: when Trainer resumes mid-epoch it wraps the batch
    sampler to skip the batches already trained on, and sets the epoch through `batch_sampler.batch_sampler`."""

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)


class _SharedBatchDataLoader(DataLoader):
    """A DataLoader that is *not* sharded across processes: in ES every process evaluates the same prompts."""

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)


class _NoOptimizer(torch.optim.Optimizer):
    """Carries the learning-rate schedule for `Trainer`; ES updates the weights itself, with no optimizer state."""

    def __init__(self, learning_rate: float):
        super().__init__([torch.zeros(0, requires_grad=True)], {"lr": learning_rate})

    def step(self, closure=None):
        return None


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _identity_collator(features: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return features


def _is_conversational(prompt: Any) -> bool:
    return isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt)


class ESTrainer(Trainer):
    """Trainer for Evolution Strategies post-training, with the constructor of TRL's `GRPOTrainer`.

    Args:
        model (`str` or `PreTrainedModel`):
            Model id on the Hub, local path, or an instantiated causal LM. Strings load with
            `AutoModelForCausalLM.from_pretrained(model, **args.model_init_kwargs)`.
        reward_funcs (`Callable` or `list[Callable]`):
            Reward functions with TRL's signature `f(prompts, completions, completion_ids, **columns)` returning one
            float (or `None` for "not applicable") per completion. Dataset columns other than `prompt` arrive as
            keyword arguments, one value per completion.
        args ([`ESConfig`], *optional*):
            Configuration; defaults to `ESConfig(output_dir="<model name>-ES")`.
        train_dataset ([`~datasets.Dataset`]):
            Needs a `prompt` column: text, or a list of chat messages (the chat template is applied).
        eval_dataset ([`~datasets.Dataset`] or `dict[str, Dataset]`, *optional*):
            Evaluated with the centre weights; logs `eval_reward` and per-function means.
        processing_class ([`~transformers.PreTrainedTokenizerBase`], *optional*):
            Tokenizer; loaded from `model` when omitted.
        callbacks (`list[TrainerCallback]`, *optional*):
            Extra callbacks.
        optimizers (*optional*):
            Must be `(None, None)`: ES has no optimizer. Kept for signature compatibility.
        peft_config (*optional*):
            Not supported yet.
        generation_backend ([`GenerationBackend`], *optional*):
            Engine adapter; defaults to transformers `generate` (or vLLM when `args.use_vllm`).
    """

    _tag_names = ["hf_es", "evolution-strategies"]

    def __init__(
        self,
        model: str | PreTrainedModel,
        reward_funcs: RewardFunc | list[RewardFunc] | None = None,
        args: ESConfig | None = None,
        train_dataset: Dataset | None = None,
        eval_dataset: Dataset | dict[str, Dataset] | None = None,
        processing_class: PreTrainedTokenizerBase | None = None,
        reward_processing_classes: Any = None,
        callbacks: list[TrainerCallback] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        peft_config: Any = None,
        generation_backend: GenerationBackend | None = None,
    ):
        model_id = model if isinstance(model, str) else model.config._name_or_path
        self.base_model_id = str(model_id)
        if args is None:
            args = ESConfig(output_dir=f"{str(model_id).rstrip('/').split('/')[-1]}-ES")
        if not isinstance(args, ESConfig):
            raise TypeError(
                f"args must be an ESConfig, got {type(args).__name__}. To reuse a GRPOConfig, pass "
                "`ESConfig.from_grpo_config(grpo_config)`."
            )
        if peft_config is not None:
            raise NotImplementedError("ESTrainer does not support PEFT adapters yet; pass the full model.")
        if optimizers != (None, None):
            raise ValueError("ESTrainer has no optimizer: the ES update replaces it. Leave `optimizers` unset.")
        if reward_processing_classes is not None:
            raise NotImplementedError("Model-based rewards are not supported yet; pass reward callables.")

        if isinstance(model, str):
            model = self._load_model(model, args)
        if processing_class is None:
            processing_class = AutoTokenizer.from_pretrained(model_id, trust_remote_code=args.trust_remote_code)
        if processing_class.pad_token is None:
            processing_class.pad_token = processing_class.eos_token

        self.reward_funcs = self._check_reward_funcs(reward_funcs)
        self.reward_func_names = [getattr(f, "__name__", type(f).__name__) for f in self.reward_funcs]
        weights = args.reward_weights or [1.0] * len(self.reward_funcs)
        if len(weights) != len(self.reward_funcs):
            raise ValueError(
                f"reward_weights has {len(weights)} entries but there are {len(self.reward_funcs)} reward functions."
            )
        self.reward_weights = torch.tensor(weights, dtype=torch.float64)

        for name, dataset in self._named_datasets(train_dataset, eval_dataset):
            self._check_dataset(dataset, name)
            self._check_reward_columns(dataset, name)

        super().__init__(
            model=model,
            args=args,
            data_collator=_identity_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
        )
        self.sampling = SamplingConfig.from_args(args)
        self.fitness_shaping = get_fitness_shaping(args.fitness_shaping)
        self.backend = generation_backend or self._default_backend()
        self._init_centre_on_device()  # issue 12
        self._metrics: dict[str, dict[str, list[float]]] = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._last_samples: list[tuple[str, str, float]] = []
        self._total_generated_tokens = 0

    # ------------------------------------------------------------------ setup

    @staticmethod
    def _load_model(model_id: str, args: ESConfig) -> PreTrainedModel:
        kwargs = dict(args.model_init_kwargs or {})
        dtype = kwargs.get("dtype", kwargs.pop("torch_dtype", "auto"))
        if isinstance(dtype, str) and dtype != "auto":
            dtype = getattr(torch, dtype)
        kwargs["dtype"] = dtype
        kwargs.setdefault("trust_remote_code", args.trust_remote_code)
        return AutoModelForCausalLM.from_pretrained(model_id, **kwargs)

    @staticmethod
    def _check_reward_funcs(reward_funcs: RewardFunc | list[RewardFunc] | None) -> list[RewardFunc]:
        if reward_funcs is None:
            raise ValueError("ESTrainer needs at least one reward function (reward_funcs=...).")
        funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        if not funcs:
            raise ValueError("ESTrainer needs at least one reward function (reward_funcs=...).")
        for func in funcs:
            if isinstance(func, str):
                raise NotImplementedError(
                    f"Reward model {func!r}: reward models given by name are not supported yet; pass a callable."
                )
            if not callable(func):
                raise TypeError(f"Reward functions must be callables, got {type(func).__name__}.")
        return funcs

    @staticmethod
    def _named_datasets(train_dataset, eval_dataset) -> list[tuple[str, Any]]:
        named = [("train_dataset", train_dataset)]
        if isinstance(eval_dataset, dict):
            named += [(f"eval_dataset[{key!r}]", ds) for key, ds in eval_dataset.items()]
        else:
            named.append(("eval_dataset", eval_dataset))
        return [(name, ds) for name, ds in named if ds is not None]

    @staticmethod
    def _check_dataset(dataset: Any, name: str) -> None:
        if isinstance(dataset, IterableDataset):
            raise NotImplementedError(f"{name} is an IterableDataset; ESTrainer needs a map-style Dataset.")
        columns = getattr(dataset, "column_names", None)
        if columns is not None and "prompt" not in columns:
            raise ValueError(
                f"{name} has no 'prompt' column (columns: {columns}). Rename the column holding the prompts, e.g. "
                f"`{name} = {name}.rename_column('question', 'prompt')`."
            )
        if len(dataset) == 0:
            raise ValueError(f"{name} is empty.")

    def _check_reward_columns(self, dataset: Any, name: str) -> None:
        """Fails early when a reward function declares a required argument that is no column of `dataset`."""
        columns = list(getattr(dataset, "column_names", None) or [])
        if not columns:
            return
        for func, func_name in zip(self.reward_funcs, self.reward_func_names):
            try:
                parameters = inspect.signature(func).parameters.values()
            except (TypeError, ValueError):
                continue
            for parameter in parameters:
                required = parameter.default is inspect.Parameter.empty and parameter.kind in (
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    inspect.Parameter.KEYWORD_ONLY,
                )
                if required and parameter.name not in TRAINER_REWARD_ARGS and parameter.name not in columns:
                    raise ValueError(
                        f"Reward function {func_name!r} " + self._missing_column_message(parameter.name, columns, name)
                    )

    @staticmethod
    def _missing_column_message(column: str, columns: Sequence[str], dataset_name: str) -> str:
        return (
            f"needs the dataset column {column!r}, but {dataset_name} has no such "
            f"column (columns: {list(columns)}). Reward functions receive every column except 'prompt' as a "
            f"keyword argument: add the column, or rename the one holding the gold answers, e.g. "
            f"`{dataset_name} = {dataset_name}.rename_column('answer', {column!r})`."
        )

    def _init_centre_on_device(self) -> None:
        """Sizes the noise to the model, places the fp32 master (`es_master_device`) and checks that every process
        draws the same noise."""
        args, weights = self.args, self.backend.live_weights()
        num_parameters = sum(tensor.numel() for tensor in weights.values())
        noise = make_noise_source(args.noise_type, table_size=args.noise_table_size, num_parameters=num_parameters)
        self.backend.init_centre(noise, master_device=master_device_for(args.es_master_device, weights, noise))
        first_seed = make_population(args.noise_seed, 0, args.population_size, args.estimator)[0].seed
        check_same_noise_on_every_process(self.backend.centre, first_seed, gather_object)

    def _default_backend(self) -> GenerationBackend:
        if self.args.use_vllm:
            from ..generation.vllm_backend import VLLMGenerationBackend  # optional dependency

            return VLLMGenerationBackend.from_trainer(self)
        return TransformersGenerationBackend(self.model, self.processing_class)

    # ---------------------------------------------------- Trainer integration

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("ESTrainer.train() needs a train_dataset.")
        sampler = _EpochShuffleSampler(len(self.train_dataset), self.args.seed, self.args.shuffle_dataset)
        batch_sampler = _EpochBatchSampler(
            sampler, batch_size=self.args.per_device_train_batch_size, drop_last=self.args.dataloader_drop_last
        )
        return _SharedBatchDataLoader(self.train_dataset, batch_sampler=batch_sampler, collate_fn=_identity_collator)

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        if self.optimizer is None:
            self.optimizer = _NoOptimizer(self.args.learning_rate)
        return self.optimizer

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        # No DDP/DeepSpeed wrapping: every process holds the full centre and only rewards are exchanged.
        self.create_optimizer()
        self.lr_scheduler = None
        self._created_lr_scheduler = False
        self.create_scheduler(num_training_steps=max_steps, optimizer=self.optimizer)
        self.model_wrapped = self.model
        if resume_from_checkpoint is not None:
            self._load_es_state(resume_from_checkpoint)
            self.optimizer.step()  # a no-op that lets the scheduler fast-forward without warning
            for _ in range(self.state.global_step):
                self.lr_scheduler.step()
        for attr in ("model", "optimizer", "lr_scheduler"):
            setattr(self.callback_handler, attr, getattr(self, attr))
        self.callback_handler.train_dataloader = train_dataloader
        return self.model, train_dataloader

    def training_step(self, model, inputs: list[dict[str, Any]], num_items_in_batch=None) -> torch.Tensor:
        """Runs one ES step on the prompts in `inputs`; returns minus the population's mean reward as the loss."""
        mean_reward = self._es_step(inputs)
        return torch.tensor(-mean_reward if math.isfinite(mean_reward) else float("nan"), device=self.args.device)

    # ------------------------------------------------------------- ES step

    def _prompt_texts(self, prompts: list[Any]) -> list[str]:
        texts = []
        for prompt in prompts:
            if isinstance(prompt, (bytes, bytearray)):
                prompt = bytes(prompt).decode("utf-8", errors="surrogateescape")  # made valid below
            if _is_conversational(prompt):
                texts.append(
                    self.processing_class.apply_chat_template(
                        prompt,
                        tokenize=False,
                        add_generation_prompt=True,
                        **(self.args.chat_template_kwargs or {}),
                    )
                )
            elif isinstance(prompt, str):
                texts.append(prompt)
            else:
                raise ValueError(
                    f"A prompt must be a string or a list of chat messages with 'role' and 'content', got "
                    f"{type(prompt).__name__}: {str(prompt)[:80]!r}."
                )
        invalid = []
        for index, text in enumerate(texts):
            texts[index], replaced = _valid_text(text)
            if replaced:
                invalid.append(index)
        if invalid:
            logger.warning(
                f"Prompts {invalid[:10]} of the batch hold bytes that are not valid UTF-8; they were replaced by "
                "U+FFFD. Clean the dataset (e.g. decode with errors='replace') to silence this warning."
            )
        limit = self.backend.max_context_length()
        if limit is not None:
            budget = limit - self.sampling.max_completion_length
            lengths = [len(ids) for ids in self.processing_class(texts, add_special_tokens=False)["input_ids"]]
            truncated = []
            for index, length in enumerate(lengths):
                if length <= budget:
                    continue
                if self.args.prompt_overflow != "truncate" or budget < 1:
                    raise ValueError(
                        f"Prompt {index} of the batch has {length} tokens; with max_completion_length="
                        f"{self.sampling.max_completion_length} it exceeds the model context of {limit} tokens. "
                        + (
                            "Filter long prompts from the dataset, lower max_completion_length, or set "
                            "prompt_overflow='truncate' to keep the end of such prompts. "
                            if budget >= 1
                            else "max_completion_length alone fills the context; lower it. "
                        )
                        + f"Prompt starts: {texts[index][:120]!r}"
                    )
                texts[index] = self._keep_last_tokens(texts[index], budget)
                truncated.append((index, length))
            if truncated:
                logger.warning(
                    f"Truncated {len(truncated)} prompt(s) from the left to {budget} tokens (context {limit} minus "
                    f"max_completion_length {self.sampling.max_completion_length}); (index, tokens): {truncated[:10]}."
                )
                self._metrics["train"]["prompts/truncated"].append(float(len(truncated)))
        return texts

    def _keep_last_tokens(self, text: str, budget: int) -> str:
        """The longest suffix of `text`, cut at a token boundary, that tokenizes to at most `budget` tokens."""
        keep = budget
        for _ in range(8):  # re-tokenising a suffix can merge differently; shrink until it fits
            ids = self.processing_class(text, add_special_tokens=False)["input_ids"]
            suffix = self.processing_class.decode(ids[-keep:], skip_special_tokens=False)
            length = len(self.processing_class(suffix, add_special_tokens=False)["input_ids"])
            if length <= budget:
                return suffix
            keep -= length - budget
        raise ValueError(f"Could not truncate a prompt to {budget} tokens; filter long prompts from the dataset.")

    def _score(
        self, inputs: list[dict[str, Any]], result: GenerationResult, where: str
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Scores completions with every reward function (TRL convention) and applies the failure policy.

        Returns:
            `(per_function, total)`: per-function rewards `(num_completions, num_funcs)` with NaN for "not
            applicable", and the weighted total per completion; `None` when the member must be skipped.
        """
        repeat = self.sampling.num_generations
        prompts = [example["prompt"] for example in inputs for _ in range(repeat)]
        completions: list[Any] = result.completions
        if _is_conversational(inputs[0]["prompt"]):
            completions = [[{"role": "assistant", "content": text}] for text in completions]
        columns = {
            key: [example[key] for example in inputs for _ in range(repeat)]
            for key in inputs[0]
            if key not in ("prompt", "completion")
        }
        num = len(completions)
        policy = self.args.reward_failure
        per_function = torch.full((num, len(self.reward_funcs)), float("nan"), dtype=torch.float64)

        def fail(message: str) -> None:
            self._metrics["train"]["rewards/failures"].append(1.0)
            if policy == "error":
                raise RewardFunctionError(
                    f"{message} ({where}). Fix the reward function, or set reward_failure='skip_member' to leave "
                    "such members out of the update, or 'zero' to score failing samples 0."
                )
            logger.warning(f"{message} ({where}); reward_failure={policy!r}.")

        for j, (func, name) in enumerate(zip(self.reward_funcs, self.reward_func_names)):
            kwargs = dict(
                prompts=prompts,
                completions=completions,
                completion_ids=result.completion_ids,
                trainer_state=self.state,
                **columns,
            )
            try:
                values = call_with_timeout(func, self.args.reward_timeout, kwargs)
            except RewardFunctionError:
                raise
            except RewardTimeout as error:
                fail(
                    f"Reward function {name!r} {error} on {num} completions (completion 0 starts "
                    f"{result.completions[0][:80]!r})"
                )
                if policy == "skip_member":
                    return None
                per_function[:, j] = 0.0
                continue
            except Exception as error:
                missing = missing_column(error, func, list(inputs[0]))
                if missing is not None:  # a configuration error, not a bad sample: stop whatever the policy
                    raise RewardFunctionError(
                        f"Reward function {name!r} raised {type(error).__name__}: {error} ({where}). It "
                        + self._missing_column_message(missing, list(inputs[0]), "dataset")
                    ) from error
                fail(f"Reward function {name!r} raised {type(error).__name__}: {error}")
                if policy == "skip_member":
                    return None
                per_function[:, j] = 0.0
                continue
            values = list(values) if values is not None else []
            if len(values) != num:
                fail(f"Reward function {name!r} returned {len(values)} values for {num} completions")
                if policy == "skip_member":
                    return None
                per_function[:, j] = 0.0
                continue
            for i, value in enumerate(values):
                if value is None:
                    continue
                try:
                    value = float(value)
                except (TypeError, ValueError):
                    value = float("nan")
                if not math.isfinite(value):
                    fail(
                        f"Reward function {name!r} returned {values[i]!r} for completion {i} "
                        f"(completion starts {result.completions[i][:80]!r})"
                    )
                    if policy == "skip_member":
                        return None
                    value = 0.0
                per_function[i, j] = value

        weighted = per_function * self.reward_weights
        total = torch.nansum(weighted, dim=1)
        no_value = torch.isnan(per_function).all(dim=1)
        if bool(no_value.any()):
            index = int(no_value.nonzero()[0])
            fail(
                f"Every reward function returned None for completion {index}, so it has no reward "
                f"(completion starts {result.completions[index][:80]!r})"
            )
            if policy == "skip_member":
                return None
            total[no_value] = 0.0
        return per_function, total

    def _es_step(self, inputs: list[dict[str, Any]]) -> float:
        args, step = self.args, self.state.global_step
        start = time.perf_counter()
        members = make_population(args.noise_seed, step, args.population_size, args.estimator)
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        # Global RNGs (python, numpy, torch) are a function of (seed, step, process), so that reward functions that
        # draw random numbers resume exactly and a checkpoint needs no (pickled) RNG state.
        set_seed(stable_seed(args.seed, "step-rng", step, rank) % 2**32)
        num_funcs = len(self.reward_funcs)
        # Per member: reward, per-function means, mean length, clipped ratio, generated tokens. The extra last row
        # counts processes that failed, so a failure reaches every process with the rewards, in the same all-reduce.
        stats = torch.zeros(len(members) + 1, num_funcs + 4, dtype=torch.float64)
        timing = defaultdict(float)
        self._last_samples = []
        error: Exception | None = None
        try:
            prompt_texts = self._prompt_texts([example["prompt"] for example in inputs])
            self._evaluate_members(members[rank::world], inputs, prompt_texts, stats, timing, step)
        except Exception as caught:
            if world == 1:
                raise
            error = caught
            stats[-1, 0] = 1.0
        finally:
            tick = time.perf_counter()
            self.backend.restore()
            timing["perturb_restore"] += time.perf_counter() - tick

        tick = time.perf_counter()
        if world > 1:
            # Only N x (a few) numbers cross processes: members not evaluated here hold zeros.
            stats = self.accelerator.reduce(stats.to(self.args.device), reduction="sum").cpu()
            if stats[-1, 0] > 0:
                self._raise_process_failure(error, step)
        stats = stats[:-1]
        timing["communication"] = time.perf_counter() - tick

        rewards = stats[:, 0]
        estimate = estimate_update(members, rewards, self.fitness_shaping)
        tick = time.perf_counter()
        learning_rate = self._get_learning_rate()
        update_norm = 0.0
        if not estimate.skipped:
            try:
                update_norm = self.backend.apply_update(estimate.seeds, estimate.coefficients, learning_rate)
            except FloatingPointError as caught:
                raise FloatingPointError(
                    f"Step {step}: {caught} Rewards of the members: {rewards.tolist()}. Check the reward functions "
                    "for huge values, or use fitness_shaping='centered_rank'."
                ) from caught
        timing["update"] = time.perf_counter() - tick
        if estimate.skipped:
            logger.info(f"Step {step}: all {estimate.num_valid} valid members tied; no update.")

        self._log_step(stats, estimate, update_norm, timing, time.perf_counter() - start)
        valid = rewards[torch.isfinite(rewards)]
        return float(valid.mean()) if valid.numel() else float("nan")

    def _raise_process_failure(self, error: Exception | None, step: int) -> None:
        """Called on every process when at least one failed in the step: shares the messages, then raises."""
        from accelerate.utils import gather_object

        message = None if error is None else f"{type(error).__name__}: {error}"
        messages = gather_object([message])
        if error is not None:
            raise error
        failed = "; ".join(f"process {index}: {text}" for index, text in enumerate(messages) if text)
        raise ProcessFailedError(f"Step {step}: stopping because another process failed ({failed}).")

    def _evaluate_members(
        self,
        members: list[Any],
        inputs: list[dict[str, Any]],
        prompt_texts: list[str],
        stats: torch.Tensor,
        timing: dict[str, float],
        step: int,
    ) -> None:
        """Perturbs, generates and scores this process's members, writing their rows of `stats`."""
        args, num_funcs = self.args, len(self.reward_funcs)
        for member in members:
            tick = time.perf_counter()
            self.backend.perturb(member.seed, member.sign * args.sigma)
            timing["perturb_restore"] += time.perf_counter() - tick

            tick = time.perf_counter()
            result = self.backend.generate(prompt_texts, self.sampling, seed=member.sampling_seed)
            timing["generate"] += time.perf_counter() - tick

            tick = time.perf_counter()
            scored = self._score(inputs, result, where=f"step {step}, member {member.index}")
            timing["score"] += time.perf_counter() - tick

            lengths = torch.tensor([len(ids) for ids in result.completion_ids], dtype=torch.float64)
            stats[member.index, num_funcs + 1] = lengths.mean()
            stats[member.index, num_funcs + 2] = sum(result.truncated) / len(result.truncated)
            stats[member.index, num_funcs + 3] = result.num_tokens
            if scored is None:
                stats[member.index, 0] = float("nan")
                continue
            per_function, total = scored
            stats[member.index, 0] = total.mean()
            stats[member.index, 1 : num_funcs + 1] = per_function.nanmean(dim=0)
            if not self._last_samples:
                self._last_samples = list(zip(prompt_texts, result.completions, total.tolist()))

    def _log_step(self, stats, estimate, update_norm: float, timing: dict[str, float], wall: float) -> None:
        metrics = self._metrics["train"]
        num_funcs = len(self.reward_funcs)
        rewards = stats[:, 0]
        valid = torch.isfinite(rewards)
        if valid.any():
            metrics["reward"].append(float(rewards[valid].mean()))
            metrics["reward_std"].append(float(rewards[valid].std(correction=0)))
            metrics["population/reward_max"].append(float(rewards[valid].max()))
            metrics["population/reward_min"].append(float(rewards[valid].min()))
            for j, name in enumerate(self.reward_func_names):
                column = stats[valid, 1 + j]
                if torch.isfinite(column).any():
                    metrics[f"rewards/{name}/mean"].append(float(column.nanmean()))
        metrics["population/skipped_members"].append(float((~valid).sum()))
        metrics["completions/mean_length"].append(float(stats[:, num_funcs + 1].mean()))
        metrics["completions/clipped_ratio"].append(float(stats[:, num_funcs + 2].mean()))
        metrics["update_norm"].append(update_norm)
        metrics["frac_zero_std"].append(1.0 if estimate.skipped else 0.0)
        tokens = float(stats[:, num_funcs + 3].sum())
        self._total_generated_tokens += int(tokens)
        metrics["num_generated_tokens"].append(tokens)
        for key, seconds in timing.items():
            metrics[f"timing/{key}"].append(seconds)
        metrics["timing/step"].append(wall)
        metrics["tokens_per_second"].append(tokens / wall if wall > 0 else 0.0)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if "loss" in logs or "train_runtime" in logs else "eval"
        if mode == "train":
            # Trainer logs the loss it accumulated; for ES that is minus the mean population reward.
            for key, values in self._metrics["train"].items():
                if values:
                    logs[key] = sum(values) / len(values)
            logs["total_generated_tokens"] = self._total_generated_tokens
            logs.pop("grad_norm", None)  # ES has no gradients
            for func in self.reward_funcs:
                # Verifier failure counters since the last log (timeouts, errors, missing answers; this process).
                for key, value in get_reward_stats(func, reset=True).items():
                    if key.rsplit("/", 1)[-1] in ("timeouts", "errors", "no_answer", "untimed"):
                        logs[key] = value
            self._metrics["train"].clear()
            if self.args.log_completions and self._last_samples and self.is_world_process_zero():
                self._print_completions()
        super().log(logs, start_time)

    def _print_completions(self) -> None:
        samples = self._last_samples[: self.args.num_completions_to_print or len(self._last_samples)]
        lines = [f"Completions of member 0 at step {self.state.global_step}:"]
        for prompt, completion, reward in samples:
            lines.append(f"  reward={reward:.3f} | prompt={prompt[-80:]!r} | completion={completion[:200]!r}")
        print("\n".join(lines))

    # ----------------------------------------------------------- evaluation

    def evaluate(
        self,
        eval_dataset: Dataset | dict[str, Dataset] | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """Scores the centre weights on the evaluation set.

        Args:
            eval_dataset: Overrides `self.eval_dataset`; a dict evaluates each entry with its key in the prefix.
            ignore_keys: Unused (kept for `Trainer` compatibility).
            metric_key_prefix: Prefix of the metric names.

        Returns:
            `{prefix}_reward`, `{prefix}_rewards/<fn>/mean`, `{prefix}_completions/mean_length`, runtime.
        """
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("evaluate() needs an eval_dataset.")
        if isinstance(dataset, dict):
            metrics = {}
            for key, subset in dataset.items():
                metrics.update(self.evaluate(subset, ignore_keys, f"{metric_key_prefix}_{key}"))
            return metrics
        self._check_dataset(dataset, "eval_dataset")
        start = time.perf_counter()
        self.backend.restore()
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        indices = list(range(rank, len(dataset), world))
        batch_size = self.args.per_device_eval_batch_size
        tally = RewardTally(self.reward_func_names)
        for offset in range(0, len(indices), batch_size):
            batch = [dataset[i] for i in indices[offset : offset + batch_size]]
            texts = self._prompt_texts([example["prompt"] for example in batch])
            seed = stable_seed(self.args.noise_seed, "eval", indices[offset])
            result = self.backend.generate(texts, self.sampling, seed=seed)
            scored = self._score(batch, result, where=f"evaluation, example {indices[offset]}")
            if scored is not None:
                tally.add(*scored, result.completion_ids)
        metrics = tally.metrics(self.accelerator, metric_key_prefix)
        metrics[f"{metric_key_prefix}_runtime"] = time.perf_counter() - start
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    # ------------------------------------------------------- save / resume

    def train(
        self,
        resume_from_checkpoint: str | bool | None = None,
        trial: Any = None,
        ignore_keys_for_eval: list[str] | None = None,
    ):
        """Trains with ES; as `Trainer.train`, but `resume_from_checkpoint=True` takes the latest *complete* checkpoint
        in `args.output_dir` (incomplete ones, e.g. from a crash, are skipped with a warning) and an explicit
        checkpoint is checked for completeness before anything is loaded."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = self._latest_complete_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"No complete checkpoint found in output directory ({self.args.output_dir}).")
            logger.info(f"Resuming from {resume_from_checkpoint}.")
        elif isinstance(resume_from_checkpoint, (str, os.PathLike)):
            problem = self._checkpoint_problem(str(resume_from_checkpoint))
            if problem is not None:
                raise ValueError(f"Cannot resume from {resume_from_checkpoint}: {problem}.")
        return super().train(resume_from_checkpoint, trial, ignore_keys_for_eval)

    @staticmethod
    def _checkpoint_problem(checkpoint: str) -> str | None:
        """Why `checkpoint` cannot be resumed from (a missing or unreadable file), or None if it is complete."""
        if not os.path.isdir(checkpoint):
            return "no such directory"
        for name in (TRAINER_STATE_NAME, ES_STATE_NAME):
            path = os.path.join(checkpoint, name)
            try:
                with open(path) as f:
                    json.load(f)
            except FileNotFoundError:
                return f"{name} is missing (the save did not finish)"
            except (OSError, ValueError) as error:
                return f"{name} is unreadable ({error})"
        if not any(
            os.path.isfile(os.path.join(checkpoint, name))
            for name in ("model.safetensors", "model.safetensors.index.json")
        ):
            return "model.safetensors is missing (the save did not finish)"
        return None

    @classmethod
    def _latest_complete_checkpoint(cls, output_dir: str) -> str | None:
        if not os.path.isdir(output_dir):
            return None
        steps = sorted(
            (int(match.group(1)), name)
            for name in os.listdir(output_dir)
            if (match := _CHECKPOINT_RE.match(name)) and os.path.isdir(os.path.join(output_dir, name))
        )
        for _, name in reversed(steps):
            path = os.path.join(output_dir, name)
            problem = cls._checkpoint_problem(path)
            if problem is None:
                return path
            logger.warning(f"Skipping incomplete checkpoint {path}: {problem}.")
        return None

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """Writes the checkpoint into `_tmp-checkpoint-N`, then renames it to `checkpoint-N`: a crash at any point
        leaves either the complete new checkpoint or none (the previous one is then the latest)."""
        if self.hp_search_backend is None and trial is None:
            self.store_flos()
        run_dir = self._get_output_dir(trial=trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        final_dir = os.path.join(run_dir, name)
        staging_dir = os.path.join(run_dir, STAGING_PREFIX + str(self.state.global_step))
        if self.args.should_save:
            os.makedirs(run_dir, exist_ok=True)
            for stale in os.listdir(run_dir):  # left by a crash during an earlier save
                if stale.startswith(STAGING_PREFIX) or stale.startswith("_old-" + PREFIX_CHECKPOINT_DIR):
                    shutil.rmtree(os.path.join(run_dir, stale), ignore_errors=True)
        self.save_model(staging_dir, _internal_call=True)
        if self.state.best_global_step:
            best_dir = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.best_global_step}")
            if self.state.best_global_step == self.state.global_step or os.path.exists(best_dir):
                self.state.best_model_checkpoint = best_dir
        if self.args.should_save:
            for callback in self.callback_handler.callbacks + [self.control]:
                if isinstance(callback, ExportableState):
                    key, callback_state = callback.__class__.__name__, callback.state()
                    if isinstance(self.state.stateful_callbacks.get(key), list):
                        self.state.stateful_callbacks[key].append(callback_state)
                    else:
                        self.state.stateful_callbacks[key] = callback_state
            self.state.save_to_json(os.path.join(staging_dir, TRAINER_STATE_NAME))
            self._commit_checkpoint(staging_dir, final_dir)
        self.accelerator.wait_for_everyone()
        if self.args.push_to_hub:
            self._push_from_checkpoint(final_dir)
        if self.args.should_save:
            self._rotate_checkpoints(run_dir)

    def _rotate_checkpoints(self, run_dir: str) -> None:
        """`save_total_limit` as in Trainer, but each old checkpoint is first renamed out of the `checkpoint-N`
        namespace, so a crash while deleting it never leaves a half-deleted `checkpoint-N`."""
        limit = self.args.save_total_limit
        if limit is None or limit <= 0:
            return
        checkpoints = sort_checkpoints(run_dir, use_mtime=True)
        best = self.state.best_model_checkpoint
        protected = set(checkpoints[-1:]) | ({str(Path(best))} if best is not None else set())
        remaining = len(checkpoints)
        for checkpoint in checkpoints:
            if remaining <= max(limit, len(protected)):
                break
            if checkpoint in protected:
                continue
            doomed = os.path.join(run_dir, "_old-" + os.path.basename(checkpoint))
            shutil.rmtree(doomed, ignore_errors=True)
            os.replace(checkpoint, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            remaining -= 1

    @staticmethod
    def _commit_checkpoint(staging_dir: str, final_dir: str) -> None:
        """Flushes every file of `staging_dir` to disk, then atomically renames it to `final_dir`."""
        for root, _, files in os.walk(staging_dir):
            for file in files:
                with open(os.path.join(root, file), "rb") as f:
                    os.fsync(f.fileno())
        old_dir = None
        if os.path.exists(final_dir):  # re-saving the same step (e.g. a rerun without resume): swap it out
            old_dir = os.path.join(os.path.dirname(final_dir), "_old-" + os.path.basename(final_dir))
            shutil.rmtree(old_dir, ignore_errors=True)
            os.replace(final_dir, old_dir)
        os.replace(staging_dir, final_dir)
        _fsync_dir(os.path.dirname(final_dir))
        if old_dir is not None:
            shutil.rmtree(old_dir, ignore_errors=True)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        # ES re-derives every RNG from (seed, step, process) at each step: nothing to load, and no pickle to trust.
        return None

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        # No optimizer state; the learning-rate schedule is fast-forwarded from global_step.
        return None

    def _load_scaler(self, checkpoint: str | None) -> None:
        return None

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Saves the centre weights (model dtype), tokenizer, ES state (fp32 master in mixed precision) and the
        model card with reward curve and drift statistics."""
        self.backend.restore()
        output_dir = output_dir or self.args.output_dir
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            self._save_es_state(output_dir)
            self._write_model_card(output_dir)

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        super()._save(output_dir, state_dict)
        write_redacted_training_args(output_dir or self.args.output_dir, self.args)

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None, **kwargs) -> None:
        """Writes the hf_es model card into `args.output_dir` (called by `push_to_hub`)."""
        if self.is_world_process_zero():
            self._write_model_card(self.args.output_dir, model_name=model_name, dataset_name=dataset_name)

    # ---- Hub: every push is one commit through `hf_es.model_card.push_checkpoint` (retries, never deletes) ----

    hub_push_retries: int = 3
    """Retries of a failed Hub push (after the first attempt) before giving up."""
    hub_push_backoff_s: float = 2.0
    """Wait before the first retry of a failed Hub push; doubles after each failure."""

    def init_hf_repo(self, token: str | None = None, private: bool | None = None) -> None:
        """Creates `args.hub_model_id` (or a repo named after `output_dir`) on the Hub, as Trainer does, but with a
        client created now, so `HF_ENDPOINT` / `huggingface_hub.constants.ENDPOINT` are honoured."""
        if not self.is_world_process_zero():
            return
        from huggingface_hub import HfApi

        repo_name = self.args.hub_model_id or Path(self.args.output_dir).absolute().name
        token = token if token is not None else self.args.hub_token
        private = private if private is not None else self.args.hub_private_repo
        repo_url = HfApi(token=token).create_repo(repo_name, token=token, private=private, exist_ok=True)
        self.hub_model_id = repo_url.repo_id
        self.push_in_progress = None

    def push_to_hub(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        private: bool | None = None,
        **kwargs,
    ) -> Any:
        r"""
        Saves the model into `args.output_dir` and uploads it to `args.hub_model_id` in a single commit: weights
        (safetensors), tokenizer, config, model card (`README.md`), `drift_stats.json`, `trainer_state.json`,
        `es_state.json` and the plots. Checkpoint folders, staging folders and the fp32 master copy are not uploaded.

        A failed upload is retried with exponential backoff (see [`~hf_es.model_card.push_checkpoint`]); the local
        files are never deleted, and the token is never written to a file, a log or an error message.

        Args:
            commit_message (`str`, *optional*, defaults to `"End of training"`): Commit message.
            blocking (`bool`, *optional*, defaults to `True`): Wait for the upload; if `False`, return a `Future`.
            token (`str`, *optional*): Token with write access (defaults to `args.hub_token`).
            revision (`str`, *optional*): Branch to commit to (defaults to `args.hub_revision`).
            private (`bool`, *optional*): Visibility if the repo is created (defaults to `args.hub_private_repo`).
            kwargs (`dict[str, Any]`, *optional*): Passed to [`~ESTrainer.create_model_card`].

        Returns:
            The `CommitInfo` of the upload, or a `Future` of it when `blocking=False` (`None` on other processes).
        """
        from huggingface_hub import HfApi
        from transformers.utils.hub import PushInProgress

        from ..model_card import push_checkpoint

        self.callback_handler.on_push_begin(self.args, self.state, self.control)
        model_name = kwargs.pop("model_name", None)
        if model_name is None and self.args.should_save:
            model_name = (self.args.hub_model_id or Path(self.args.output_dir).name).split("/")[-1]
        token = token if token is not None else self.args.hub_token
        if self.hub_model_id is None:
            self.init_hf_repo(token=token, private=private)
        self.save_model(_internal_call=True)
        if not self.is_world_process_zero():
            return None
        self.save_state()  # trainer_state.json (log history) goes with the weights
        self.create_model_card(model_name=model_name, **kwargs)
        self._finish_current_push()
        api = HfApi(token=token)

        def push() -> Any:
            return push_checkpoint(
                self.args.output_dir,
                self.hub_model_id,
                token=token,
                private=private if private is not None else self.args.hub_private_repo,
                revision=revision if revision is not None else self.args.hub_revision,
                commit_message=commit_message or "End of training",
                ignore_patterns=_HUB_ROOT_IGNORE,
                max_retries=self.hub_push_retries,
                backoff_s=self.hub_push_backoff_s,
                api=api,
            )

        if blocking:
            return push()
        future = api.run_as_future(push)
        self.push_in_progress = PushInProgress([future])
        return future

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """`hub_strategy` pushes after each save, straight from the complete `checkpoint-N` folder (nothing is copied
        into `output_dir`): the model files, card, drift stats, trainer state and plots to the repo root in one
        commit; with `"checkpoint"` / `"all_checkpoints"` also the whole folder to `last-checkpoint/` /
        `checkpoint-N/` (a second commit, as in Trainer). Pushes are synchronous, so checkpoint rotation never deletes
        a folder being uploaded; one that still fails after the retries is logged and training continues with the
        checkpoint kept locally."""
        from transformers.trainer_utils import HubStrategy, SaveStrategy

        from ..model_card import PUSH_ALLOW_PATTERNS, push_checkpoint

        strategy = self.args.hub_strategy
        if not self.is_world_process_zero() or strategy == HubStrategy.END:
            return
        self.callback_handler.on_push_begin(self.args, self.state, self.control)
        if self.args.save_strategy == SaveStrategy.STEPS:
            message = f"Training in progress, step {self.state.global_step}"
        else:
            message = f"Training in progress, epoch {int(self.state.epoch or 0)}"
        uploads = [(None, PUSH_ALLOW_PATTERNS, _HUB_ROOT_IGNORE, message)]
        if strategy in (HubStrategy.CHECKPOINT, HubStrategy.ALL_CHECKPOINTS):
            sub_folder = "last-checkpoint" if strategy == HubStrategy.CHECKPOINT else Path(checkpoint_folder).name
            uploads.append((sub_folder, None, None, message + ", checkpoint"))
        for path_in_repo, allow_patterns, ignore_patterns, commit_message in uploads:
            try:
                push_checkpoint(
                    checkpoint_folder,
                    self.hub_model_id,
                    token=self.args.hub_token,
                    revision=self.args.hub_revision,
                    path_in_repo=path_in_repo,
                    commit_message=commit_message,
                    allow_patterns=allow_patterns,
                    ignore_patterns=ignore_patterns,
                    max_retries=self.hub_push_retries,
                    backoff_s=self.hub_push_backoff_s,
                )
            except (RuntimeError, ValueError) as error:  # already scrubbed of the token
                logger.error(f"{error} Training continues; {checkpoint_folder} is kept.")

    def _write_model_card(self, output_dir: str, model_name: str | None = None, dataset_name: str | None = None):
        from ..model_card import write_model_card

        drift = None
        if self.args.model_card_drift and os.path.isdir(self.base_model_id):
            from ..analysis import compute_drift

            # The centre only moves on ES steps: one drift pass per step, however many saves/cards it gets.
            cached_step, cached = getattr(self, "_drift_cache", (None, None))
            if cached_step != self.state.global_step:
                cached = compute_drift(self.base_model_id, self.backend.centre.state_dict())
                self._drift_cache = (self.state.global_step, cached)
            drift = cached
        hardware = (
            torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
        ) + f" x {self.accelerator.num_processes} process(es)"
        lineage = self._lineage(dataset_name)
        write_model_card(
            output_dir,
            base_model=lineage[0].get("model") or base_model_id(self.base_model_id),
            lineage=lineage if len(lineage) > 1 else None,
            hyperparameters=self.args.to_dict(),
            log_history=self.state.log_history,
            drift=drift,
            datasets=[dataset_name] if dataset_name else None,
            hardware=hardware,
            total_generated_tokens=self._total_generated_tokens,
            model_name=model_name,
            repo_id=self.args.hub_model_id,
            secrets=[self.args.hub_token] if self.args.hub_token else (),
        )
        with open(os.path.join(output_dir, LINEAGE_NAME), "w") as f:
            json.dump(lineage, f, indent=2)

    def _lineage(self, dataset_name: str | None = None) -> list[dict[str, Any]]:
        """The training stages up to this one: those recorded in the starting checkpoint's `hf_es_lineage.json`
        (written by ES and by `scripts/train_grpo.py`, so ES->GRPO->... compositions are traceable), then this ES run."""
        earlier = []
        path = os.path.join(self.base_model_id, LINEAGE_NAME)
        if os.path.isfile(path):
            with open(path) as f:
                earlier = list(json.load(f))
        stage = {"method": "ES", "model": base_model_id(self.base_model_id), "steps": self.state.global_step}
        if dataset_name:
            stage["dataset"] = dataset_name
        return earlier + [stage]

    def _save_es_state(self, output_dir: str) -> None:
        centre = self.backend.centre
        live_is_master = all(
            live.dtype == torch.float32 for live in centre.parameters.values()
        )  # then the saved model weights are the exact centre already
        if not live_is_master:
            save_file(
                {k: v.contiguous().cpu() for k, v in centre.state_dict().items()},
                os.path.join(output_dir, ES_MASTER_NAME),
            )
        state = {
            "global_step": self.state.global_step,
            "epoch": self.state.epoch,
            **{name: self._resume_field(name) for name in _RESUME_FIELDS},
            "has_fp32_master": not live_is_master,
            "total_generated_tokens": self._total_generated_tokens,
        }
        with open(os.path.join(output_dir, ES_STATE_NAME), "w") as f:
            json.dump(state, f, indent=2)

    def _resume_field(self, name: str) -> Any:
        value = getattr(self.args, name)
        return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)

    def _load_es_state(self, checkpoint: str) -> None:
        state_path = os.path.join(checkpoint, ES_STATE_NAME)
        state: dict[str, Any] = {}
        if os.path.isfile(state_path):
            with open(state_path) as f:
                state = json.load(f)
        master_path = os.path.join(checkpoint, ES_MASTER_NAME)
        if state.get("has_fp32_master") and not os.path.isfile(master_path):
            raise ValueError(f"Cannot resume from {checkpoint}: {ES_MASTER_NAME} is missing.")
        if os.path.isfile(master_path):
            self.backend.load_centre(load_file(master_path, device="cpu"))
        else:
            # fp32 model: the model weights Trainer loaded are the exact centre.
            self.backend.init_centre(self.backend.centre.noise, master_device=self.backend.centre.master_device)
        bad = [name for name, tensor in self.backend.centre.master.items() if not torch.isfinite(tensor).all()]
        if bad:
            raise ValueError(
                f"Checkpoint {checkpoint} holds non-finite weights (e.g. {bad[:3]}); resume from an earlier one."
            )
        self._total_generated_tokens = state.get("total_generated_tokens", 0)
        changed = {
            name: (state[name], self._resume_field(name))
            for name in _RESUME_FIELDS
            if name in state and state[name] != self._resume_field(name)
        }
        if changed:
            logger.warning(
                f"Resuming from {checkpoint} with different settings (checkpoint, now): {changed}; the run will not "
                "reproduce an uninterrupted one."
            )
