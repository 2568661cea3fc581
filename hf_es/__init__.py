"""hf_es: Evolution Strategies post-training for LLM reasoning, built into the Hugging Face stack.

```python
from hf_es import ESConfig, ESTrainer  # was: from trl import GRPOConfig, GRPOTrainer
```
"""

from typing import TYPE_CHECKING

__version__ = "0.1.0.dev0"

__all__ = ["ESConfig", "ESTrainer", "RewardFunctionError", "__version__"]

if TYPE_CHECKING:
    from .trainer import ESConfig, ESTrainer, RewardFunctionError


def __getattr__(name: str):
    # Lazy: `import hf_es.es` (pure torch) must not pay for importing transformers and the trainer.
    if name in ("ESConfig", "ESTrainer", "RewardFunctionError"):
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'hf_es' has no attribute {name!r}")
