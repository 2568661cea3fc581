"""Reliability of ESTrainer: exact resume, crash-safe checkpoints, faulty rewards, failing processes, hostile input and
security defaults (tiny random Llama on CPU)."""

import glob
import importlib.util
import json
import os
import pickle
import random
import subprocess
import sys
import time

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback
from utils import TESTS_DIR, make_args, make_trainer, prompt_dataset, target_token_reward, tiny_llama, tiny_tokenizer

from hf_es import ESTrainer, RewardFunctionError
from hf_es.rewards import countdown_reward
from hf_es.trainer.checkpoint_files import checkpoint_problem, latest_complete_checkpoint

SCRIPTS = os.path.join(TESTS_DIR, "scripts")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class AssertFiniteAfterEveryUpdate(TrainerCallback):
    """Fails the run as soon as an update leaves a non-finite weight."""

    def __init__(self, trainer):
        self.trainer, self.checked = trainer, 0

    def on_step_end(self, args, state, control, **kwargs):
        for name, tensor in self.trainer.backend.centre.master.items():
            assert torch.isfinite(tensor).all(), f"non-finite {name} after step {state.global_step}"
        self.checked += 1


def rewards_of(trainer):
    return [h["reward"] for h in trainer.state.log_history if "reward" in h]


# --------------------------------------------------------------------------------------------- exact resume


def test_exact_resume_with_sampling_from_every_checkpoint(tmp_path):
    """Sampling (temperature 0.9), a reward that draws Python random numbers, 3 steps per epoch: a run resumed from
    a mid-epoch checkpoint of epoch 0 or of epoch 1 sees the same prompts, logs the same rewards and ends with
    bit-identical fp32 master weights as the uninterrupted run."""
    seen: dict[str, dict[int, tuple]] = {}

    def make(run, output_dir, **overrides):
        seen[run] = {}

        def noisy_reward(prompts, completion_ids, trainer_state, **kwargs):
            seen[run].setdefault(trainer_state.global_step, tuple(prompts))
            return [r + 1e-3 * random.random() for r in target_token_reward(completion_ids)]

        values = dict(
            model=tiny_llama(seed=1).to(torch.bfloat16),
            reward_funcs=noisy_reward,
            dataset=prompt_dataset(9),
            population_size=4,
            per_device_train_batch_size=3,
            temperature=0.9,
            max_steps=5,
            model_card_drift=False,
        )
        values.update(overrides)
        return make_trainer(output_dir, **values)

    full = make("full", tmp_path / "full", save_strategy="steps", save_steps=2)
    full.train()
    out = full.args.output_dir
    assert sorted(os.listdir(out)) >= ["checkpoint-2", "checkpoint-4"]
    for step in (2, 4):
        checkpoint = os.path.join(out, f"checkpoint-{step}")
        files = set(os.listdir(checkpoint))
        assert {"model.safetensors", "es_master.safetensors", "es_state.json", "trainer_state.json"} <= files
        assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl", ".pickle"))], files
        state = json.load(open(os.path.join(checkpoint, "es_state.json")))
        assert state["global_step"] == step and state["seed"] == 0 and state["temperature"] == 0.9
        assert state["noise_seed"] == 0 and state["per_device_train_batch_size"] == 3

        resumed = make(f"resumed-{step}", tmp_path / f"resumed-{step}")
        resumed.train(resume_from_checkpoint=checkpoint)
        assert rewards_of(resumed) == rewards_of(full), step
        assert all(seen[f"resumed-{step}"][s] == seen["full"][s] for s in range(step, 5))
        for name, tensor in full.backend.centre.master.items():
            assert torch.equal(resumed.backend.centre.master[name], tensor), (step, name)
    assert seen["full"][0] != seen["full"][3]  # epoch 1 reshuffled, and resumed runs reproduced it


# ----------------------------------------------------------------------------------------- crash-safe saves

KILL_POINTS = ["after_model_weights", "after_es_state", "before_rename", "after_rename", "mid_rotation", "external"]


def test_sigkill_during_checkpointing_never_leaves_a_checkpoint_that_loads_wrong(tmp_path, monkeypatch):
    """A real training process is SIGKILLed at six points of the step-2 checkpoint (save_steps=1,
    save_total_limit=1). Every `checkpoint-N` left behind is complete, `resume_from_checkpoint=True` picks the
    latest complete one, and the resumed run ends bit-identical to an uninterrupted one, without torch.load."""
    root = tmp_path / "killed"
    proc = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "kill_during_save.py"), str(root), ",".join(KILL_POINTS)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcome = json.loads((root / "killed.json").read_text())
    assert outcome == dict.fromkeys(KILL_POINTS, "signal 9"), outcome

    script = load_script("kill_during_save")
    reference = script.build_trainer(str(tmp_path / "reference"))
    reference.train()

    def no_torch_load(*args, **kwargs):
        raise AssertionError("resume must not torch.load (pickle) anything")

    monkeypatch.setattr(torch, "load", no_torch_load)
    for point in KILL_POINTS:
        out = root / point
        checkpoints = sorted(p.name for p in out.glob("checkpoint-*"))
        for name in checkpoints:
            assert checkpoint_problem(str(out / name)) is None, (point, name, os.listdir(out / name))
        latest = latest_complete_checkpoint(str(out))
        expected = {"after_rename": "checkpoint-2", "mid_rotation": "checkpoint-2"}.get(point, "checkpoint-1")
        if point != "external":  # killed at a random moment of the save: either is right
            assert os.path.basename(latest) == expected, (point, checkpoints)
        resumed = script.build_trainer(str(out))
        resumed.train(resume_from_checkpoint=True)
        assert rewards_of(resumed) == rewards_of(reference), point
        for name, tensor in reference.backend.centre.master.items():
            assert torch.equal(resumed.backend.centre.master[name], tensor), (point, name)
        assert not glob.glob(str(out / "_*checkpoint-*")), point  # the next save cleaned the leftovers


def test_resume_skips_incomplete_checkpoints_and_rejects_an_incomplete_path(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=2, save_strategy="steps", save_steps=1, model_card_drift=False)
    trainer.train()
    out = trainer.args.output_dir
    # A checkpoint copied half-way (or written by a non-atomic tool): newest by number, but incomplete.
    os.makedirs(os.path.join(out, "checkpoint-7"))
    open(os.path.join(out, "checkpoint-7", "trainer_state.json"), "w").write('{"global_st')
    assert latest_complete_checkpoint(out) == os.path.join(out, "checkpoint-2")
    resumed = make_trainer(tmp_path, max_steps=3, save_strategy="no", model_card_drift=False)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 3
    with pytest.raises(ValueError, match=r"checkpoint-7: trainer_state.json is unreadable"):
        resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-7"))
    os.remove(os.path.join(out, "checkpoint-1", "es_state.json"))
    with pytest.raises(ValueError, match=r"checkpoint-1: es_state.json is missing"):
        resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-1"))


def test_resume_never_unpickles_files_planted_in_a_checkpoint(tmp_path, monkeypatch):
    trainer = make_trainer(tmp_path, max_steps=1, save_strategy="steps", save_steps=1, model_card_drift=False)
    trainer.train()
    checkpoint = os.path.join(trainer.args.output_dir, "checkpoint-1")
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    for name in ("rng_state.pth", "optimizer.pt", "scheduler.pt", "scaler.pt", "training_args.bin"):
        with open(os.path.join(checkpoint, name), "wb") as f:
            pickle.dump(Exploit(), f)
    calls = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(a) or {})
    resumed = make_trainer(tmp_path, max_steps=2, model_card_drift=False)
    resumed.train(resume_from_checkpoint=checkpoint)
    assert resumed.state.global_step == 2 and not calls and not marker.exists()


# ------------------------------------------------------------------------------------------- faulty rewards

FAULTS = {
    "raise": lambda n: (_ for _ in ()).throw(ZeroDivisionError("injected")),
    "hang": lambda n: time.sleep(60),
    "nan": lambda n: [float("nan")] * n,
    "none": lambda n: [None] * n,
    "inf": lambda n: [float("-inf")] * n,
    "wrong_length": lambda n: [1.0] * (n + 1),
}
ERRORS = {
    "raise": r"'faulty' raised ZeroDivisionError: injected \(step 0, member 1\)",
    "hang": r"'faulty' timed out after 0.3s on 2 completions .*\(step 0, member 1\)",
    "nan": r"'faulty' returned nan for completion 0 \(completion starts '.*'\) \(step 0, member 1\)",
    "inf": r"'faulty' returned -inf for completion 0 .*\(step 0, member 1\)",
    "wrong_length": r"'faulty' returned 3 values for 2 completions \(step 0, member 1\)",
}


@pytest.mark.parametrize("policy", ["error", "skip_member", "zero"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_faulty_reward_under_every_policy(tmp_path, fault, policy):
    """Member 1 of every step gets a faulty reward call (4 members, 2 steps)."""
    calls = {"n": 0}

    def faulty(completion_ids, **kwargs):
        calls["n"] += 1
        if calls["n"] % 4 == 2:
            return FAULTS[fault](len(completion_ids))
        return target_token_reward(completion_ids)

    trainer = make_trainer(
        tmp_path,
        reward_funcs=faulty,
        reward_failure=policy,
        reward_timeout=0.3,
        population_size=4,
        per_device_train_batch_size=2,
        max_completion_length=4,
    )
    check = AssertFiniteAfterEveryUpdate(trainer)
    trainer.add_callback(check)
    before = {name: t.clone() for name, t in trainer.backend.centre.master.items()}
    if fault == "none":  # "not applicable" (TRL's convention), not a fault: member 1 is left out, whatever the policy
        trainer.train()
        logged = [h for h in trainer.state.log_history if "reward" in h]
        assert [h["population/skipped_members"] for h in logged] == [1.0, 1.0]
        assert all("rewards/failures" not in h for h in logged) and check.checked == 2
        return
    if policy == "error":
        with pytest.raises(RewardFunctionError, match=ERRORS[fault]):
            trainer.train()
        assert all(torch.equal(t, before[n]) for n, t in trainer.backend.centre.master.items())
        return
    trainer.train()
    assert check.checked == 2
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and all(h["rewards/failures"] == 1.0 for h in logged)
    skipped = [h["population/skipped_members"] for h in logged]
    assert skipped == ([1.0, 1.0] if policy == "skip_member" else [0.0, 0.0])
    assert any(not torch.equal(t, before[n]) for n, t in trainer.backend.centre.master.items())


def test_non_finite_update_is_refused_naming_the_step(tmp_path):
    def shaping(rewards):
        return torch.full_like(rewards, float("nan")) if shaping.calls else rewards - rewards.mean()

    shaping.calls = 0

    class Count(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            shaping.calls += 1

    trainer = make_trainer(tmp_path, fitness_shaping=shaping, max_steps=3)
    trainer.add_callback(Count())
    with pytest.raises(FloatingPointError, match=r"Step 1: Refusing a non-finite ES update"):
        trainer.train()
    assert trainer.state.global_step == 1
    for tensor in trainer.backend.centre.master.values():
        assert torch.isfinite(tensor).all()


# ------------------------------------------------------------------------------------- distributed faults


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["raise", "die"])
def test_a_failing_process_stops_every_process_quickly(tmp_path, mode):
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    launcher += [os.path.join(TESTS_DIR, "..", "accelerate_configs", "cpu.yaml"), "--num_processes", "2"]
    out = tmp_path / mode
    out.mkdir()
    proc = subprocess.run(
        launcher + [os.path.join(SCRIPTS, "rank_fault.py"), str(out), mode],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    # Stopped by the fault, not by a collective timeout: step 0 was the last one logged and nothing timed out
    # waiting for the dead process (bench/latency.py times fault to stop against its 60 s target).
    assert (out / "fault_time").is_file() and output.count("{'loss'") == 1, output
    assert "timed out" not in output.lower(), output
    if mode == "raise":  # the healthy process raises too, and shows the failing one's error
        assert "[rank1]: ValueError: injected fault on process 1" in output
        assert "[rank0]: hf_es.trainer.es_trainer.ProcessFailedError: Step 1: stopping because another process " in (
            output
        )
        assert "process 1: RewardFunctionError: Reward function 'reward' raised ValueError: injected fault" in output
    else:
        assert "Signal 9 (SIGKILL) received by PID" in output and "rank      : 1" in output


# ------------------------------------------------------------------------------------------- hostile input


def test_over_long_prompts_are_truncated_from_the_left_when_asked(tmp_path):
    long_prompt = "word " * 600 + "What is 2 + 2?"
    dataset = Dataset.from_dict({"prompt": [long_prompt, "short"] * 2})
    trainer = make_trainer(tmp_path, dataset=dataset, prompt_overflow="truncate", max_steps=1)
    trainer.train()
    assert trainer.state.log_history[0]["prompts/truncated"] == 2.0
    texts = trainer._prompt_texts([long_prompt, "short"])
    budget = 512 - trainer.args.max_completion_length
    assert len(tiny_tokenizer()(texts[0], add_special_tokens=False)["input_ids"]) <= budget
    assert texts[0].endswith("What is 2 + 2?") and texts[1] == "short"
    with pytest.raises(ValueError, match="prompt_overflow"):
        make_trainer(tmp_path, dataset=dataset, max_steps=1).train()
    with pytest.raises(ValueError, match="prompt_overflow must be"):
        make_trainer(tmp_path, prompt_overflow="drop")


def test_empty_datasets_are_clear_errors(tmp_path):
    empty = Dataset.from_dict({"prompt": ["a"], "target": ["b"]}).filter(lambda x: False)
    with pytest.raises(ValueError, match="train_dataset is empty"):
        make_trainer(tmp_path, dataset=empty)
    with pytest.raises(ValueError, match="eval_dataset is empty"):
        ESTrainer(
            model=tiny_llama(),
            reward_funcs=target_token_reward,
            args=make_trainer(tmp_path).args,
            train_dataset=prompt_dataset(4),
            eval_dataset=empty,
            processing_class=tiny_tokenizer(),
        )


def test_non_utf8_prompts_train_with_replacement_characters(tmp_path):
    seen = []

    def reward(prompts, completion_ids, **kwargs):
        seen.extend(prompts)
        return target_token_reward(completion_ids)

    raw = [b"caf\xe9 \xff\xfe prompt", b"ok prompt", b"\x80\x81", b"fine"]
    trainer = make_trainer(tmp_path, reward_funcs=reward, dataset=Dataset.from_dict({"prompt": raw}), max_steps=1)
    trainer.train()
    assert trainer.state.global_step == 1 and seen
    texts = trainer._prompt_texts([b"caf\xe9", "abc\udcff def", [{"role": "user", "content": "hi \udc80"}]])
    assert texts[0] == "caf\ufffd" and texts[1] == "abc\ufffd def" and "hi \ufffd" in texts[2]
    for text in texts:
        text.encode("utf-8")


def test_missing_gold_column_is_named_with_the_dataset_columns(tmp_path):
    def accuracy(completions, solution, **kwargs):
        return [float(c == s) for c, s in zip(completions, solution)]

    with pytest.raises(ValueError, match=r"'accuracy' needs the dataset column 'solution'.*\['prompt', 'target'\]"):
        make_trainer(tmp_path, reward_funcs=accuracy)

    def accuracy_kwargs(completions, **kwargs):
        return [float(c == s) for c, s in zip(completions, kwargs["solution"])]

    trainer = make_trainer(tmp_path, reward_funcs=accuracy_kwargs, reward_failure="zero")  # not a per-sample fault
    with pytest.raises(RewardFunctionError, match=r"needs the dataset column 'solution'.*\['prompt', 'target'\]"):
        trainer.train()
    trainer = make_trainer(tmp_path, reward_funcs=countdown_reward, reward_failure="skip_member")
    with pytest.raises(
        RewardFunctionError, match=r"needs the dataset column 'target'|needs the dataset column 'nums'"
    ):
        trainer.train()


def test_countdown_never_executes_model_output(tmp_path, monkeypatch):
    import builtins

    marker = tmp_path / "pwned"
    calls = []
    for owner, name in [(os, "system"), (subprocess, "Popen"), (builtins, "eval"), (builtins, "exec")]:
        monkeypatch.setattr(owner, name, lambda *a, _n=name, **k: calls.append(_n))
    attacks = [
        f"<answer>__import__('os').system('touch {marker}')</answer>",
        f"<answer>(3 + 5) * 7 - 2 + __import__('os').system('touch {marker}')</answer>",
        "<answer>().__class__.__bases__[0].__subclasses__()</answer>",
        "<answer>open('/etc/passwd').read()</answer>",
        "<answer>eval('(3 + 5) * 7 - 2')</answer>",
        "<answer>[x for x in (3, 5, 7, 2)]</answer>",
        "<answer>lambda: (3 + 5) * 7 - 2</answer>",
        "<answer>9 ** 9 ** 9 ** 9</answer>",
        f"__import__('os').system('touch {marker}')",
    ]
    scores = countdown_reward(completions=attacks, target=[54] * len(attacks), nums=[[3, 5, 7, 2]] * len(attacks))
    assert scores == [0.0] * len(attacks)
    assert not marker.exists() and not calls


# ---------------------------------------------------------------------------------------- security defaults


def test_trust_remote_code_is_off_unless_asked_and_reaches_from_pretrained(tmp_path, monkeypatch):
    import trl.trainer.utils as trl_utils

    import hf_es.trainer.es_trainer as es_trainer

    seen, tokenizer = [], tiny_tokenizer()

    def fake_model(model_id, **kwargs):
        seen.append(("model", kwargs.get("trust_remote_code")))
        return tiny_llama()

    def fake_tokenizer(model_id, **kwargs):
        seen.append(("tokenizer", kwargs.get("trust_remote_code")))
        return tokenizer

    monkeypatch.setattr(trl_utils, "create_model_from_path", fake_model)  # TRL's model creation, as GRPOTrainer
    monkeypatch.setattr(es_trainer.AutoTokenizer, "from_pretrained", fake_tokenizer)
    monkeypatch.setattr(es_trainer, "resolve_model_name_or_path", lambda name: name)  # no Hub lookup offline
    for trust in (None, True):
        seen.clear()
        args = make_args(tmp_path) if trust is None else make_args(tmp_path, trust_remote_code=True)
        ESTrainer(model="someone/model", reward_funcs=target_token_reward, args=args, train_dataset=prompt_dataset(4))
        assert seen == [("model", bool(trust)), ("tokenizer", bool(trust))]


def test_hub_token_is_never_written_to_any_file_or_log(tmp_path, monkeypatch, capfd):
    token = "hf_" + "SeCrEt" * 6
    monkeypatch.setenv("HF_TOKEN", token)
    args = make_args(
        tmp_path,
        hub_token=token,
        report_to=["tensorboard"],
        save_strategy="steps",
        save_steps=1,
        max_steps=2,
        log_completions=True,
        log_level="info",
        hub_model_id="me/secret-run",
        eval_strategy="steps",
        eval_steps=1,
    )
    trainer = ESTrainer(
        model=tiny_llama(),
        reward_funcs=target_token_reward,
        args=args,
        train_dataset=prompt_dataset(8),
        eval_dataset=prompt_dataset(2),
        processing_class=tiny_tokenizer(),
    )
    trainer.train()
    trainer.save_model()
    trainer.create_model_card()
    out, err = capfd.readouterr()
    assert token not in out and token not in err
    files = [p for p in glob.glob(os.path.join(tmp_path, "**", "*"), recursive=True) if os.path.isfile(p)]
    assert any("tfevents" in p for p in files) and any("checkpoint-2" in p for p in files)
    for path in files:
        data = open(path, "rb").read()
        assert token.encode() not in data and token.encode("utf-16-le") not in data, path
