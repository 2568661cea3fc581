"""hf_es: Evolution Strategies post-training for LLM reasoning, built into the Hugging Face stack.

```python
from hf_es import ESConfig, ESTrainer  # was: from trl import GRPOConfig, GRPOTrainer
```
"""

__version__ = "0.1.0.dev0"

from .trainer import ESConfig, ESTrainer, RewardFunctionError

__all__ = ["ESConfig", "ESTrainer", "RewardFunctionError", "__version__"]
