"""`python -m bench.gpu_check --tiny`: the GPU self-check's checks pass on CPU, its JSON has every field, and it can
fail (exit 1 on a failed check, 2 without CUDA and without `--tiny`)."""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench import gpu_check  # noqa: E402 (the repository root holds the bench package)


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
        assert exact["perturb_matches_reference"]
        assert exact["restore_exact_after_perturb"] and exact["restore_exact_after_update"]
        assert exact["update_matches_float64"] and exact["update_max_error_in_fp32_ulps"] <= 8
        speed = tiny[f"speed_memory_{noise_type}"]
        for key in ("perturb_s", "restore_s", "update_s_N4", "es_step_s_estimate", "master_bytes"):
            assert speed[key] > 0, key
        assert 0 < speed["overhead_fraction"] < 1
        # The targets are judged on CUDA only; on the CPU they are reported as not applicable.
        assert speed["meets_overhead_target"] is None and speed["meets_memory_target"] is None
        assert speed["master_bytes"] == 4 * tiny["build"]["num_parameters"]
    assert tiny["speed_memory_table"]["table_bytes"] == 4 * ((1 << 22) + (1 << 20))  # floor-sized table + padding
    placement = tiny["placement_beside_vllm"]
    assert placement["placed_on_device_as_planned"] and "beside vLLM's 0.55 share of 80.00 GiB" in placement["reason"]
    compiled = data["checks"]["inplace_compiled"]["torch_compile_aot_eager"]
    assert compiled["sees_perturbation"] and compiled["restores_bit_exact"] and compiled["eager_logit_change"] > 0
    low_rank = data["checks"]["low_rank_vs_full_rank"]
    assert low_rank["rows_bounded"] and low_rank["low_rank_largest_call_rows"] <= 3
    assert low_rank["low_rank_generate_calls"] == 3  # 4 members x 2 prompts in calls of at most 3 rows
    assert low_rank["full_generate_calls"] == 4 and low_rank["full_steps_per_s"] > 0
    shards = data["models"]["tp2_layer_shards"]["tp_shards"]  # one TP-2 rank's slices equal the whole tensors'
    assert shards["table"]["slices_exact"] and shards["gaussian"]["slices_exact"]
    assert shards["gaussian"]["rank1"]["update"] > 0


def test_sections_past_the_time_budget_are_skipped_and_recorded(tmp_path):
    out = tmp_path / "gpu.json"
    data = gpu_check.main(["--tiny", "--out", str(out), "--time_budget_s", "0"])
    assert data["models"]["tiny"]["build"] == {"skipped": "time budget of 0 s spent"}
    assert data["all_checks_pass"] is False  # nothing checked is not a pass
    assert json.loads(out.read_text())["models"]["tiny"]["build"]["skipped"]


def test_a_failed_check_exits_1(tmp_path, monkeypatch):
    # An engine whose compiled forward does not see the in-place writes (as with weights frozen into constants).
    def frozen(*args):
        return {"torch_compile_aot_eager": {"sees_perturbation": False, "restores_bit_exact": True}}

    monkeypatch.setattr(gpu_check, "check_inplace_compiled", frozen)
    out = tmp_path / "gpu.json"
    assert gpu_check.cli(["--tiny", "--out", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["errors"] == [] and data["all_checks_pass"] is False


def test_no_cuda_and_no_tiny_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.cli([]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no CUDA device" in error and "--tiny" in error
