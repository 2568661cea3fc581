"""Post-hoc analysis of ES checkpoints: parameter drift, update sparsity and magnitude-thresholded checkpoints.

- `checkpoint`: [`CheckpointSource`], streaming row-block reads of safetensors checkpoints or state dicts;
- `names`: [`module_type`] and [`layer_index`] of a parameter name;
- `report`: [`DriftReport`] / [`TensorDrift`] and their JSON / Markdown forms;
- `drift`: [`compute_drift`] and [`compare_drift`] (computation only);
- `threshold`: [`threshold_checkpoint`] and [`threshold_sweep`];
- `plots`: the drift and sweep figures (the only module that imports matplotlib).
"""

from .checkpoint import CheckpointSource
from .drift import compare_drift, compute_drift
from .names import layer_index, module_type
from .report import DEFAULT_TAUS, TOP_K_GROUPS, DriftReport, TensorDrift
from .threshold import threshold_checkpoint, threshold_sweep

__all__ = [
    "DEFAULT_TAUS",
    "TOP_K_GROUPS",
    "CheckpointSource",
    "DriftReport",
    "TensorDrift",
    "compare_drift",
    "compute_drift",
    "layer_index",
    "module_type",
    "threshold_checkpoint",
    "threshold_sweep",
]
