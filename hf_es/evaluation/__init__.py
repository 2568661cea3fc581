"""Evaluation: Pass@K / Maj@K sampling with resume, summaries and plots (`scripts/evaluate_pass_at_k.py` is its
CLI), and the greedy reward evaluation shared by `ESTrainer.evaluate` and the GRPO baseline.

Everything generates through `hf_es.generation` backends with a [`~hf_es.generation.SamplingConfig`], and formats
prompts with `hf_es.prompts.prompt_texts` (the TRL convention: chat messages get the chat template, text goes raw).
"""

from .pass_at_k import LoadedModel, PassAtKConfig, evaluate_checkpoint, evaluate_checkpoints, load_model, problem_seed
from .plots import checkpoint_label, pareto_front, plot_pareto, plot_pass_at_k, plot_results
from .problems import (
    default_reward_name,
    extract_final_answer,
    extract_gold_answer,
    is_local_file,
    load_problems,
    load_reward,
    problem_id,
    score_completions,
    uses_majority_vote,
)
from .results import (
    FORMAT_VERSION,
    RESUME_KEYS,
    check_resume,
    load_results,
    model_revision,
    prompt_hash,
    save_results,
    summarize,
    summary_line,
)
from .reward_eval import RewardEvaluationMixin, evaluate_rewards

__all__ = [
    "FORMAT_VERSION",
    "RESUME_KEYS",
    "LoadedModel",
    "PassAtKConfig",
    "RewardEvaluationMixin",
    "check_resume",
    "checkpoint_label",
    "default_reward_name",
    "evaluate_checkpoint",
    "evaluate_checkpoints",
    "evaluate_rewards",
    "extract_final_answer",
    "extract_gold_answer",
    "is_local_file",
    "load_model",
    "load_problems",
    "load_results",
    "load_reward",
    "model_revision",
    "pareto_front",
    "plot_pareto",
    "plot_pass_at_k",
    "plot_results",
    "problem_id",
    "problem_seed",
    "prompt_hash",
    "save_results",
    "score_completions",
    "summarize",
    "summary_line",
    "uses_majority_vote",
]
