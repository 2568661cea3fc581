"""Data x tensor-parallel layouts of vLLM engines: P processes x TP T must fit the node (no vLLM needed)."""

from __future__ import annotations

import pytest

from hf_es.generation.vllm_worker import check_layout


def test_layouts_that_fit_pass():
    check_layout(4, 2, 8)  # 8 GPUs = 4 engines x TP 2
    check_layout(1, 8, 8)
    check_layout(1, 2, 2, kind="CPU cores")


def test_layouts_that_do_not_fit_are_refused_with_the_ones_that_do():
    with pytest.raises(ValueError, match=r"need 16 GPUs .* has 8\. Layouts that fit: .*4 processes x TP 2"):
        check_layout(8, 2, 8)
    with pytest.raises(ValueError, match="at least 1"):
        check_layout(1, 0, 8)
