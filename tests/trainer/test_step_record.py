import math

import torch

from hf_es.trainer.step_record import MemberStats, StepRecord


def test_record_round_trips_through_one_tensor_and_sums_like_an_all_reduce():
    a = StepRecord.empty(3, 2, num_prompts=2)
    b = StepRecord.empty(3, 2, num_prompts=2)
    a.members[0] = MemberStats(1.0, [0.5, float("nan")], 4.0, 0.25, 16.0, 1.0, success=[0.5, float("nan")])
    b.members[2] = MemberStats(float("nan"), [0.0, 0.0], 2.0, 0.0, 8.0, 4.0, success=[float("nan")] * 2)
    b.process_failed = True
    summed = StepRecord.from_tensor(a.to_tensor() + b.to_tensor(), num_funcs=2)
    assert summed.process_failed
    assert summed.members[0].reward == 1.0 and summed.members[0].num_tokens == 16.0
    assert math.isnan(summed.members[2].reward) and summed.members[2].num_unscorable == 4.0
    assert torch.equal(summed.rewards.isnan(), torch.tensor([False, False, True]))
    # the success matrix crosses in the same tensor: (members + 1) x (2 functions + 5 + 2 prompts)
    assert a.to_tensor().shape == (4, 9)
    expected = torch.tensor([[0.5, math.nan], [0.0, 0.0], [math.nan, math.nan]], dtype=torch.float64)
    assert torch.equal(summed.success.isnan(), expected.isnan())
    assert torch.equal(summed.success.nan_to_num(-1), expected.nan_to_num(-1))


def test_metrics_leave_out_members_without_reward():
    record = StepRecord(
        [
            MemberStats(1.0, [1.0], 2.0, 0.0, 10.0),
            MemberStats(3.0, [3.0], 4.0, 1.0, 20.0),
            MemberStats(float("nan"), [0.0], 6.0, 0.5, 30.0, 4.0),
        ]
    )
    metrics = record.metrics(["f"])
    assert metrics["reward"] == 2.0 and metrics["reward_std"] == 1.0 and metrics["rewards/f/mean"] == 2.0
    assert metrics["population/skipped_members"] == 1.0 and metrics["completions/unscorable"] == 4.0
    assert metrics["completions/mean_length"] == 4.0 and metrics["num_generated_tokens"] == 60.0
