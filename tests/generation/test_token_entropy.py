"""Exact token entropy of the centre on its own completions, against `generate`'s raw logits."""

import pytest
import torch
from utils import tiny_llama, tiny_tokenizer

from hf_es.generation.entropy import token_entropy_sums


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
    total, count = token_entropy_sums(model, tokenizer, prompts, completions, num_generations=2, batch_size=3)
    assert count == tokens > 0
    assert total == pytest.approx(expected, rel=1e-4)
    assert 0 < total / count <= torch.log(torch.tensor(49152.0)).item()  # at most the uniform distribution's


def test_no_completion_tokens_give_zero_sums():
    assert token_entropy_sums(tiny_llama(), tiny_tokenizer(), ["Hi"], [[]]) == (0.0, 0)


def test_trainer_evaluate_logs_the_centres_token_entropy(tmp_path):
    from utils import make_trainer, prompt_dataset

    trainer = make_trainer(tmp_path)
    metrics = trainer.evaluate(prompt_dataset(4))
    assert 0 < metrics["eval_entropy"] <= torch.log(torch.tensor(49152.0)).item()
    assert trainer.state.log_history[-1]["eval_entropy"] == metrics["eval_entropy"]
