"""Model cards of ES-trained checkpoints: what the run was (task, rewards, command, base vs final scores), its
hyper-parameters, reward curve, Pass@K results and parameter drift. Hub upload and redaction live in `hf_es.hub`.

- `card`: [`build_model_card`] / [`write_model_card`] and the template;
- `run_record`: [`RunFacts`], what a trainer is told about its run, and [`RunRecord`], what the card shows of it;
- `sections`: the card's tables and snippets as plain values;
- `eval_results`: the Pass@K JSON of `scripts/evaluate_pass_at_k.py` -> table and `model-index`;
- `plots`: [`plot_reward_curve`].
"""

from .card import DEFAULT_TAGS, build_model_card, model_card_template_path, write_model_card
from .eval_results import dataset_ids, eval_results_from_json, eval_table, model_index
from .plots import plot_reward_curve
from .run_record import RunFacts, RunRecord, base_and_final_metrics, recipe_of_command
from .sections import APPLICABLE_TRAINER_FIELDS, ES_HYPERPARAMETERS

__all__ = [
    "APPLICABLE_TRAINER_FIELDS",
    "DEFAULT_TAGS",
    "ES_HYPERPARAMETERS",
    "RunFacts",
    "RunRecord",
    "base_and_final_metrics",
    "build_model_card",
    "dataset_ids",
    "eval_results_from_json",
    "eval_table",
    "model_card_template_path",
    "model_index",
    "plot_reward_curve",
    "recipe_of_command",
    "write_model_card",
]
