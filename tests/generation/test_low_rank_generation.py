"""The batched low-rank path (hooks, one generate call) against the same members written into the weights."""

import pytest
import torch
from utils import tiny_llama, tiny_tokenizer

from hf_es.es import GaussianNoise, make_population
from hf_es.generation import SamplingConfig, TransformersGenerationBackend
from hf_es.generation.low_rank import LowRankMemberHooks


def backend_for(dtype, non_matrix_noise="full", rank=2, **overrides):
    model = tiny_llama(seed=3, **overrides).to(dtype)
    backend = TransformersGenerationBackend(model, tiny_tokenizer())
    backend.init_centre(GaussianNoise(), perturbation="low_rank", rank=rank, non_matrix_noise=non_matrix_noise)
    return backend


# Rows of 3 members interleaved in one batch; tied embeddings / LM head by default.
@pytest.mark.parametrize(
    "dtype, sigma, tolerance, non_matrix_noise, tied",
    [
        (torch.float32, 0.05, 2e-5, "full", True),
        (torch.float32, 0.05, 2e-5, "none", True),
        (torch.float32, 0.05, 2e-5, "full", False),
        # bf16: written weights round W + delta, hooks round W and the correction apart: measured max 0.047 against a
        # perturbation effect of >= 3.4 on the logits (fp32: 1.4e-6).
        (torch.bfloat16, 0.05, 0.08, "full", True),
    ],
)
def test_hooked_logits_equal_written_member_weights(dtype, sigma, tolerance, non_matrix_noise, tied):
    backend = backend_for(dtype, non_matrix_noise, tie_word_embeddings=tied)
    model, centre = backend.model, backend.centre
    members = make_population(noise_seed=7, step=0, population_size=4, estimator="antithetic")[:3]
    row_members = [2, 0, 1, 0, 2]
    input_ids = torch.randint(3, 512, (len(row_members), 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        centre_logits = model(input_ids).logits.float()
        with LowRankMemberHooks(model, centre, [m.seed for m in members], [m.sign * sigma for m in members]) as hooks:
            hooks.select_rows(row_members)
            hooked = model(input_ids).logits.float()
            # Norm modules switch from vmap to one broadcast call once it proved bit-identical: same logits.
            assert torch.equal(model(input_ids).logits.float(), hooked)
        assert torch.equal(model(input_ids).logits.float(), centre_logits)  # hooks removed, weights untouched
        for row, k in enumerate(row_members):
            centre.perturb_(members[k].seed, members[k].sign * sigma)
            written = model(input_ids[row : row + 1]).logits.float()[0]
            centre.restore_()
            effect = (written - centre_logits[row]).abs().max()
            assert effect > 10 * tolerance  # the perturbation is visible at this tolerance
            assert (hooked[row] - written).abs().max() < tolerance, (row, float((hooked[row] - written).abs().max()))


def test_tied_head_and_embedding_share_one_direction():
    """The written path perturbs the shared tensor once; the hooks must perturb both its readers, or neither."""
    backend = backend_for(torch.float32, non_matrix_noise="none")
    model, centre = backend.model, backend.centre
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert "lm_head.weight" not in centre.parameters
    seed, sigma = 11, 0.2
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad(), LowRankMemberHooks(model, centre, [seed], [sigma]) as hooks:
        hooks.select_rows([0])
        embedded = model.model.embed_tokens(ids)
        head = model.lm_head(embedded)
    direction = centre.direction(seed, "model.embed_tokens.weight")
    weight = centre.master["model.embed_tokens.weight"] + sigma * direction
    torch.testing.assert_close(embedded[0], weight[ids[0]], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(head[0], embedded[0] @ weight.T, atol=1e-4, rtol=1e-4)


def test_batched_greedy_generation_equals_sequential_written_members():
    backend = backend_for(torch.float32)
    members = make_population(noise_seed=1, step=3, population_size=4, estimator="antithetic")
    prompts = ["Say something about number 1.", "Hello there, how are", "One two three"]
    sampling = SamplingConfig(max_completion_length=8, temperature=0.0)
    batched = list(backend.generate_members(members, prompts, sampling, sigma=0.3))
    sequential = list(super(TransformersGenerationBackend, backend).generate_members(members, prompts, sampling, 0.3))
    assert [r.completion_ids for r in batched] == [r.completion_ids for r in sequential]
    assert len({tuple(map(tuple, r.completion_ids)) for r in batched}) > 1  # members really differ


def test_sampled_rows_keep_common_random_numbers_within_an_antithetic_pair():
    backend = backend_for(torch.float32)
    members = make_population(noise_seed=1, step=0, population_size=2, estimator="antithetic")
    sampling = SamplingConfig(max_completion_length=6, temperature=1.0, num_generations=2)
    prompts = ["Count: one two", "Colours: red"]
    # sigma = 0: both members have the centre's weights, so equal seeds must give equal samples, whatever the batch.
    same = list(backend.generate_members(members, prompts, sampling, sigma=0.0))
    assert same[0].completion_ids == same[1].completion_ids
    # The generations of one prompt get different seeds, and results do not depend on the batch split.
    assert same[0].completion_ids[0] != same[0].completion_ids[1]
    backend.batch_size = 3
    assert (
        list(backend.generate_members(members, prompts, sampling, sigma=0.0))[1].completion_ids
        == same[1].completion_ids
    )


def test_modules_other_than_linear_and_embedding_holding_matrices_are_refused():
    backend = backend_for(torch.float32)
    module = torch.nn.Module()
    module.weight = torch.nn.Parameter(backend.model.model.embed_tokens.weight.data)
    wrapper = torch.nn.ModuleList([backend.model, module])
    with pytest.raises(ValueError, match="perturbation='full'"):
        with LowRankMemberHooks(wrapper, backend.centre, [1], [0.1]):
            pass
