"""Building and writing the model card of an ES-trained checkpoint with `huggingface_hub.ModelCard`.

[`write_model_card`] is what `ESTrainer` calls on every save and before `push_to_hub`: it writes `README.md`,
`reward_curve.png` and, given a drift report, `drift_stats.json`. Credentials never reach these files
(`hf_es.hub.redact` / `scrub_text`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from collections.abc import Collection, Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huggingface_hub import ModelCard, ModelCardData

from ..hub import redact, scrub_file, scrub_text
from . import sections
from .eval_results import eval_results_from_json, eval_table, model_index
from .run_record import RunRecord, base_and_final_metrics

if TYPE_CHECKING:
    from ..analysis import DriftReport

__all__ = ["DEFAULT_TAGS", "build_model_card", "model_card_template_path", "write_model_card"]

DEFAULT_TAGS: tuple[str, ...] = ("hf_es", "evolution-strategies", "es", "reinforcement-learning", "text-generation")

EvalResultsInput = Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path


def model_card_template_path() -> Path:
    """Path of the Jinja template shipped with the package (`hf_es/templates/model_card.md`)."""
    return Path(str(resources.files("hf_es") / "templates" / "model_card.md"))


def _datasets(datasets: Sequence[str] | None, run: RunRecord | None) -> list[str]:
    if datasets:
        return list(datasets)
    task = run.task if run is not None else None
    return [task["hub_id"]] if task and task.get("source") == "hub" else []


def _reproduction(
    run: RunRecord | None, reproduce_command: str | Sequence[str] | None, base_model: str, hyperparameters: Mapping
) -> dict[str, Any]:
    if reproduce_command is not None:
        command = reproduce_command if isinstance(reproduce_command, str) else shlex.join(map(str, reproduce_command))
        code, language = command, "bash"
    else:
        code, language = sections.reproduce_section(run, base_model, hyperparameters)
    recipe = run.recipe if run is not None else None
    return {
        "reproduce_command": code,
        "reproduce_language": language,
        "recipe": recipe.rstrip("\n") if recipe else None,
        "recipe_path": run.recipe_path if run is not None else None,
    }


def _default_repo_id(hyperparameters: Mapping[str, Any]) -> str:
    """The repo the card is for when none is given: `hub_model_id`, else the output folder's name."""
    output_dir = hyperparameters.get("output_dir")
    return hyperparameters.get("hub_model_id") or (Path(str(output_dir)).name if output_dir else "path/to/model")


def _run_values(run: RunRecord | None, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
    """The template's values taken from the [`RunRecord`]: task, rewards, base vs final scores, quick-start prompt."""
    max_new_tokens = (run.max_new_tokens if run is not None else None) or hyperparameters.get("max_completion_length")
    return {
        "task_lines": sections.task_lines(run.task if run is not None else None),
        "reward_rows": sections.reward_rows(run) if run is not None else [],
        "score_rows": sections.base_vs_final_rows(run) if run is not None else [],
        "final_step": run.final_step if run is not None else None,
        "quick_start_prompt": sections.quick_start_prompt(run),
        "max_new_tokens": max_new_tokens or 256,
    }


def _drift_table(drift: DriftReport | None, drift_taus: Sequence[float] | None) -> str | None:
    """The drift report as markdown, at the thresholds of `drift_taus` that are in the report's grid."""
    if drift is None:
        return None
    taus = [t for t in (drift_taus or drift.taus) if any(math.isclose(t, g, rel_tol=1e-9) for g in drift.taus)]
    return drift.to_markdown(taus=taus or None, top_k=0)


def build_model_card(
    *,
    base_model: str,
    hyperparameters: Mapping[str, Any] | None = None,
    method_fields: Collection[str] = (),
    log_history: Sequence[Mapping[str, Any]] | None = None,
    run: RunRecord | None = None,
    drift: DriftReport | None = None,
    eval_results: EvalResultsInput | None = None,
    eval_checkpoint: str | None = None,
    eval_strict: bool = True,
    lineage: Sequence[Any] | None = None,
    datasets: Sequence[str] | None = None,
    hardware: str | None = None,
    wall_time_s: float | None = None,
    total_generated_tokens: int | None = None,
    model_name: str | None = None,
    repo_id: str | None = None,
    license: str | None = None,
    language: str | Sequence[str] | None = "en",
    tags: Sequence[str] | None = None,
    reproduce_command: str | Sequence[str] | None = None,
    reward_curve: str | None = None,
    drift_file: str = "drift_stats.json",
    drift_taus: Sequence[float] | None = (1e-4, 5e-4, 1e-3, 1.5e-3, 3e-3, 1e-2),
    secrets: Iterable[str] = (),
    template_path: str | Path | None = None,
) -> ModelCard:
    r"""Renders the model card of an ES-trained checkpoint (no files written; see [`write_model_card`]).

    Args:
        base_model: Hub id (or path) of the model training started from.
        hyperparameters: Training arguments, e.g. `ESConfig.to_dict()`. The ES ones go in the main table; the other
            `method_fields` and the Trainer fields that apply to ES in a collapsed table; the rest (optimizer,
            epochs, ...) and credentials are left out.
        method_fields: The argument names the training method adds to `TrainingArguments` (ESTrainer passes
            `ESConfig`'s own fields).
        log_history: `TrainerState.log_history`.
        run: The [`RunRecord`]: task, reward functions and weights, command, base vs final scores, example prompt.
        drift: Drift from the base model, shown as tables.
        eval_results: Pass@K results (see [`eval_results_from_json`]); adds a table and the `model-index` metadata.
        eval_checkpoint, eval_strict: Which checkpoint of the evaluation JSON is this model (see
            [`eval_results_from_json`]).
        lineage: Training stages, strings or dicts such as `{"method": "GRPO", "model": ..., "steps": 250}`.
        datasets: Hub ids of the training datasets (default: the run's Hub task, none for generated tasks).
        hardware, wall_time_s, total_generated_tokens: Shown in the run summary (the last two default to the
            values in `log_history`).
        model_name: Title and `model-index` name (defaults to the repo name).
        repo_id: Hub repo the card is for (used in the quick-start example).
        license, language, tags: Metadata (`tags` are added to `DEFAULT_TAGS`).
        reproduce_command: The exact training command; defaults to the run's command, else a snippet.
        reward_curve: Relative path of the reward-curve image to embed.
        drift_file: Relative path of the drift JSON to link.
        drift_taus: Thresholds shown in the drift table (those in the report's grid).
        secrets: Strings that must not appear in the card (e.g. the Hub token).
        template_path: Jinja template; defaults to [`model_card_template_path`].

    Returns:
        The rendered `huggingface_hub.ModelCard`.
    """
    # Long only through its arguments and docstring: the body turns the inputs into the template's values.
    secrets = [s for s in secrets if s]
    hyperparameters = redact(dict(hyperparameters or {}), secrets)
    log_history = list(log_history or [])
    if run is not None and run.base_metrics is None and run.final_metrics is None:
        base, final, step = base_and_final_metrics(log_history)
        run = dataclasses.replace(run, base_metrics=base, final_metrics=final, final_step=step)
    datasets = _datasets(datasets, run)
    repo_id = repo_id if repo_id is not None else _default_repo_id(hyperparameters)
    model_name = model_name or str(repo_id).split("/")[-1]
    rows = eval_results_from_json(eval_results, checkpoint=eval_checkpoint, strict=eval_strict) if eval_results else []
    card_data = ModelCardData(
        base_model=base_model,
        library_name="hf_es",
        license=license,
        language=list(language) if isinstance(language, (list, tuple)) else language,
        datasets=datasets or None,
        tags=list(dict.fromkeys([*DEFAULT_TAGS, *(tags or [])])),
        pipeline_tag="text-generation",
        model_name=model_name,
        eval_results=model_index(rows) or None,
    )
    es_rows, other_rows = sections.hyperparameter_rows(hyperparameters, method_fields)
    card = ModelCard.from_template(
        card_data,
        template_path=str(template_path or model_card_template_path()),
        model_name=model_name,
        repo_id=repo_id,
        base_model=base_model,
        base_model_url=base_model
        if base_model.startswith(("http://", "https://"))
        else f"https://huggingface.co/{base_model}",
        datasets=datasets,
        lineage=[sections.lineage_text(step) for step in (lineage or [])],
        **_run_values(run, hyperparameters),
        es_hyperparameters=es_rows,
        other_hyperparameters=other_rows,
        training_summary=sections.training_summary(
            log_history, hardware=hardware, wall_time_s=wall_time_s, total_generated_tokens=total_generated_tokens
        ),
        reward_curve=reward_curve,
        eval_table=eval_table(rows),
        drift_table=_drift_table(drift, drift_taus),
        drift_file=drift_file,
        framework_versions=sections.framework_versions(),
        **_reproduction(run, reproduce_command, base_model, hyperparameters),
    )
    text = re.sub(r"\n{3,}", "\n\n", scrub_text(str(card), secrets)).rstrip("\n") + "\n"
    return ModelCard(text)


def write_model_card(
    output_dir: str | Path,
    *,
    log_history: Sequence[Mapping[str, Any]] | None = None,
    drift: DriftReport | None = None,
    eval_checkpoint: str | None = None,
    secrets: Iterable[str] = (),
    **card_kwargs: Any,
) -> ModelCard:
    r"""Writes the model card (`README.md`), `reward_curve.png` and `drift_stats.json` into a checkpoint folder.

    The reward curve is drawn from `log_history` (skipped when nothing was logged); `drift_stats.json` is written when
    `drift` is given (one already in the folder is reused for the card otherwise).

    Args:
        output_dir: The checkpoint folder.
        log_history, drift: See [`build_model_card`].
        eval_checkpoint: Which checkpoint of the evaluation JSON is this model; by default the one whose path or
            folder name matches `output_dir`, else the last one.
        secrets: Strings that must never be written (pass `args.hub_token`).
        **card_kwargs: The other arguments of [`build_model_card`] (`base_model`, `hyperparameters`,
            `method_fields`, `run`, `eval_results`, `lineage`, `hardware`, `repo_id`, ...).

    Returns:
        The card that was saved to `output_dir/README.md`.

    Example:

    ```python
    >>> from hf_es.model_card import RunRecord, write_model_card
    >>> write_model_card(
    ...     "runs/es-gsm8k/checkpoint-500",
    ...     base_model="Qwen/Qwen2.5-1.5B-Instruct",
    ...     hyperparameters=trainer.args.to_dict(),
    ...     log_history=trainer.state.log_history,
    ...     run=RunRecord.from_run(reward_funcs=trainer.reward_func_names, log_history=trainer.state.log_history),
    ... )
    ```
    """
    from .plots import plot_reward_curve

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    secrets = [s for s in secrets if s]
    log_history = list(log_history or [])
    reward_curve = plot_reward_curve(log_history, output_dir / "reward_curve.png")
    drift_path = output_dir / card_kwargs.pop("drift_file", "drift_stats.json")
    if drift is not None:
        drift.save(drift_path)
        scrub_file(drift_path, secrets)
    elif drift_path.is_file():
        from ..analysis import DriftReport

        try:
            drift = DriftReport.load(drift_path)
        except (KeyError, TypeError, ValueError):
            drift = None
    card = build_model_card(
        log_history=log_history,
        drift=drift,
        reward_curve=reward_curve.name if reward_curve is not None else None,
        drift_file=drift_path.name,
        secrets=secrets,
        eval_checkpoint=eval_checkpoint or str(output_dir),
        eval_strict=eval_checkpoint is not None,
        **card_kwargs,
    )
    card.save(output_dir / "README.md")
    return card
