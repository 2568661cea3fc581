# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""
`evaluate` metric modules shipped with hf_es: `pass_at_k` and `maj_at_k`.

Each metric is a folder (`<name>/<name>.py` + metric card `README.md`) that `evaluate.load` can read by path, offline.
After `import hf_es` (or `python -m hf_es.metrics register`) they also load by bare name, offline and online: see
[`hf_es.metrics.registration`].

```python
>>> import evaluate, hf_es
>>> evaluate.load("pass_at_k").compute(num_samples=[4, 4], num_correct=[1, 0], k=[1, 2])["pass@2"]
0.25
>>> import hf_es.metrics
>>> pass_at_k = hf_es.metrics.load("pass_at_k")  # same as evaluate.load(hf_es.metrics.metric_path("pass_at_k"))
>>> pass_at_k.compute(num_samples=[4, 4], num_correct=[1, 0], k=[1, 2])["pass@2"]
0.25
```

The pure estimators (no `evaluate` needed) are in [`hf_es.metrics.estimators`].
"""

from __future__ import annotations

from typing import Any

from .registration import AVAILABLE_METRICS, METRICS_DIR, register, unregister

__all__ = ["AVAILABLE_METRICS", "METRICS_DIR", "load", "metric_path", "register", "unregister"]


def metric_path(name: str) -> str:
    """
    Local folder of a bundled metric, suitable for `evaluate.load`.

    Args:
        name (`str`): one of `"pass_at_k"`, `"maj_at_k"` (`"pass@k"` / `"maj@k"` spellings are accepted too).

    Returns:
        `str`: the absolute path of the metric folder.
    """
    key = name.lower().replace("@", "_at_").replace("-", "_")
    if key not in AVAILABLE_METRICS:
        raise ValueError(f"Unknown hf_es metric {name!r}; available: {', '.join(AVAILABLE_METRICS)}.")
    return str(METRICS_DIR / key)


def load(name: str, **kwargs: Any):
    """
    Load a bundled metric with `evaluate.load`, from its local folder (works offline).

    Args:
        name (`str`): `"pass_at_k"` or `"maj_at_k"`.
        **kwargs: forwarded to `evaluate.load` (e.g. `experiment_id`, `num_process`, `process_id`).

    Returns:
        `evaluate.EvaluationModule`: the metric.
    """
    import evaluate

    return evaluate.load(metric_path(name), **kwargs)
