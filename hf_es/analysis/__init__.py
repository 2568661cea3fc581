"""Post-hoc analysis of ES checkpoints: parameter drift, update sparsity and magnitude-thresholded checkpoints."""

from .drift import (
    DEFAULT_TAUS,
    TOP_K_GROUPS,
    DriftReport,
    TensorDrift,
    compare_drift,
    compute_drift,
    layer_index,
    module_type,
    threshold_checkpoint,
    threshold_sweep,
)

__all__ = [
    "DEFAULT_TAUS",
    "TOP_K_GROUPS",
    "DriftReport",
    "TensorDrift",
    "compare_drift",
    "compute_drift",
    "layer_index",
    "module_type",
    "threshold_checkpoint",
    "threshold_sweep",
]
