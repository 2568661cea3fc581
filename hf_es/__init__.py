"""hf_es: Evolution Strategies post-training for LLM reasoning, built into the Hugging Face stack.

```python
from hf_es import ESConfig, ESTrainer  # was: from trl import GRPOConfig, GRPOTrainer
```
"""

from typing import TYPE_CHECKING

from .metrics.registration import ensure_registered as _ensure_metrics_registered

__version__ = "0.1.0.dev0"

__all__ = ["ESConfig", "ESTrainer", "RewardFunctionError", "__version__"]

if TYPE_CHECKING:
    from .trainer import ESConfig, ESTrainer, RewardFunctionError


# `evaluate.load("pass_at_k")` by bare name: writes our metrics into evaluate's module cache once per version
# (cheap file comparison otherwise; HF_ES_REGISTER_METRICS=0 turns it off). See hf_es/metrics/registration.py.
_ensure_metrics_registered()


def __getattr__(name: str):
    # Lazy: `import hf_es.es` (pure torch) must not pay for importing transformers and the trainer.
    if name in ("ESConfig", "ESTrainer", "RewardFunctionError"):
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'hf_es' has no attribute {name!r}")
