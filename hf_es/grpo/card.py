"""The GRPO baseline's model card: TRL's card plus the hf_es lineage, `hf_es_lineage.json` and `log_history.json`."""

from __future__ import annotations

import json
import os
from typing import Any

from trl import GRPOTrainer

from ..model_card.lineage import training_lineage, write_lineage
from ..model_card.sections import lineage_text
from ..tasks import TaskArguments

__all__ = ["write_grpo_card"]


def write_grpo_card(trainer: GRPOTrainer, model_path: str, task_args: TaskArguments) -> list[dict[str, Any]]:
    """Writes TRL's GRPO model card with the hf_es lineage section, `hf_es_lineage.json` and `log_history.json` into
    `trainer.args.output_dir`.

    Args:
        trainer: The GRPO trainer (after training).
        model_path: The checkpoint training started from (its `hf_es_lineage.json`, if any, is continued).
        task_args: The task, recorded as the stage's dataset.

    Returns:
        The lineage: the earlier stages read from `model_path`, then this GRPO stage.
    """
    from huggingface_hub import ModelCard

    output_dir = trainer.args.output_dir
    lineage = training_lineage(model_path, trainer.state.global_step, task_args.dataset_name, method="GRPO")
    GRPOTrainer.create_model_card(trainer, model_name=os.path.basename(os.path.normpath(output_dir)))
    card_path = os.path.join(output_dir, "README.md")
    card = ModelCard.load(card_path)
    root = lineage[0]["model"]
    card.data.base_model = root  # the root of the lineage (TRL leaves local folders out)
    card.text = card.text.replace("[None](https://huggingface.co/None)", f"[{root}](https://huggingface.co/{root})")
    card.text = card.text.replace('model="None"', f'model="{trainer.args.hub_model_id or output_dir}"')
    tags = list(card.data.tags or [])
    card.data.tags = tags + [tag for tag in ("hf_es", "grpo") if tag not in tags]
    steps = "\n".join(f"{i}. {lineage_text(stage)}" for i, stage in enumerate(lineage, 1))
    card.text = card.text.rstrip("\n") + f"\n\n## Lineage\n\n{steps}\n\n![reward curve](reward_curve.png)\n"
    card.save(card_path)
    os.makedirs(output_dir, exist_ok=True)
    write_lineage(output_dir, lineage)
    with open(os.path.join(output_dir, "log_history.json"), "w") as f:
        json.dump(trainer.state.log_history, f, indent=2)
    return lineage
