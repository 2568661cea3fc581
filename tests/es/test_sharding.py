"""Tensor-parallel shards regenerate exactly their slice of the whole tensor's noise (hf_es.es.sharding)."""

from __future__ import annotations

import math

import pytest
import torch

from hf_es.es import ESCentre, GaussianNoise, NoiseTable
from hf_es.es.sharding import (
    ShardedNoise,
    ShardSpec,
    assemble_whole,
    column_parallel_spec,
    drawn_elements,
    replicated_spec,
    row_parallel_spec,
    shard_chunks,
    vocab_parallel_spec,
)

# A chunk that is not a multiple of any row length, so chunks start and end inside rows.
CHUNK = 37
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE, VOCAB = 32, 4, 2, 8, 48, 101


def _noises():
    return {"gaussian": GaussianNoise(chunk_size=CHUNK), "table": NoiseTable(size=CHUNK * 16, chunk_size=CHUNK)}


def _layer_specs(rank: int, tp: int) -> dict[str, ShardSpec]:
    """A Llama-shaped layer as vLLM shards it: fused q|k|v and gate|up (column), o/down (row), vocab, norms."""
    kv_replicas = max(1, tp // KV_HEADS)
    return {
        "q_proj.weight": column_parallel_spec((HEADS * HEAD_DIM, HIDDEN), rank, tp),
        "k_proj.weight": column_parallel_spec((KV_HEADS * HEAD_DIM, HIDDEN), rank, tp, kv_replicas),
        "v_proj.bias": column_parallel_spec((KV_HEADS * HEAD_DIM,), rank, tp, kv_replicas),
        "o_proj.weight": row_parallel_spec((HIDDEN, HEADS * HEAD_DIM), rank, tp),
        "gate_proj.weight": column_parallel_spec((INTERMEDIATE, HIDDEN), rank, tp),
        "up_proj.weight": column_parallel_spec((INTERMEDIATE, HIDDEN), rank, tp),
        "down_proj.weight": row_parallel_spec((HIDDEN, INTERMEDIATE), rank, tp),
        "embed_tokens.weight": vocab_parallel_spec((VOCAB, HIDDEN), rank, tp, padding=8),
        "lm_head.weight": vocab_parallel_spec((VOCAB, HIDDEN), rank, tp, padding=8),
        "norm.weight": replicated_spec((HIDDEN,), rank),
        "conv.weight": ShardSpec((6, 4, 5), dim=1, start=rank * (4 // tp), size=4 // tp),  # a middle dim, strided
    }


def _shard_noise(noise, seed: int, name: str, spec: ShardSpec) -> torch.Tensor:
    out = torch.full((spec.numel,), float("nan"))
    position = 0
    for start, end, values in shard_chunks(noise, seed, name, spec):
        assert start == position and end - start == values.numel() <= noise.chunk_size
        out[start:end] = values
        position = end
    assert position == spec.numel
    return out.view(spec.shard_shape)


@pytest.mark.parametrize("noise_type", ["gaussian", "table"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_shards_reassemble_the_whole_noise_bit_exactly(noise_type, tp):
    noise = _noises()[noise_type]
    for name, spec0 in _layer_specs(0, tp).items():
        whole = noise.full(7, name, spec0.shape)
        pieces = []
        for rank in range(tp):
            spec = _layer_specs(rank, tp)[name]
            shard = _shard_noise(noise, 7, name, spec)
            assert torch.equal(shard, spec.slice_of(whole)), (name, rank)
            pieces.append((spec, shard))
        assert torch.equal(assemble_whole(pieces), whole), name
        # Every slice is reported by exactly one rank, so update norms add up to the whole tensor's.
        owned = [spec for spec, _ in pieces if spec.owner]
        assert sum(spec.numel for spec in owned) == math.prod(spec0.shape), name


def test_vocab_shards_leave_out_padding_rows():
    # 101 rows padded to 104 and split 4 ways: 26 rows per rank, the last rank holds 23 real rows.
    specs = [vocab_parallel_spec((VOCAB, HIDDEN), rank, 4, padding=8) for rank in range(4)]
    assert [(s.start, s.size) for s in specs] == [(0, 26), (26, 26), (52, 26), (78, 23)]


def test_row_parallel_draws_the_whole_tensor_column_parallel_only_its_rows():
    chunk = 64
    row = row_parallel_spec((64, 128), 1, 4)
    assert drawn_elements(row, chunk) == 64 * 128  # randn cannot skip: every rank draws the whole tensor
    column = column_parallel_spec((64, 128), 1, 4)
    assert drawn_elements(column, chunk) == column.numel  # rows aligned with chunks: nothing extra
    odd = column_parallel_spec((64, 90), 1, 4)
    assert odd.numel < drawn_elements(odd, chunk) <= odd.numel + 2 * chunk
    assert drawn_elements(replicated_spec((64,), 1), chunk) == 64


@pytest.mark.parametrize("noise_type", ["gaussian", "table"])
def test_sharded_centres_perturb_restore_and_update_like_the_whole_centre(noise_type):
    tp, generator = 2, torch.Generator().manual_seed(0)
    specs = [_layer_specs(rank, tp) for rank in range(tp)]
    whole = {name: torch.randn(spec.shape, generator=generator) for name, spec in specs[0].items()}
    noise = _noises()[noise_type]
    centre = ESCentre({name: tensor.clone() for name, tensor in whole.items()}, noise)
    shards = [
        ESCentre(
            {name: spec.slice_of(whole[name]).clone() for name, spec in rank_specs.items()},
            ShardedNoise(noise, rank_specs),
        )
        for rank_specs in specs
    ]

    def check(live: bool):
        for name in whole:
            pieces = [(s[name], (c.parameters if live else c.master)[name]) for s, c in zip(specs, shards)]
            expected = (centre.parameters if live else centre.master)[name]
            assert torch.equal(assemble_whole(pieces), expected), name

    for member in (centre, *shards):
        member.perturb_(11, -0.05)
    check(live=True)
    for member in (centre, *shards):
        member.restore_()
    check(live=True)
    for name, tensor in whole.items():
        assert torch.equal(centre.parameters[name], tensor)
    for member in (centre, *shards):
        member.update_([11, 12, 13], [0.5, -1.0, 0.25], 0.1)
    check(live=False)
    check(live=True)
