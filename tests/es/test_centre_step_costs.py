"""Issue 21: a perturbation is one kernel per noise chunk, bit-identical to the old add-then-copy; the update's norm
is read from the device once, not once per chunk."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_es.es import ESCentre, LowRankCentre, make_noise_source

SHAPES = {"a.weight": (300, 70), "b.weight": (2500,), "c.bias": (7,)}
CHUNK = 1 << 10


class CountOps(TorchDispatchMode):
    """Counts the aten operators run inside the context."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def _weights(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {name: (3 * torch.randn(shape, generator=generator)).to(dtype) for name, shape in SHAPES.items()}


def _old_member(centre: ESCentre, seed: int, scale: float) -> dict[str, torch.Tensor]:
    """The formula before issue 21: `master + scale * eps` into an fp32 buffer, then a cast copy into the live dtype."""
    member = {}
    for name, live in centre.parameters.items():
        out = torch.empty_like(live).view(-1)
        master = centre.master[name].view(-1)
        for start, end, eps in centre.noise.chunks(seed, name, master.numel(), master.device):
            out[start:end].copy_(torch.add(master[start:end], eps, alpha=scale))
        member[name] = out.view(live.shape)
    return member


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("noise_type", ["table", "gaussian"])
def test_one_op_perturbation_is_bit_identical_to_add_then_copy(dtype, noise_type):
    noise = make_noise_source(noise_type, table_size=1 << 16, chunk_size=CHUNK)
    weights = _weights(dtype)
    centre = ESCentre(weights, noise)
    for seed, scale in [(3, 0.05), (4, -1.5e-3), (5, 1e-7), (6, 2.0)]:
        expected = _old_member(centre, seed, scale)
        centre.perturb_(seed, scale)
        for name, live in weights.items():
            assert torch.equal(live, expected[name]), (name, seed)
    centre.restore_()
    assert all(torch.equal(weights[n], centre.master[n].to(dtype)) for n in weights)


def test_perturbation_is_one_add_per_chunk_without_copies():
    weights = _weights(torch.bfloat16)
    centre = ESCentre(weights, make_noise_source("table", table_size=1 << 16, chunk_size=CHUNK))
    chunks = sum(math.ceil(t.numel() / CHUNK) for t in weights.values())
    with CountOps() as counter:
        centre.perturb_(3, 0.05)
    assert counter.ops["aten.add"] == chunks and counter.ops["aten.copy_"] == 0


@pytest.mark.parametrize("centre_type", ["full", "low_rank"])
def test_update_norm_is_read_from_the_device_once_and_matches_the_float64_norm(centre_type, monkeypatch):
    weights = _weights(torch.float32)
    noise = make_noise_source("gaussian", chunk_size=CHUNK)
    if centre_type == "full":
        centre = ESCentre(weights, noise)
    else:
        centre = LowRankCentre(weights, noise, rank=2)
    before = {name: master.clone() for name, master in centre.master.items()}
    reads = []
    original = torch.Tensor.__float__

    def counting_float(tensor):
        reads.append(tensor.numel())
        return original(tensor)

    monkeypatch.setattr(torch.Tensor, "__float__", counting_float)
    norm = centre.update_([1, 2, 3], [0.5, -1.0, 2.0], learning_rate=1e-2)
    monkeypatch.undo()
    assert reads == [1]  # one scalar read for the whole update
    applied = math.sqrt(sum(float((centre.master[n].double() - before[n].double()).square().sum()) for n in before))
    assert norm == pytest.approx(applied, rel=1e-6)
