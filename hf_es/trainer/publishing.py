"""[`PublishingMixin`]: ESTrainer's card and Hub overrides of `transformers.Trainer`.

What ESTrainer writes for people and the Hub besides the weights: the model card with its lineage
([`hf_es.model_card`]), the repo it is pushed to, and pushes of the output folder or of a complete checkpoint folder
(`hub_strategy`, through [`hf_es.hub`]).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..hub import PUSH_ALLOW_PATTERNS, HubPushError, describe_hub_error, push_checkpoint
from ..model_card import RunFacts, RunRecord, write_model_card
from ..model_card.lineage import training_lineage, write_lineage
from ..models import base_model_id
from .adapters import drift_weights
from .checkpoint_files import ES_MASTER_NAME

if TYPE_CHECKING:
    from ..analysis import DriftReport

logger = logging.getLogger(__name__)

__all__ = ["HUB_ROOT_IGNORE", "PublishingMixin", "method_fields", "recorded_hyperparameters"]

HUB_ROOT_IGNORE = ("_*", f"{PREFIX_CHECKPOINT_DIR}-*", "runs/*", ES_MASTER_NAME)
"""Not pushed to the repo root: checkpoint and staging folders, TensorBoard runs, the fp32 master (resume-only)."""


def recorded_hyperparameters(args: Any, noise: Any = None) -> dict[str, Any]:
    """The run's arguments as the card records them.

    Args:
        args ([`ESConfig`]): The run's arguments.
        noise (*optional*): The noise source the run used; its size replaces an automatic `noise_table_size`.

    Returns:
        `args.to_dict()`, with the noise-table size the run actually used where the config left it automatic.
    """
    hyperparameters = args.to_dict()
    if hyperparameters.get("noise_table_size") is None and getattr(noise, "size", None) is not None:
        hyperparameters["noise_table_size"] = noise.size
    return hyperparameters


@functools.cache
def method_fields(config_class: type) -> frozenset[str]:
    """The fields `config_class` (e.g. [`ESConfig`]: ES, generation, reward and vLLM settings) adds to
    `TrainingArguments`: the card lists them with the Trainer fields that apply."""
    inherited = {field.name for field in dataclasses.fields(TrainingArguments)}
    return frozenset(field.name for field in dataclasses.fields(config_class) if field.name not in inherited)


class PublishingMixin:
    """Card and Hub overrides for [`ESTrainer`]; placed before `transformers.Trainer` in its bases, and relying on
    the trainer's `args`, `state`, `backend`, `model`, `train_dataset`, `reward_func_names`, `base_model_id` and
    `_total_generated_tokens`.

    Args:
        run_facts ([`~hf_es.model_card.RunFacts`], *optional*, keyword-only): What the card records beyond the
            arguments (task description, starting checkpoint, dataset name); the other arguments go to the next class.
    """

    hub_push_retries: int = 3
    """Retries of a failed Hub push (after the first attempt) before giving up."""
    hub_push_backoff_s: float = 2.0
    """Wait before the first retry of a failed Hub push; doubles after each failure."""

    def __init__(self, *args: Any, run_facts: RunFacts | None = None, **kwargs: Any):
        self.run_facts = run_facts if run_facts is not None else RunFacts()
        # (global_step, drift) of the last card: the saves of one step share one drift computation.
        self._drift_cache: tuple[int, DriftReport | None] | None = None
        super().__init__(*args, **kwargs)

    def _drift(self) -> DriftReport | None:
        """Drift from the base model, computed once per ES step however many saves/cards the step gets."""
        if not (self.args.model_card_drift and os.path.isdir(self.base_model_id)):
            return None
        from ..analysis import compute_drift

        step = self.state.global_step
        if self._drift_cache is None or self._drift_cache[0] != step:
            self.backend.sync_mirror()
            drift = compute_drift(self.base_model_id, drift_weights(self.model, self.backend.centre.state_dict()))
            self._drift_cache = (step, drift)
        return self._drift_cache[1]

    def _write_model_card(
        self, output_dir: str, model_name: str | None = None, dataset_name: str | None = None, **metadata: Any
    ) -> None:
        """Writes the model card (with reward curve, drift and lineage) and `hf_es_lineage.json` into `output_dir`;
        `dataset_name` defaults to `run_facts.dataset_name`; `metadata` (`tags`, `language`, `license`) goes into
        the card's header."""
        facts = self.run_facts
        dataset_name = dataset_name if dataset_name is not None else facts.dataset_name
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
        lineage = training_lineage(facts.source or self.base_model_id, self.state.global_step, dataset_name)
        dataset = self.train_dataset
        example = (
            dataset[0].get("prompt") if dataset is not None and hasattr(dataset, "__len__") and len(dataset) else None
        )
        run = RunRecord.from_run(
            task=facts.task,
            reward_funcs=self.reward_func_names,
            reward_weights=self.args.reward_weights,
            example_prompt=example,
            max_new_tokens=self.args.max_completion_length,
            log_history=self.state.log_history,
        )
        write_model_card(
            output_dir,
            base_model=lineage[0].get("model") or base_model_id(self.base_model_id),
            lineage=lineage if len(lineage) > 1 else None,
            method_fields=method_fields(type(self.args)),
            hyperparameters=recorded_hyperparameters(
                self.args, getattr(getattr(self.backend, "centre", None), "noise", None)
            ),
            log_history=self.state.log_history,
            drift=self._drift(),
            datasets=[dataset_name] if dataset_name else None,
            hardware=f"{device} x {self.accelerator.num_processes} process(es)",
            total_generated_tokens=self._total_generated_tokens,
            run=run,
            model_name=model_name,
            repo_id=self.args.hub_model_id,
            secrets=[self.args.hub_token] if self.args.hub_token else (),
            **metadata,
        )
        write_lineage(output_dir, lineage)

    def create_model_card(
        self,
        model_name: str | None = None,
        dataset_name: str | None = None,
        tags: str | list[str] | None = None,
        language: str | None = None,
        license: str | None = None,
        dataset: str | list[str] | None = None,
        **ignored: Any,
    ) -> None:
        """Writes the hf_es model card into `args.output_dir` (called by `push_to_hub`, whose keyword arguments
        arrive here, as in TRL).

        Args:
            model_name: The card's title (default: the output folder's name).
            dataset_name: The training dataset (TRL's argument), recorded in the card and the lineage.
            tags: Extra Hub tags, added to hf_es's own (TRL's and `Trainer`'s argument).
            language, license: Card metadata (`Trainer`'s arguments).
            dataset: `Trainer`'s name for the dataset(s), used when `dataset_name` is not given.
            **ignored: `Trainer`'s other card arguments (`finetuned_from`, `tasks`, `dataset_tags`,
                `dataset_args`): the card states the base model and the task from the run itself.
        """
        # No super(): Trainer's card is a `TrainingSummary` of optimizer settings; the hf_es card (run record, ES
        # hyper-parameters, drift, lineage) replaces it. Checked against transformers 5.24.
        if ignored:
            logger.info(
                f"Model card: {sorted(ignored)} not used (the card records the run's own base model and task)."
            )
        if dataset_name is None and dataset is not None:
            dataset_name = dataset if isinstance(dataset, str) else ", ".join(dataset)
        metadata = {"tags": [tags] if isinstance(tags, str) else tags, "language": language, "license": license}
        if self.is_world_process_zero():
            self._write_model_card(
                self.args.output_dir,
                model_name=model_name,
                dataset_name=dataset_name,
                **{key: value for key, value in metadata.items() if value is not None},
            )

    def init_hf_repo(self, token: str | None = None, private: bool | None = None) -> None:
        """Creates `args.hub_model_id` (or a repo named after `output_dir`) as `Trainer.init_hf_repo` does, with a
        client created now (so `HF_ENDPOINT` is honoured); a failure raises [`HubPushError`] saying which it is."""
        # No super(): Trainer's client ignores an HF_ENDPOINT set after import, and its error names no cause.
        # Checked against transformers 5.24.
        from huggingface_hub import HfApi

        if not self.is_world_process_zero():
            return
        args = self.args
        repo_name = args.hub_model_id or Path(args.output_dir).absolute().name
        token = token if token is not None else args.hub_token
        private = private if private is not None else args.hub_private_repo
        try:
            repo_url = HfApi(token=token).create_repo(repo_name, token=token, private=private, exist_ok=True)
        except Exception as error:
            raise HubPushError(describe_hub_error(error, repo_id=repo_name, local_dir=args.output_dir)) from None
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
        r"""Saves the model into `args.output_dir` first (always, whatever `save_strategy`), then uploads it to
        `args.hub_model_id` in a single commit: weights, tokenizer, config, model card, `drift_stats.json`,
        `trainer_state.json`, `es_state.json` and the plots (not checkpoints, staging folders or the fp32 master).

        A failed upload is retried with exponential backoff ([`~hf_es.hub.push_checkpoint`]); one that still fails
        raises [`~hf_es.hub.HubPushError`] saying which failure it is (Hub unreachable, no or invalid token, no
        permission, missing repo) and that the local copy is intact. The token is never written or logged.

        Args:
            commit_message (`str`, *optional*): Commit message (defaults to `"End of training"`).
            blocking (`bool`): Wait for the upload; if `False`, return a `Future`.
            token (`str`, *optional*): Defaults to `args.hub_token`.
            revision (`str`, *optional*): Defaults to `args.hub_revision`.
            private (`bool`, *optional*): Visibility if the repo is created; defaults to `args.hub_private_repo`.
            **kwargs: Keyword arguments of [`~PublishingMixin.create_model_card`] (`model_name`, `dataset_name`).

        Returns:
            The `CommitInfo` of the upload, or a `Future` of it when `blocking=False` (`None` on other processes).
        """
        # No super(): Trainer's push uploads with `upload_folder` (may split into several commits) and no retries.
        # Checked against transformers 5.24.
        from huggingface_hub import HfApi
        from transformers.utils.hub import PushInProgress

        args = self.args
        self.callback_handler.on_push_begin(args, self.state, self.control)
        model_name = kwargs.pop("model_name", None)
        if model_name is None and args.should_save:
            model_name = (args.hub_model_id or Path(args.output_dir).name).split("/")[-1]
        token = token if token is not None else args.hub_token
        self.save_model(_internal_call=True)  # the local copy first: a failed push loses nothing
        if not self.is_world_process_zero():
            return None
        self.save_state()  # trainer_state.json (log history) goes with the weights
        self.create_model_card(model_name=model_name, **kwargs)
        if self.hub_model_id is None:
            self.init_hf_repo(token=token, private=private)
        self._finish_current_push()
        api = HfApi(token=token)

        def push() -> Any:
            return push_checkpoint(
                args.output_dir,
                self.hub_model_id,
                token=token,
                private=private if private is not None else args.hub_private_repo,
                revision=revision if revision is not None else args.hub_revision,
                commit_message=commit_message or "End of training",
                ignore_patterns=HUB_ROOT_IGNORE,
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
        """`hub_strategy` pushes after each save, straight from the complete `checkpoint-N` folder: the model files,
        card, drift stats, trainer state and plots to the repo root in one commit; with `"checkpoint"` /
        `"all_checkpoints"` also the whole folder to `last-checkpoint/` / `checkpoint-N/` (a second commit, as in
        Trainer). Pushes are synchronous, so rotation never deletes a folder being uploaded; one that still fails after
        the retries is logged and training continues with the checkpoint kept locally."""
        # No super(): Trainer's copies the files into `output_dir` and uploads them in the background without retries,
        # so rotation could delete a folder mid-upload. Checked against transformers 5.24.
        from transformers.trainer_utils import HubStrategy, SaveStrategy

        args, state = self.args, self.state
        if not self.is_world_process_zero() or args.hub_strategy == HubStrategy.END:
            return
        self.callback_handler.on_push_begin(args, state, self.control)
        if args.save_strategy == SaveStrategy.STEPS:
            message = f"Training in progress, step {state.global_step}"
        else:
            message = f"Training in progress, epoch {int(state.epoch or 0)}"
        uploads: list[tuple[str | None, Any, Any, str]] = [(None, PUSH_ALLOW_PATTERNS, HUB_ROOT_IGNORE, message)]
        if args.hub_strategy in (HubStrategy.CHECKPOINT, HubStrategy.ALL_CHECKPOINTS):
            sub_folder = (
                "last-checkpoint" if args.hub_strategy == HubStrategy.CHECKPOINT else Path(checkpoint_folder).name
            )
            uploads.append((sub_folder, None, None, message + ", checkpoint"))
        for path_in_repo, allow_patterns, ignore_patterns, commit_message in uploads:
            try:
                push_checkpoint(
                    checkpoint_folder,
                    self.hub_model_id,
                    token=args.hub_token,
                    revision=args.hub_revision,
                    path_in_repo=path_in_repo,
                    commit_message=commit_message,
                    allow_patterns=allow_patterns,
                    ignore_patterns=ignore_patterns,
                    max_retries=self.hub_push_retries,
                    backoff_s=self.hub_push_backoff_s,
                )
            except (HubPushError, ValueError) as error:  # already scrubbed of the token
                logger.error(f"{error} Training continues.")
