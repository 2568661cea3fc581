"""Parameter drift (hf_es.analysis): statistics against independent float64 numpy computations, threshold
checkpoints, the sweep helper and scripts/drift_report.py."""

import json
import math
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from hf_es.analysis import (
    DriftReport,
    compare_drift,
    compute_drift,
    layer_index,
    module_type,
    threshold_checkpoint,
    threshold_sweep,
)
from hf_es.analysis.plots import plot_threshold_sweep

REPO = Path(__file__).resolve().parents[2]
TAUS = (1e-5, 1e-4, 1.5e-3, 1e-2)


def tiny_llama(seed=0, tie=True):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
    )
    return LlamaForCausalLM(config).eval()


def log_uniform_delta(shape, generator, zero_fraction=0.2):
    """|delta| log-uniform in [1e-6, 3e-2], random signs, a fraction of exact zeros."""
    magnitude = 10 ** (torch.rand(shape, generator=generator) * (math.log10(3e-2) + 6) - 6)
    sign = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
    zero = torch.rand(shape, generator=generator) < zero_fraction
    return torch.where(zero, torch.zeros(shape), magnitude * sign)


def perturbed(state_dict, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return {k: (v.float() + log_uniform_delta(v.shape, generator)).to(v.dtype) for k, v in state_dict.items()}


def reference_stats(base, tuned, taus):
    """Independent float64 numpy computation over dicts of tensors (each name counted once)."""
    b = np.concatenate([base[k].float().numpy().astype(np.float64).ravel() for k in sorted(base)])
    t = np.concatenate([tuned[k].float().numpy().astype(np.float64).ravel() for k in sorted(base)])
    d = t - b
    ad = np.abs(d)
    nonzero = ad > 0
    return {
        "relative_l2": float(np.sqrt((d**2).sum() / (b**2).sum())),
        "num_params": b.size,
        "num_unchanged": int((~nonzero).sum()),
        "sparsity": {tau: float(((ad <= tau) & nonzero).sum() / nonzero.sum()) for tau in taus},
        "max_abs": float(ad.max()),
    }


# --------------------------------------------------------------------------------------------------------------------
# Naming


@pytest.mark.parametrize(
    "name, kind, layer",
    [
        ("model.embed_tokens.weight", "embedding", None),
        ("lm_head.weight", "lm_head", None),
        ("model.norm.weight", "norm", None),
        ("model.layers.3.input_layernorm.weight", "norm", 3),
        ("model.layers.3.post_attention_layernorm.weight", "norm", 3),
        ("model.layers.0.self_attn.q_proj.weight", "attn_q", 0),
        ("model.layers.0.self_attn.q_proj.bias", "bias", 0),
        ("model.layers.11.self_attn.k_proj.weight", "attn_k", 11),
        ("model.layers.1.self_attn.v_proj.weight", "attn_v", 1),
        ("model.layers.1.self_attn.o_proj.weight", "attn_o", 1),
        ("model.layers.1.self_attn.q_norm.weight", "norm", 1),
        ("model.layers.2.mlp.gate_proj.weight", "mlp", 2),
        ("model.layers.2.mlp.down_proj.weight", "mlp", 2),
        ("transformer.h.4.attn.c_attn.weight", "attn_qkv", 4),
        ("transformer.h.4.attn.c_proj.weight", "attn_o", 4),
        ("transformer.h.4.mlp.c_fc.weight", "mlp", 4),
        ("transformer.h.4.ln_1.bias", "norm", 4),
        ("transformer.wte.weight", "embedding", None),
    ],
)
def test_module_type_and_layer(name, kind, layer):
    assert module_type(name) == kind
    assert layer_index(name) == layer


# --------------------------------------------------------------------------------------------------------------------
# compute_drift on synthetic state dicts


def test_known_deltas_hand_computed():
    base = {
        "model.layers.0.self_attn.q_proj.weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
        "model.layers.0.mlp.up_proj.weight": torch.tensor([0.5, -0.5, 0.25, 1.0]),
        "model.norm.weight": torch.ones(2),
    }
    tuned = {k: v.clone() for k, v in base.items()}
    tuned["model.layers.0.self_attn.q_proj.weight"][0, 1] += 1e-3  # below 1.5e-3
    tuned["model.layers.0.self_attn.q_proj.weight"][1, 0] -= 2e-3  # above
    tuned["model.layers.0.mlp.up_proj.weight"][3] += 5e-5  # below 1e-4
    tuned["model.norm.weight"][1] += 0.5  # largest
    report = compute_drift(base, tuned, taus=TAUS)

    # ||theta_0||^2 = 1+4+9+16 + 0.25+0.25+0.0625+1 + 2 = 33.5625; deltas computed in float32 from the stored values
    deltas = [
        np.float32(np.float32(2.0) + np.float32(1e-3)) - np.float32(2.0),
        np.float32(np.float32(3.0) - np.float32(2e-3)) - np.float32(3.0),
        np.float32(np.float32(1.0) + np.float32(5e-5)) - np.float32(1.0),
        0.5,
    ]
    expected = math.sqrt(sum(float(x) ** 2 for x in deltas) / 33.5625)
    assert report.relative_l2 == pytest.approx(expected, rel=1e-12)
    assert report.num_params == 10 and report.num_changed == 4 and report.num_unchanged == 6
    assert report.fraction_unchanged == pytest.approx(0.6)
    assert report.update_sparsity == {1e-5: 0.0, 1e-4: 0.25, 1.5e-3: 0.5, 1e-2: 0.75}
    assert report.max_abs_delta == 0.5
    # per tensor / module type / layer
    q = report.per_tensor["model.layers.0.self_attn.q_proj.weight"]
    assert q.num_changed == 2 and q.num_below[1.5e-3] == 1
    assert q.relative_l2 == pytest.approx(math.sqrt((float(deltas[0]) ** 2 + float(deltas[1]) ** 2) / 30.0), rel=1e-12)
    assert set(report.per_module_type) == {"attn_q", "mlp", "norm"}
    assert report.per_module_type["norm"]["relative_l2"] == pytest.approx(0.5 / math.sqrt(2))
    assert report.per_module_type["norm"]["share_of_sq_drift"] == pytest.approx(
        0.25 / sum(float(x) ** 2 for x in deltas)
    )
    assert set(report.per_layer) == {0}
    # top-k: exact coordinates, largest first
    assert [(e["name"], e["index"]) for e in report.top_k] == [
        ("model.norm.weight", [1]),
        ("model.layers.0.self_attn.q_proj.weight", [1, 0]),
        ("model.layers.0.self_attn.q_proj.weight", [0, 1]),
        ("model.layers.0.mlp.up_proj.weight", [3]),
    ]
    assert report.top_k[0]["delta"] == 0.5 and report.top_k[1]["delta"] < 0
    assert report.top_k_by_module_type[9] == {"attn_q": 2, "norm": 1, "mlp": 1}


def test_threshold_is_exact_at_the_boundary():
    """|delta| exactly equal to tau counts as below it; the float32 rounding of tau does not move the boundary."""
    base = {"w": torch.zeros(3)}
    tau32_up = float(np.float32(1e-3))  # float32(1e-3) > 1e-3
    assert tau32_up > 1e-3
    tuned = {"w": torch.tensor([np.float32(1e-3), np.float32(2.5e-4), np.float32(0.5)])}
    report = compute_drift(base, tuned, taus=(1e-3, tau32_up, 2.5e-4, float(np.float32(2.5e-4))))
    # float32(1e-3) itself is > 1e-3 (real number), so only the exact float32 tau includes it.
    assert report.sparsity_at(1e-3) == pytest.approx(1 / 3)
    assert report.sparsity_at(tau32_up) == pytest.approx(2 / 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_random_deltas_match_numpy(dtype):
    model = tiny_llama(tie=False)
    base = {k: v.to(dtype) for k, v in model.state_dict().items()}
    tuned = perturbed(base)
    ref = reference_stats(base, tuned, TAUS)
    report = compute_drift(base, tuned, taus=TAUS, chunk_size=37)  # tiny row blocks exercise the streaming path
    assert report.relative_l2 == pytest.approx(ref["relative_l2"], rel=1e-6)
    assert report.num_params == ref["num_params"]
    assert report.num_unchanged == ref["num_unchanged"]
    assert report.max_abs_delta == pytest.approx(ref["max_abs"], rel=1e-6)
    for tau in TAUS:
        assert report.update_sparsity[tau] == pytest.approx(ref["sparsity"][tau], abs=1e-12)
    assert sum(report.histogram["counts"]) == report.num_changed
    if dtype == torch.bfloat16:
        # bf16 rounding makes small updates vanish: more exact zeros than the 20% we set, and a note says why.
        assert report.fraction_unchanged > 0.25
        assert any("bfloat16" in note and "ulp" in note for note in report.notes)
    else:
        assert report.fraction_unchanged == pytest.approx(0.2, abs=0.02)
    # row blocking does not change the numbers
    whole = compute_drift(base, tuned, taus=TAUS)
    assert whole.relative_l2 == pytest.approx(report.relative_l2, rel=1e-12)
    assert whole.update_sparsity == report.update_sparsity
    assert [e["index"] for e in whole.top_k] == [e["index"] for e in report.top_k]


def test_tied_embeddings_counted_once_in_state_dicts_and_files(tmp_path):
    model = tiny_llama(tie=True)
    sd = model.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["model.embed_tokens.weight"].data_ptr()
    tuned_model = tiny_llama(tie=True)
    tuned_model.load_state_dict(perturbed(sd))
    tsd = tuned_model.state_dict()
    unique = {k: v for k, v in sd.items() if k != "lm_head.weight"}
    ref = reference_stats(unique, {k: tsd[k] for k in unique}, TAUS)

    from_modules = compute_drift(model, tuned_model, taus=TAUS)
    assert from_modules.num_params == ref["num_params"]
    assert "lm_head.weight" not in from_modules.per_tensor
    assert from_modules.per_tensor["model.embed_tokens.weight"].aliases == ["lm_head.weight"]
    assert from_modules.relative_l2 == pytest.approx(ref["relative_l2"], rel=1e-6)

    # save_pretrained drops the tied head; a checkpoint that stores both (config says tied) is counted once too.
    model.save_pretrained(tmp_path / "base")
    tuned_model.save_pretrained(tmp_path / "tuned")
    assert "lm_head.weight" not in load_file(tmp_path / "base" / "model.safetensors")
    both = dict(load_file(tmp_path / "tuned" / "model.safetensors"))
    both["lm_head.weight"] = both["model.embed_tokens.weight"].clone()
    (tmp_path / "tuned_both").mkdir()
    save_file(both, tmp_path / "tuned_both" / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "tuned_both" / "config.json").write_text((tmp_path / "tuned" / "config.json").read_text())
    for tuned_dir in ("tuned", "tuned_both"):
        report = compute_drift(tmp_path / "base", tmp_path / tuned_dir, taus=TAUS)
        assert report.num_params == ref["num_params"]
        assert report.relative_l2 == pytest.approx(ref["relative_l2"], rel=1e-6)
        assert report.update_sparsity == pytest.approx(from_modules.update_sparsity, abs=1e-12)
        assert not report.missing_in_base and not report.missing_in_tuned


def test_sharded_checkpoint_and_json_roundtrip(tmp_path):
    base, tuned = tiny_llama(seed=0, tie=False), tiny_llama(seed=0, tie=False)
    tuned.load_state_dict(perturbed(base.state_dict()))
    base.save_pretrained(tmp_path / "base")
    tuned.save_pretrained(tmp_path / "sharded", max_shard_size="8KB")
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    from_files = compute_drift(tmp_path / "base", tmp_path / "sharded", taus=TAUS)
    from_memory = compute_drift(base.state_dict(), tuned.state_dict(), taus=TAUS)
    assert from_files.relative_l2 == pytest.approx(from_memory.relative_l2, rel=1e-12)
    assert from_files.update_sparsity == from_memory.update_sparsity
    assert from_files.top_k_by_module_type == from_memory.top_k_by_module_type
    # index file path works too
    assert compute_drift(tmp_path / "base", tmp_path / "sharded" / "model.safetensors.index.json").num_params == (
        from_files.num_params
    )

    path = from_files.save(tmp_path / "drift_stats.json")
    loaded = DriftReport.load(path)
    assert loaded.relative_l2 == from_files.relative_l2
    assert loaded.update_sparsity == from_files.update_sparsity
    assert loaded.per_tensor.keys() == from_files.per_tensor.keys()
    assert loaded.to_dict() == json.loads(path.read_text())
    markdown = from_files.to_markdown()
    assert "| 0.0015 |" in markdown and "Relative L2" in markdown


def test_shape_mismatch_and_missing_tensors():
    base = {"a.weight": torch.zeros(2, 2), "b.weight": torch.zeros(2)}
    with pytest.raises(ValueError, match="Shape mismatch"):
        compute_drift(base, {"a.weight": torch.zeros(3, 2), "b.weight": torch.zeros(2)})
    report = compute_drift(base, {"a.weight": torch.ones(2, 2), "c.weight": torch.ones(1)})
    assert report.missing_in_tuned == ["b.weight"] and report.missing_in_base == ["c.weight"]
    assert report.num_params == 4


def test_compare_drift_ratio():
    base = {"model.layers.0.mlp.up_proj.weight": torch.ones(100)}
    es = {"model.layers.0.mlp.up_proj.weight": torch.ones(100) + 4e-3}
    grpo = {"model.layers.0.mlp.up_proj.weight": torch.ones(100) + 1e-4}
    comparison = compare_drift(compute_drift(base, es), compute_drift(base, grpo))
    assert comparison["relative_l2_ratio"] == pytest.approx(40.0, rel=1e-3)
    assert comparison["per_layer"]["0"] == pytest.approx(40.0, rel=1e-3)


# --------------------------------------------------------------------------------------------------------------------
# Threshold checkpoints


@pytest.mark.parametrize("shard", [False, True])
def test_threshold_checkpoint_resets_exactly_small_updates(tmp_path, shard):
    base, tuned = tiny_llama(seed=0, tie=True), tiny_llama(seed=0, tie=True)
    tuned.load_state_dict(perturbed(base.state_dict()))
    base.save_pretrained(tmp_path / "base")
    tuned.save_pretrained(tmp_path / "tuned", max_shard_size="8KB" if shard else "5GB")
    tau = 1.5e-3
    summary = threshold_checkpoint(tmp_path / "base", tmp_path / "tuned", tau, tmp_path / "thr")
    report = compute_drift(tmp_path / "base", tmp_path / "tuned", taus=(tau,))
    assert summary["update_sparsity"] == pytest.approx(report.update_sparsity[tau], abs=1e-12)
    assert summary["num_changed"] == report.num_changed
    assert (tmp_path / "thr" / "config.json").is_file()
    assert (tmp_path / "thr" / "model.safetensors.index.json").is_file() == shard

    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "thr")
    b_sd, t_sd, o_sd = base.state_dict(), tuned.state_dict(), loaded.state_dict()
    num_reset = 0
    for name, out in o_sd.items():
        b, t = b_sd[name], t_sd[name]
        small = (t.double() - b.double()).abs() <= tau
        assert torch.equal(out[small], b[small]), name
        assert torch.equal(out[~small], t[~small]), name
        if name != "lm_head.weight":
            num_reset += int((small & (t != b)).sum())
    assert num_reset == summary["num_reset"] > 0
    # after thresholding, no update is left at or below tau
    after = compute_drift(tmp_path / "base", tmp_path / "thr", taus=(tau,))
    assert after.update_sparsity[tau] == 0.0
    assert after.num_changed == summary["num_kept"]
    # tau = 0 reproduces the tuned weights bit for bit
    threshold_checkpoint(tmp_path / "base", tmp_path / "tuned", 0.0, tmp_path / "same")
    assert compute_drift(tmp_path / "tuned", tmp_path / "same").num_changed == 0


def test_threshold_checkpoint_bf16_state_dicts(tmp_path):
    base = {"model.layers.0.mlp.up_proj.weight": torch.randn(8, 8).to(torch.bfloat16)}
    tuned = perturbed(base)
    summary = threshold_checkpoint(base, tuned, 1e-3, tmp_path)
    out = load_file(tmp_path / "model.safetensors")["model.layers.0.mlp.up_proj.weight"]
    assert out.dtype == torch.bfloat16
    b, t = base["model.layers.0.mlp.up_proj.weight"], tuned["model.layers.0.mlp.up_proj.weight"]
    small = (t.float() - b.float()).abs() <= 1e-3
    assert torch.equal(out, torch.where(small, b, t))
    assert summary["num_reset"] == int((small & (t != b)).sum())


def test_threshold_sweep(tmp_path):
    base = {"model.layers.0.mlp.up_proj.weight": torch.zeros(1000)}
    generator = torch.Generator().manual_seed(0)
    tuned = {"model.layers.0.mlp.up_proj.weight": log_uniform_delta((1000,), generator)}

    def evaluate(path):  # "accuracy" = remaining L1 mass of the update
        return {"acc": float(load_file(path / "model.safetensors")["model.layers.0.mlp.up_proj.weight"].abs().sum())}

    rows = threshold_sweep(
        base,
        tuned,
        evaluate,
        taus=(1e-4, 1e-3, 1e-2),
        results_path=tmp_path / "s.json",
    )
    plot_threshold_sweep(rows, tmp_path / "sweep.png")
    assert [r["tau"] for r in rows] == [0.0, 1e-4, 1e-3, 1e-2]
    assert rows[0]["update_sparsity"] == 0.0
    sparsity = [r["update_sparsity"] for r in rows]
    assert sparsity == sorted(sparsity) and sparsity[-1] < 1
    accuracy = [r["accuracy"] for r in rows]
    assert accuracy == sorted(accuracy, reverse=True)
    report = compute_drift(base, tuned, taus=(1e-4, 1e-3, 1e-2))
    for row in rows[1:]:
        assert row["update_sparsity"] == pytest.approx(report.update_sparsity[row["tau"]], abs=1e-12)
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    assert json.loads((tmp_path / "s.json").read_text()) == rows


# --------------------------------------------------------------------------------------------------------------------
# scripts/drift_report.py


def test_drift_report_script(tmp_path, monkeypatch):
    base = tiny_llama(seed=0, tie=True)
    es, grpo = tiny_llama(seed=0, tie=True), tiny_llama(seed=0, tie=True)
    sd = base.state_dict()
    generator = torch.Generator().manual_seed(3)
    es.load_state_dict({k: v + 1e-3 * torch.randn(v.shape, generator=generator) for k, v in sd.items()})
    grpo.load_state_dict({k: v + 2.5e-5 * torch.randn(v.shape, generator=generator) for k, v in sd.items()})
    for name, model in [("base", base), ("es", es), ("grpo", grpo)]:
        model.save_pretrained(tmp_path / name)
    out = tmp_path / "report"
    argv = [
        str(tmp_path / "base"),
        str(tmp_path / "es"),
        "--compare",
        str(tmp_path / "grpo"),
        "--output_dir",
        str(out),
    ]
    monkeypatch.setattr(sys, "argv", ["drift_report.py", *argv, "--quiet"])
    runpy.run_path(str(REPO / "scripts" / "drift_report.py"), run_name="__main__")

    stats = json.loads((out / "drift_stats.json").read_text())
    assert 0.0015 in DriftReport.from_dict(stats).update_sparsity
    assert stats["update_sparsity"]["0.0015"] == pytest.approx(0.866, abs=0.03)  # P(|N(0,1)| <= 1.5)
    comparison = json.loads((out / "drift_comparison.json").read_text())
    assert comparison["relative_l2_ratio"] == pytest.approx(40.0, rel=0.05)
    markdown = (out / "drift_report.md").read_text()
    assert "ratio ES/GRPO" in markdown and f"{comparison['relative_l2_ratio']:.1f}x" in markdown
    for png in ("delta_histogram", "sparsity_curve", "layer_distance", "module_type_distance", "layer_ratio"):
        data = (out / f"{png}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
