"""Token entropy of the centre on its own completions: exact against `generate`'s raw logits, and the top-k lower
bound an engine without full logits (vLLM) reports."""

import math

import pytest
import torch
from utils import tiny_llama, tiny_tokenizer

from hf_es.generation.entropy import EntropySums, token_entropy_sums, top_k_entropy_lower_bound


def _entropy(logits):
    log_q = torch.log_softmax(logits.float(), dim=-1)
    return float(-(log_q.exp() * log_q).sum())


def test_teacher_forced_entropy_equals_the_entropy_of_generates_own_logits():
    model, tokenizer = tiny_llama(), tiny_tokenizer()
    prompts = ["Say something about number 3.", "Hi"]
    expected, tokens, completions = 0.0, 0, []
    for prompt in prompts:  # one prompt per call: no padding in the reference
        encoded = tokenizer([prompt], return_tensors="pt", add_special_tokens=False)
        for seed in (0, 1):  # two sampled completions per prompt
            torch.manual_seed(seed)
            out = model.generate(
                **encoded, do_sample=True, max_new_tokens=5, output_logits=True, return_dict_in_generate=True,
                pad_token_id=2, eos_token_id=2,
            )  # fmt: skip
            ids = out.sequences[0, encoded["input_ids"].shape[1] :].tolist()
            ids = ids[: ids.index(2)] if 2 in ids else ids
            completions.append(ids)
            expected += sum(_entropy(out.logits[t][0]) for t in range(len(ids)))
            tokens += len(ids)
    sums = token_entropy_sums(model, tokenizer, prompts, completions, num_generations=2, batch_size=3)
    total, count = sums.total, sums.tokens
    assert sums.top_k is None  # exact
    assert count == tokens > 0
    assert total == pytest.approx(expected, rel=1e-4)
    assert 0 < total / count <= torch.log(torch.tensor(49152.0)).item()  # at most the uniform distribution's


def test_no_completion_tokens_give_zero_sums():
    assert token_entropy_sums(tiny_llama(), tiny_tokenizer(), ["Hi"], [[]]) == EntropySums(0.0, 0)


@pytest.mark.parametrize("k", [1, 2, 5, 20, 100])
def test_top_k_bound_never_exceeds_the_entropy_and_is_exact_with_every_token(k):
    generator = torch.Generator().manual_seed(k)
    for scale in (0.1, 1.0, 5.0):  # flat to peaked distributions over 100 tokens
        log_q = torch.log_softmax(scale * torch.randn(100, generator=generator, dtype=torch.float64), dim=0)
        exact = float(-(log_q.exp() * log_q).sum())
        top = torch.topk(log_q, k).values.tolist()
        bound = top_k_entropy_lower_bound(top)
        truncated = -sum(math.exp(v) * v for v in top)  # the top-k terms alone: a weaker bound
        assert truncated - 1e-12 <= bound <= exact + 1e-12
        if k == 100:
            assert bound == pytest.approx(exact, abs=1e-9)


def test_top_k_bound_by_hand():
    # q = (0.5, 0.25, 0.25): top-2 terms 0.5 ln 2 + 0.25 ln 4, the rest (0.25) as one token: exact.
    assert top_k_entropy_lower_bound([math.log(0.5), math.log(0.25)]) == pytest.approx(1.5 * math.log(2))
    # A point mass has entropy 0 whatever k; an empty subset bounds nothing but -1 ln 1 = 0.
    assert top_k_entropy_lower_bound([0.0]) == 0.0 and top_k_entropy_lower_bound([]) == 0.0
    assert top_k_entropy_lower_bound([math.log(0.5), -math.inf]) == pytest.approx(math.log(2))


def test_entropy_sums_add_and_refuse_to_mix_exact_with_bounds():
    assert EntropySums(1.0, 2) + EntropySums(2.0, 4) == EntropySums(3.0, 6)
    assert (EntropySums(1.0, 2, 20) + EntropySums(2.0, 2, 20)).mean == 0.75
    with pytest.raises(ValueError, match="top_k"):
        EntropySums(1.0, 2) + EntropySums(1.0, 2, 20)
    assert math.isnan(EntropySums(0.0, 0).mean)


def test_trainer_evaluate_logs_the_centres_token_entropy(tmp_path):
    from utils import make_trainer, prompt_dataset

    trainer = make_trainer(tmp_path)
    metrics = trainer.evaluate(prompt_dataset(4))
    assert 0 < metrics["eval_entropy"] <= torch.log(torch.tensor(49152.0)).item()
    assert trainer.state.log_history[-1]["eval_entropy"] == metrics["eval_entropy"]


def test_an_engine_that_only_bounds_the_entropy_logs_it_as_a_lower_bound_with_its_k(tmp_path, monkeypatch):
    from utils import make_trainer, prompt_dataset

    trainer = make_trainer(tmp_path)
    calls = []

    def bound(prompts, completion_ids, num_generations=1):
        calls.append(len(completion_ids))
        return EntropySums(1.5 * len(completion_ids), len(completion_ids), top_k=20)

    monkeypatch.setattr(trainer.backend, "completion_entropy", bound)
    metrics = trainer.evaluate(prompt_dataset(4))
    assert sum(calls) == 4 and "eval_entropy" not in metrics
    assert metrics["eval_entropy_lower_bound"] == pytest.approx(1.5) and metrics["eval_entropy_top_k"] == 20


def test_pass_at_k_summary_labels_a_bound_and_never_mixes_it_with_exact_records():
    from hf_es.evaluation.pass_at_k import _entropy_summary

    exact = [{"entropy": [3.0, 2]}, {"entropy": [1.0, 2]}]
    bounded = [{"entropy": [2.0, 2], "entropy_top_k": 20}, {"entropy": [1.0, 2], "entropy_top_k": 20}]
    assert _entropy_summary(exact) == {"mean_token_entropy": 1.0}
    assert _entropy_summary(bounded) == {"mean_token_entropy_lower_bound": 0.75, "entropy_top_k": 20}
    assert _entropy_summary(exact[:1] + bounded[:1]) == {}  # resumed with another engine: no single number
    assert _entropy_summary(exact + [{}]) == {}  # a problem stored before entropy was recorded


def test_shared_prompt_path_equals_whole_sequences():
    # M samples per prompt reuse the prompt's KV; the result is the one every sequence computed whole gives.
    model, tokenizer = tiny_llama(seed=4), tiny_tokenizer()
    prompts = ["Say something about number 3.", "Colours: red, green and"]
    completions = [[5, 6, 7], [8], [], [9, 10, 11, 12]]  # 2 per prompt, one of them empty
    shared = token_entropy_sums(model, tokenizer, prompts, completions, num_generations=2, batch_size=1)
    whole = token_entropy_sums(model, tokenizer, [p for p in prompts for _ in (0, 1)], completions)
    assert shared.tokens == whole.tokens == 8
    assert shared.total == pytest.approx(whole.total, rel=1e-5)
