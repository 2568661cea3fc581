"""Pass@K plots (hf_es.evaluation.plots): Pareto front, and readable axes when every value is 0 or 1."""

from __future__ import annotations

import pytest

from hf_es.evaluation import pareto_front, plot_results, summarize


def test_pareto_front():
    points = [(40.0, 75.0), (42.0, 74.0), (41.0, 76.0), (39.0, 70.0), (41.0, 76.0)]
    assert pareto_front(points) == [False, True, True, False, True]


def _results(num_correct: int, names=("base", "es", "grpo")) -> dict:
    records = {str(i): {"num_samples": 4, "num_correct": num_correct} for i in range(3)}
    summary = summarize(records, num_samples=4)
    return {"settings": {"dataset": "arithmetic"}, "checkpoints": {n: {"summary": summary} for n in names}}


@pytest.mark.parametrize("num_correct, expected", [(0, 0.0), (4, 1.0)])
def test_plots_at_all_zero_and_all_one_keep_axes_in_unit_range(tmp_path, monkeypatch, num_correct, expected):
    import matplotlib.figure

    axes_seen = []
    real_savefig = matplotlib.figure.Figure.savefig

    def record(fig, *args, **kwargs):
        axes_seen.extend(fig.axes)
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    results = _results(num_correct)
    assert results["checkpoints"]["es"]["summary"]["pass@k"]["4"] == expected
    written = plot_results(results, tmp_path)
    assert [path.name for path in written] == ["pass_at_k.png", "pareto.png"]
    profile, pareto = axes_seen[0], axes_seen[1]
    for ax in (profile, pareto):
        low, high = ax.get_ylim()
        assert low == 0.0 and high == pytest.approx(1.05)  # never a negative fraction axis
        assert "fraction" in ax.get_ylabel()
    assert pareto.get_xlim() == pytest.approx((0.0, 1.05))
    # The three checkpoints coincide: one shared label "1,2,3" instead of three overlapping ones.
    assert [text.get_text() for text in pareto.texts] == ["1,2,3"]
