"""`python -m bench.gpu_check --tiny`: the GPU self-check's checks pass on CPU and its JSON has every field."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
gpu_check = pytest.importorskip("bench.gpu_check")


def test_tiny_gpu_check_passes_and_reports_every_measurement(tmp_path):
    out = tmp_path / "gpu.json"
    data = gpu_check.main(["--tiny", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(data))
    assert data["errors"] == [] and data["all_checks_pass"] is True
    tiny = data["models"]["tiny"]
    assert tiny["build"]["num_parameters"] > 0
    assert tiny["inference"]["generate_s_per_member"] > 0
    for noise_type in ("table", "gaussian"):
        exact = tiny[f"exactness_{noise_type}"]
        assert exact["restore_exact_after_perturb"] and exact["restore_exact_after_update"]
        assert exact["update_matches_float64"] and exact["update_max_error_in_fp32_ulps"] <= 8
        speed = tiny[f"speed_memory_{noise_type}"]
        for key in ("perturb_s", "restore_s", "update_s_N4", "es_step_s_estimate", "master_bytes"):
            assert speed[key] > 0, key
        assert 0 < speed["overhead_fraction"] < 1 and isinstance(speed["meets_overhead_target"], bool)
        assert speed["master_bytes"] == 4 * tiny["build"]["num_parameters"]
    assert tiny["speed_memory_table"]["table_bytes"] == 4 * ((1 << 22) + (1 << 20))  # floor-sized table + padding
    shards = data["models"]["tp2_layer_shards"]["tp_shards"]  # one TP-2 rank's slices equal the whole tensors'
    assert shards["table"]["slices_exact"] and shards["gaussian"]["slices_exact"]
    assert shards["gaussian"]["rank1"]["update"] > 0


def test_sections_past_the_time_budget_are_skipped_and_recorded(tmp_path):
    out = tmp_path / "gpu.json"
    data = gpu_check.main(["--tiny", "--out", str(out), "--time_budget_s", "0"])
    assert data["models"]["tiny"]["build"] == {"skipped": "time budget of 0 s spent"}
    assert data["all_checks_pass"] is False  # nothing checked is not a pass
    assert json.loads(out.read_text())["models"]["tiny"]["build"]["skipped"]
