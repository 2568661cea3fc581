"""ES trainer and its configuration (TRL's `<algo>_config.py` / `<algo>_trainer.py` pairing)."""

from .es_config import GRPO_ONLY_FIELDS, ESConfig, check_no_grpo_only_fields
from .es_trainer import ESTrainer, RewardFunctionError

__all__ = ["GRPO_ONLY_FIELDS", "ESConfig", "ESTrainer", "RewardFunctionError", "check_no_grpo_only_fields"]
