"""[`ESTrainer`]: Evolution Strategies post-training with TRL's GRPOTrainer interface.

One step, as in the paper: lay out N members (seeded directions), evaluate this process's share of them on the
step's shared mini-batch (perturb in place, generate, score), exchange only the N rewards, shape them, and apply the
identical update on every process. The trainer is the `transformers.Trainer` adapter: it reuses the loop, callbacks,
logging and saving, and replaces the optimizer with the ES update (no backward pass). The pieces live next to it:
prompts in [`hf_es.prompts`], scoring in [`hf_es.scoring`], the step record in `step_record.py`, data order in
`sampling.py`, checkpoints in `checkpoint_files.py` / `saving.py`, card and Hub pushes in `publishing.py` /
[`hf_es.hub`], evaluation in [`hf_es.evaluation.RewardEvaluationMixin`].
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import defaultdict
from typing import Any

import torch
from accelerate.utils import gather_object
from datasets import Dataset
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainerCallback
from transformers.trainer_utils import set_seed
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
from ..evaluation import RewardEvaluationMixin, evaluate_rewards
from ..generation import GenerationBackend, SamplingConfig, make_backend
from ..model_card import RunFacts
from ..models import resolve_model_name_or_path
from ..prompts import fit_prompts, format_prompts
from ..scoring import (
    RewardFunc,
    RewardFunctionError,
    check_reward_columns,
    check_reward_funcs,
    reward_func_name,
    reward_weights_tensor,
    score_completions,
)
from ..scoring.reward_model import resolve_reward_models
from .adapters import ScheduleOnlyOptimizer, load_model, prepare_evolved_parameters
from .es_config import ESConfig
from .probe import check_perturbations_land
from .publishing import PublishingMixin
from .sampling import (
    check_prompt_dataset,
    dataset_columns,
    identity_collator,
    is_streamed,
    named_datasets,
    shared_dataloader,
)
from .saving import CheckpointingMixin
from .step_logging import (
    add_step_metrics,
    completions_sample,
    member_stats,
    merge_train_metrics,
    print_completions,
    resolve_success_threshold,
)
from .step_record import StepRecord
from .step_timer import StepTimer
from .trl_compat import refuse_grpo_only_arguments

logger = logging.get_logger(__name__)

__all__ = ["ESTrainer", "ProcessFailedError", "RewardFunctionError"]


class ProcessFailedError(RuntimeError):
    """Another process of a multi-process run failed during the ES step; raised on every healthy process."""


class ESTrainer(RewardEvaluationMixin, CheckpointingMixin, PublishingMixin, Trainer):
    """Trainer for Evolution Strategies post-training, with the constructor of TRL's `GRPOTrainer`.

    Args:
        model (`str` or `PreTrainedModel`): Hub id, local path or causal LM (strings load with
            `args.model_init_kwargs`).
        reward_funcs (`Callable`, `str`, `PreTrainedModel` or a list of them): TRL reward functions,
            `f(prompts, completions, completion_ids, **columns)` returning a float or `None` per completion, or
            reward models (a sequence-classification model, or its Hub id / local path), scored as TRL scores them
            ([`hf_es.scoring.reward_model`]).
        reward_processing_classes (`PreTrainedTokenizerBase` or `list`, *optional*): The reward models' tokenizers,
            one entry per reward function (`None` for functions), as in TRL.
        args ([`ESConfig`], *optional*): Defaults to `ESConfig(output_dir="<model name>-ES")`.
        train_dataset, eval_dataset ([`~datasets.Dataset`] or [`~datasets.IterableDataset`]): A `prompt` column
            (text or chat messages) and the reward functions' columns; `eval_dataset` may be a dict, evaluated with
            the centre weights. A streamed `train_dataset` needs `max_steps` ([`hf_es.trainer.sampling`]).
        processing_class ([`~transformers.PreTrainedTokenizerBase`], *optional*): Loaded from `model` when omitted.
        callbacks (`list[TrainerCallback]`, *optional*): Extra callbacks.
        optimizers (*optional*): Must be `(None, None)`: ES has no optimizer.
        quantization_config (*optional*): Must be `None`: ES perturbs plain floating-point weights in place.
        peft_config ([`~peft.PeftConfig`], *optional*): ES evolves only the adapter (transformers backend only);
            see [`~hf_es.trainer.adapters`].
        tools, rollout_func, environment_factory (*optional*): Must be `None` (accepted by name, as in
            `GRPOTrainer`): ES generates single-turn completions with its own engine; see
            [`refuse_grpo_only_arguments`] for what to use instead.
        generation_backend ([`GenerationBackend`], *optional*): Defaults to the engine named by
            `args.backend_name` (transformers `generate`, or vLLM with `args.use_vllm`).
        run_facts ([`~hf_es.model_card.RunFacts`], *optional*, keyword-only): What the model card records beyond the
            arguments: the task description (`hf_es.tasks.describe_task`), the checkpoint training started from and
            the dataset name of its lineage stage. The positional arguments are those of TRL's `GRPOTrainer`.
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
        quantization_config: Any = None,
        peft_config: Any = None,
        tools: list[Any] | None = None,
        rollout_func: Any = None,
        environment_factory: Any = None,
        generation_backend: GenerationBackend | None = None,
        *,
        run_facts: RunFacts | None = None,
    ):
        if isinstance(model, (str, os.PathLike)):  # one resolution for every entry point (hf_es.models)
            model = resolve_model_name_or_path(model)
        model_id = str(model if isinstance(model, str) else model.config._name_or_path)
        self.base_model_id = model_id
        if args is None:
            args = ESConfig(output_dir=f"{model_id.rstrip('/').split('/')[-1]}-ES")
        if not isinstance(args, ESConfig):
            raise TypeError(
                f"args must be an ESConfig, got {type(args).__name__}. To reuse a GRPOConfig, pass "
                "`ESConfig.from_grpo_config(grpo_config)`."
            )
        if optimizers != (None, None):
            raise ValueError("ESTrainer has no optimizer: the ES update replaces it. Leave `optimizers` unset.")
        refuse_grpo_only_arguments(
            quantization_config=quantization_config,
            tools=tools,
            rollout_func=rollout_func,
            environment_factory=environment_factory,
        )
        if isinstance(model, str):
            model = load_model(model, args)
        model = prepare_evolved_parameters(model, args, peft_config)  # PEFT wrap / es_target_modules
        if processing_class is None:
            processing_class = AutoTokenizer.from_pretrained(model_id, trust_remote_code=args.trust_remote_code)
        if processing_class.pad_token is None:
            processing_class.pad_token = processing_class.eos_token

        reward_funcs = resolve_reward_models(
            reward_funcs,
            reward_processing_classes,
            model_init_kwargs=args.model_init_kwargs,
            device=args.device,
            chat_template_kwargs=args.chat_template_kwargs,
        )
        self.reward_funcs = check_reward_funcs(reward_funcs)
        self.reward_func_names = [reward_func_name(f) for f in self.reward_funcs]
        self.reward_weights = reward_weights_tensor(args.reward_weights, len(self.reward_funcs))
        self.success_threshold = resolve_success_threshold(args.success_threshold, self.reward_weights)
        for name, dataset in named_datasets(train_dataset, eval_dataset):
            check_prompt_dataset(dataset, name)
            check_reward_columns(self.reward_funcs, dataset_columns(dataset, name) or [], name)

        super().__init__(
            model=model,
            args=args,
            data_collator=identity_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            run_facts=run_facts,
        )
        self.sampling = SamplingConfig.from_args(args)
        self.fitness_shaping = get_fitness_shaping(args.fitness_shaping)
        self.backend = generation_backend or self._default_backend()
        self._init_centre_on_device()
        self._metrics: dict[str, dict[str, list[float]]] = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._last_samples: dict[str, list] = {}
        self._total_generated_tokens = 0
        self.completion_extras: dict[str, list[Any]] = {}

    def _init_centre_on_device(self) -> None:
        """Sizes the noise to the model, places the fp32 master (`es_master_device`) and checks that every process
        draws the same noise."""
        args, weights = self.args, self.backend.live_weights()
        num_parameters = sum(tensor.numel() for tensor in weights.values())
        noise = make_noise_source(args.noise_type, table_size=args.noise_table_size, num_parameters=num_parameters)
        engine_share = args.vllm_gpu_memory_utilization if args.use_vllm else None
        self._init_centre(
            noise, master_device_for(args.es_master_device, weights, noise, engine_utilization=engine_share)
        )
        first_seed = make_population(args.noise_seed, 0, args.population_size, args.estimator)[0].seed
        check_same_noise_on_every_process(self.backend.centre, first_seed, gather_object)
        if args.check_perturbations:
            check_perturbations_land(self.backend)

    def _init_centre(self, noise: Any, master_device: Any = None) -> None:
        """Snapshots the live weights as the ES centre of `args.perturbation` ([`hf_es.es.PERTURBATIONS`])."""
        if master_device is None and self.backend.centre is not None:
            master_device = self.backend.centre.master_device  # re-snapshot on resume: keep the placement
        self.backend.init_centre(
            noise,
            master_device=master_device,
            perturbation=self.args.perturbation,
            rank=self.args.perturbation_rank,
            non_matrix_noise=self.args.low_rank_non_matrix_noise,
        )

    def _default_backend(self) -> GenerationBackend:
        return make_backend(self.args.backend_name, **self._backend_arguments(self.args.backend_name))

    def _backend_arguments(self, engine: str) -> dict[str, Any]:
        """Maps this run's `ESConfig` to the constructor arguments of `engine` (a key of
        [`hf_es.generation.BACKENDS`]): the model and tokenizer for every engine, plus the engine's own settings."""
        args, accelerator = self.args, self.accelerator
        settings: dict[str, dict[str, Any]] = {
            "transformers": dict(batch_size=args.generation_max_rows or "auto"),
            # One engine per Accelerate process (TRL's colocate recipe), of `vllm_tensor_parallel_size` ranks of its
            # own (the backend's `"mp"` executor when > 1), so seeded per process.
            "vllm": dict(
                seed=args.seed + accelerator.process_index,
                gpu_memory_utilization=args.vllm_gpu_memory_utilization,
                max_model_len=args.vllm_max_model_length,
                tensor_parallel_size=args.vllm_tensor_parallel_size,
                distributed_executor_backend=(
                    "external_launcher"
                    if accelerator.num_processes > 1 and args.vllm_tensor_parallel_size == 1
                    else None
                ),
                master_placement=args.es_master_device,
                local_process_index=accelerator.local_process_index,
                process_index=accelerator.process_index,
                num_processes=accelerator.num_processes,
                # `accelerate launch` sets LOCAL_WORLD_SIZE; one process is alone on its machine whatever the
                # environment says (an earlier engine's workers may have left the variable behind).
                local_num_processes=(
                    1
                    if accelerator.num_processes == 1
                    else int(os.environ.get("LOCAL_WORLD_SIZE", accelerator.num_processes))
                ),
            ),
        }
        return {"model": self.model, "tokenizer": self.processing_class, **settings.get(engine, {})}

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("ESTrainer.train() needs a train_dataset.")
        return shared_dataloader(
            self.train_dataset,
            self.args.per_device_train_batch_size,
            seed=self.args.seed,
            shuffle=self.args.shuffle_dataset,
            drop_last=self.args.dataloader_drop_last,
        )

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        if self.optimizer is None:
            self.optimizer = ScheduleOnlyOptimizer(self.args.learning_rate)
        return self.optimizer

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        # No super(): it wraps the model for DDP/DeepSpeed/FSDP, which ES must not do (every process holds the whole
        # centre; only rewards are exchanged). Checked against transformers 5.24.
        self.create_optimizer()
        self.lr_scheduler = None
        self._created_lr_scheduler = False
        self.create_scheduler(num_training_steps=max_steps, optimizer=self.optimizer)
        self.model_wrapped = self.model
        if resume_from_checkpoint is not None:
            self._load_es_state(resume_from_checkpoint)
            if self.args.check_perturbations:  # the resumed centre, in the engine as it now runs
                check_perturbations_land(self.backend)
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

    def _prompt_texts(self, prompts: list[Any]) -> list[str]:
        """The texts to generate from ([`hf_es.prompts`]): the context left after the completion bounds a prompt."""
        texts = format_prompts(prompts, self.processing_class, chat_template_kwargs=self.args.chat_template_kwargs)
        limit = self.backend.max_context_length()
        budget = None if limit is None else limit - self.sampling.max_completion_length
        texts, truncated = fit_prompts(texts, self.processing_class, budget, overflow=self.args.prompt_overflow)
        if truncated:
            self._metrics["train"]["prompts/truncated"].append(float(len(truncated)))
        return texts

    def _score(self, inputs: list[dict[str, Any]], result: Any, where: str):
        """[`score_completions`] with this run's reward functions and failure policy."""
        scores = score_completions(
            self.reward_funcs,
            self.reward_weights,
            inputs,
            result.completions,
            result.completion_ids,
            num_generations=self.sampling.num_generations,
            policy=self.args.reward_failure,
            timeout=self.args.reward_timeout,
            trainer_state=self.state,
            callbacks={"log_metric": self._log_reward_metric, "log_extra": self._log_completion_extra},
            where=where,
        )
        for _ in range(scores.failures if scores is not None else 1):
            self._metrics["train"]["rewards/failures"].append(1.0)
        return scores

    def _log_reward_metric(self, name: str, value: float) -> None:
        """TRL's `log_metric` for reward functions: averaged over the logging interval (this process's calls)."""
        self._metrics["train"][name].append(float(value))

    def _log_completion_extra(self, column: str, values: list[Any]) -> None:
        """TRL's `log_extra` for reward functions: extra columns of the last scored completions, kept in
        `self.completion_extras` until the next step."""
        self.completion_extras[column] = list(values)

    def _es_step(self, inputs: list[dict[str, Any]]) -> float:
        """One ES step: evaluate this process's members, exchange the records, estimate and apply the update."""
        args, step = self.args, self.state.global_step
        timer = StepTimer()
        members = make_population(args.noise_seed, step, args.population_size, args.estimator)
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        # Global RNGs are a function of (seed, step, process): reward functions that draw random numbers resume
        # exactly, and a checkpoint needs no (pickled) RNG state.
        set_seed(stable_seed(args.seed, "step-rng", step, rank) % 2**32)
        record = StepRecord.empty(len(members), len(self.reward_funcs), len(inputs))
        error: Exception | None = None
        try:
            prompt_texts = self._prompt_texts([example["prompt"] for example in inputs])
            self._evaluate_members(members[rank::world], inputs, prompt_texts, record, timer, step)
        except Exception as caught:
            if world == 1:
                raise
            error, record.process_failed = caught, True
        finally:
            with timer("perturb_restore"):
                self.backend.restore()

        with timer("communication"):
            record = record.all_reduce(self.accelerator)  # only N x (a few + B) numbers cross processes
            if record.process_failed:
                self._raise_process_failure(error, step)

        rewards = record.rewards
        estimate = estimate_update(members, rewards, self.fitness_shaping)
        update_norm = 0.0
        with timer("update"):
            if not estimate.skipped:
                try:
                    update_norm = self.backend.apply_update(
                        estimate.seeds, estimate.coefficients, self._get_learning_rate()
                    )
                except FloatingPointError as caught:
                    raise FloatingPointError(
                        f"Step {step}: {caught} Rewards of the members: {rewards.tolist()}. Check the reward "
                        "functions for huge values, or use fitness_shaping='centered_rank'."
                    ) from caught
            elif estimate.num_valid == 0:
                logger.warning(f"Step {step}: no member has a scorable completion (reward None or failed); no update.")
            else:
                logger.info(f"Step {step}: all {estimate.num_valid} valid members tied; no update.")
        self._log_step(record, estimate.skipped, update_norm, timer.seconds, timer.elapsed())
        valid = rewards[torch.isfinite(rewards)]
        return float(valid.mean()) if valid.numel() else float("nan")

    def _raise_process_failure(self, error: Exception | None, step: int) -> None:
        """Called on every process when at least one failed in the step: shares the messages, then raises."""
        messages = gather_object([None if error is None else f"{type(error).__name__}: {error}"])
        if error is not None:
            raise error
        failed = "; ".join(f"process {index}: {text}" for index, text in enumerate(messages) if text)
        raise ProcessFailedError(f"Step {step}: stopping because another process failed ({failed}).")

    def _evaluate_members(
        self,
        members: list[Any],
        inputs: list[dict[str, Any]],
        prompt_texts: list[str],
        record: StepRecord,
        timer: StepTimer,
        step: int,
    ) -> None:
        """The member loop: the backend generates this process's members in turn (or side by side, for low-rank
        members) and each is scored into `record` as its completions arrive."""
        results = self.backend.generate_members(members, prompt_texts, self.sampling, self.args.sigma, timer=timer)
        with contextlib.closing(results):  # restores the centre also when scoring raises
            for member, result in zip(members, results, strict=True):
                with timer("score"):
                    scores = self._score(inputs, result, where=f"step {step}, member {member.index}")
                record.members[member.index] = member_stats(
                    result, scores, len(self.reward_funcs), num_prompts=len(inputs), threshold=self.success_threshold
                )
                if scores is not None and not self._last_samples:
                    self._last_samples = completions_sample(
                        prompt_texts, result, scores, self.sampling.num_generations, self.reward_func_names
                    )

    def _log_step(self, record: StepRecord, skipped: bool, update_norm: float, timing: dict, wall: float) -> None:
        metrics = self._metrics["train"]
        tokens = add_step_metrics(metrics, record, self.reward_func_names, skipped, update_norm, timing, wall)
        self._total_generated_tokens += tokens

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs or "train_runtime" in logs:
            # Trainer logs the loss it accumulated; for ES that is minus the mean population reward.
            merge_train_metrics(logs, self._metrics["train"], self._total_generated_tokens, self.reward_funcs)
            self._metrics["train"].clear()
            if self.args.log_completions and self._last_samples and self.is_world_process_zero():
                print_completions(self._last_samples, self.args.num_completions_to_print, self.state.global_step)
        super().log(logs, start_time)

    def _evaluate_split(self, dataset: Dataset, metric_key_prefix: str) -> dict[str, float]:
        # One dataset of `evaluate` (RewardEvaluationMixin), on the exact centre weights.
        check_prompt_dataset(dataset, "eval_dataset")
        if is_streamed(dataset):  # evaluation shards rows by index: a (finite) evaluation stream is read once
            dataset = Dataset.from_list(list(dataset))
        timer = StepTimer()
        self.backend.restore()
        metrics = evaluate_rewards(
            self.backend,
            dataset,
            format_prompts=self._prompt_texts,
            score=self._score,
            sampling=self.sampling,
            reward_func_names=self.reward_func_names,
            batch_size=self.args.per_device_eval_batch_size,
            seed=self.args.noise_seed,
            accelerator=self.accelerator,
            metric_key_prefix=metric_key_prefix,
        )
        metrics[f"{metric_key_prefix}_runtime"] = timer.elapsed()
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics
