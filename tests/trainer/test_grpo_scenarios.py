"""TRL's own GRPOTrainer test scenarios (`tests/test_grpo_trainer.py` of huggingface/trl) and TRL's quick start, run
against ESTrainer with only the names swapped: `GRPOConfig` -> `ESConfig`, `GRPOTrainer` -> `ESTrainer`.

Each test keeps TRL's body (its field names, reward functions and assertions). What differs, and why:

- Model: TRL uses "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5", which is not available offline; a tiny random
  Llama saved to a local folder (`tiny_model_id`) stands in for it, passed by path as TRL passes its id.
- Data: TRL's "trl-internal-testing/zen" configs are not available offline; `load_dataset` below builds the same two
  configurations ("standard_prompt_only", "conversational_prompt_only") in memory from the same text.
- `ES_TEST_KNOBS` adds ES's own knobs, sized for a tiny random model on CPU (see there).
- Reward models given by name (TRL's "tiny-Qwen2ForSequenceClassification-2.5") are not supported by ESTrainer
  (`NotImplementedError`), so the scenarios that use one as their only reward use TRL's `reward_func` instead.
"""

import pytest
import torch
from datasets import Dataset
from utils import tiny_llama, tiny_tokenizer

from hf_es import ESConfig, ESTrainer

# The lines of "The Zen of Python" split as in TRL's "trl-internal-testing/zen" prompt-only configurations.
ZEN_PROMPTS = [
    "Beautiful is better than",
    "Explicit is",
    "Simple is better",
    "Complex",
    "Flat is better than",
    "Sparse is better",
]

# ES's own knobs (GRPOConfig has no equivalent). The defaults (population 32, sigma 1.5e-3, 3 epochs) train real
# models; a random 2-layer model needs a larger sigma for its greedy completions to differ between members (members
# that tie give no update), and 4 members x 2 steps keep each test at a few seconds on CPU.
ES_TEST_KNOBS = dict(population_size=4, sigma=0.05, max_steps=2, seed=0)


def load_dataset(path, name, split="train"):
    """In-memory stand-in for `datasets.load_dataset("trl-internal-testing/zen", name, split="train")`."""
    assert (path, split) == ("trl-internal-testing/zen", "train")
    if name == "standard_prompt_only":
        return Dataset.from_dict({"prompt": ZEN_PROMPTS})
    if name == "conversational_prompt_only":
        return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in ZEN_PROMPTS]})
    raise ValueError(name)


@pytest.fixture(scope="module")
def tiny_model_id(tmp_path_factory):
    """A local folder holding a tiny random causal LM and its tokenizer: stands in for TRL's tiny Hub model id."""
    path = tmp_path_factory.mktemp("tiny-LlamaForCausalLM")
    tiny_llama().save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def assert_all_params_changed(previous_trainable_params, trainer):
    for n, param in previous_trainable_params.items():
        new_param = trainer.model.get_parameter(n)
        assert not torch.equal(param, new_param), f"Parameter {n} has not changed."


def assert_es_step_logged(trainer, num_reward_funcs=1):
    """ES specifics: every step logged its population's reward spread and updated the centre (no tie skipped it)."""
    steps = [entry for entry in trainer.state.log_history if "update_norm" in entry]
    assert len(steps) == ES_TEST_KNOBS["max_steps"]
    for entry in steps:
        assert entry["population/skipped_members"] == 0
        assert entry["update_norm"] > 0
        assert entry["train_loss" if "train_loss" in entry else "loss"] == pytest.approx(-entry["reward"])
    assert trainer.state.global_step == ES_TEST_KNOBS["max_steps"]


def reward_len(completions, **kwargs):
    """TRL's reward_func of test_train_reward_func_standard: rewards longer completions."""
    return [float(len(completion)) for completion in completions]


@pytest.mark.parametrize("config_name", ["standard_prompt_only", "conversational_prompt_only"])
def test_train_dataset_format(tmp_path, tiny_model_id, config_name):
    # TRL's test_train / test_train_dataset_format; TRL scores with a reward model by name, replaced here by a
    # function of the completion's content (the only difference, see the module docstring).
    dataset = load_dataset("trl-internal-testing/zen", config_name, split="train")

    def reward_func(completions, **kwargs):
        contents = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [float(len(content)) for content in contents]

    training_args = ESConfig(
        output_dir=str(tmp_path),
        learning_rate=0.1,  # use higher lr because gradients are tiny and default lr can stall updates
        per_device_train_batch_size=3,  # reduce the batch size to reduce memory usage
        num_generations=3,  # reduce the number of generations to reduce memory usage
        max_completion_length=8,  # reduce the completion length to reduce memory usage
        report_to="none",
        **ES_TEST_KNOBS,
    )
    trainer = ESTrainer(model=tiny_model_id, reward_funcs=reward_func, args=training_args, train_dataset=dataset)

    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)
    assert_es_step_logged(trainer)


def make_training_args(tmp_path, **trl_fields):
    """TRL's GRPOConfig arguments shared by every scenario below, plus the scenario's own fields."""
    values = dict(
        output_dir=str(tmp_path),
        learning_rate=0.1,  # use higher lr because gradients are tiny and default lr can stall updates
        per_device_train_batch_size=3,  # reduce the batch size to reduce memory usage
        num_generations=3,  # reduce the number of generations to reduce memory usage
        max_completion_length=8,  # reduce the completion length to reduce memory usage
        report_to="none",
        **ES_TEST_KNOBS,
    )
    return ESConfig(**{**values, **trl_fields})


def test_train_reward_func_conversational(tmp_path, tiny_model_id):
    dataset = load_dataset("trl-internal-testing/zen", "conversational_prompt_only", split="train")
    seen = {}

    def reward_func(completions, **kwargs):
        """Reward function that gives higher scores to longer completion content."""
        seen["completion"] = completions[0]
        completion_contents = [completion[0]["content"] for completion in completions]
        return [float(len(content)) for content in completion_contents]

    trainer = ESTrainer(
        model=tiny_model_id, reward_funcs=reward_func, args=make_training_args(tmp_path), train_dataset=dataset
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)
    # TRL's conversational completion: one assistant message.
    assert [message["role"] for message in seen["completion"]] == ["assistant"]


def test_train_multiple_reward_funcs(tmp_path, tiny_model_id):
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    def reward_func1(completions, **kwargs):
        """Reward function that rewards longer completions."""
        return [float(len(completion)) for completion in completions]

    def reward_func2(completions, **kwargs):
        """Reward function that rewards completions with more unique letters."""
        return [float(len(set(completion))) for completion in completions]

    trainer = ESTrainer(
        model=tiny_model_id,
        reward_funcs=[reward_func1, reward_func2],
        args=make_training_args(tmp_path),
        train_dataset=dataset,
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)
    assert_es_step_logged(trainer)
    for entry in trainer.state.log_history[:-1]:  # unweighted: the total is the sum of the two means
        total = entry["rewards/reward_func1/mean"] + entry["rewards/reward_func2/mean"]
        assert entry["reward"] == pytest.approx(total)


def test_train_sync_and_async_reward_funcs(tmp_path, tiny_model_id):
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    def sync_reward_func1(completions, **kwargs):
        """Reward function that rewards longer completions."""
        return [float(len(completion)) for completion in completions]

    def sync_reward_func2(completions, **kwargs):
        return [1 for _ in completions]

    async def async_reward_func(completions, **kwargs):
        """Async Reward function that rewards completions with more unique letters."""
        return [float(len(set(completion))) for completion in completions]

    trainer = ESTrainer(
        model=tiny_model_id,
        reward_funcs=[sync_reward_func1, sync_reward_func2, async_reward_func],
        args=make_training_args(tmp_path),
        train_dataset=dataset,
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)
    assert trainer.state.log_history[0]["rewards/sync_reward_func2/mean"] == 1.0
    assert trainer.state.log_history[0]["rewards/async_reward_func/mean"] > 0


def test_train_multiple_reward_funcs_with_None_output(tmp_path, tiny_model_id):
    """A valid reward function is used while the other returns None (not applicable) for every completion."""
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    def applicable_reward_func(completions, **kwargs):
        """A reward function that rewards longer completions."""
        return [float(len(completion)) for completion in completions]

    def non_applicable_reward_func(completions, **kwargs):
        """A reward function that returns None for all inputs, as it is not applicable to this sample."""
        return [None] * len(completions)

    trainer = ESTrainer(
        model=tiny_model_id,
        reward_funcs=[applicable_reward_func, non_applicable_reward_func],  # One applicable, one non applicable
        args=make_training_args(tmp_path),
        train_dataset=dataset,
    )
    previous_trainable_params = {
        n: param.clone() for n, param in trainer.model.named_parameters() if param.requires_grad
    }

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)
    assert_es_step_logged(trainer)
    for entry in trainer.state.log_history[:-1]:
        assert entry["completions/unscorable"] == 0  # one applicable function makes every completion scorable
        assert entry["reward"] == pytest.approx(entry["rewards/applicable_reward_func/mean"])
        assert "rewards/non_applicable_reward_func/mean" not in entry


def test_train_multiple_reward_funcs_with_weights(tmp_path, tiny_model_id):
    """ESTrainer handles multiple reward functions with weights."""
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    def reward_func1(completions, **kwargs):
        """Reward function that rewards longer completions."""
        return [float(len(completion)) for completion in completions]

    def reward_func2(completions, **kwargs):
        """Reward function that rewards completions with more unique letters."""
        return [float(len(set(completion))) for completion in completions]

    training_args = make_training_args(
        tmp_path,
        reward_weights=[0.7, 0.3],  # weight of reward_func1 and reward_func2 respectively
    )
    trainer = ESTrainer(
        model=tiny_model_id, reward_funcs=[reward_func1, reward_func2], args=training_args, train_dataset=dataset
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    # Check that training logs contain both reward metrics
    assert trainer.state.log_history[-1]["train_loss"] is not None
    logged = trainer.state.log_history[-2]  # TRL logs the metrics with the last loss; ES logs them per step
    assert "rewards/reward_func1/mean" in logged
    assert "rewards/reward_func1/std" in logged
    assert "rewards/reward_func2/mean" in logged
    assert "rewards/reward_func2/std" in logged
    assert_all_params_changed(previous_trainable_params, trainer)
    weighted = 0.7 * logged["rewards/reward_func1/mean"] + 0.3 * logged["rewards/reward_func2/mean"]
    assert logged["reward"] == pytest.approx(weighted)


def test_reward_metric_reflects_reward_weights(tmp_path, tiny_model_id):
    """The logged 'reward' metric uses reward_weights, not an unweighted sum."""
    # TRL parametrizes `multi_objective_aggregation` ("sum_then_normalize", "normalize_then_sum"); ESConfig has no such
    # field: ES always sums the weighted rewards first and then shapes the members' totals (sum_then_normalize).
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    def constant_reward_1(completions, **kwargs):
        return [1.0] * len(completions)

    def constant_reward_0(completions, **kwargs):
        return [0.0] * len(completions)

    trainer = ESTrainer(
        model=tiny_model_id,
        reward_funcs=[constant_reward_1, constant_reward_0],
        args=make_training_args(tmp_path, reward_weights=[0.7, 0.3]),
        train_dataset=dataset,
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    log = trainer.state.log_history[-2]  # the last step's metrics (the last entry is the train summary)
    # With reward_weights=[0.7, 0.3] and rewards [1.0, 0.0]: weighted reward = 0.7, unweighted = 1.0
    assert abs(log["reward"] - 0.7) < 1e-5, f"Expected logged reward to be ~0.7 (weighted), got {log['reward']}."
    # ES specific: members that all tie carry no information, so the centre does not move.
    assert log["update_norm"] == 0.0 and log["frac_zero_std"] == 1.0
    for n, param in previous_trainable_params.items():
        assert torch.equal(param, trainer.model.get_parameter(n)), f"Parameter {n} moved on tied rewards."


def test_train_reward_func_additional_column(tmp_path, tiny_model_id):
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    # Add a column to the dataset (dummy example, the column could be anything)
    some_values = list(range(len(dataset)))
    dataset = dataset.add_column("some_values", some_values)
    seen_values = set()

    def reward_func(completions, some_values, **kwargs):
        """Reward function that rewards completions with lengths closer to the values in some_values."""
        seen_values.update(some_values)
        return [
            float(abs(len(completion) - value)) for completion, value in zip(completions, some_values, strict=True)
        ]

    trainer = ESTrainer(
        model=tiny_model_id, reward_funcs=reward_func, args=make_training_args(tmp_path), train_dataset=dataset
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)
    assert seen_values == set(some_values)  # 2 steps x 3 prompts: every row's value reached the reward function


def test_warning_raised_all_rewards_none(tmp_path, tiny_model_id, caplog):
    """A proper warning is raised when all rewards are None, and training carries on."""
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    def always_none_reward_func(completions, **kwargs):
        """Reward function that always returns None."""
        return [None] * len(completions)

    trainer = ESTrainer(
        model=tiny_model_id,
        reward_funcs=always_none_reward_func,
        args=make_training_args(tmp_path),
        train_dataset=dataset,
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    # TRL logs under "trl.trainer.grpo_trainer" as "All reward functions returned None for the following kwargs:";
    # ESTrainer's scoring module words it as below, naming the prompt and completion as TRL does.
    with caplog.at_level("WARNING", logger="hf_es.scoring.score"):
        trainer.train()

    expected_warning = "Every reward function returned None for 9 of 9 completions"
    assert expected_warning in caplog.text
    assert "First: prompt" in caplog.text
    # ES specific: no member is scorable, so both steps make no update and say so in the log.
    assert trainer.state.global_step == 2
    for entry in trainer.state.log_history[:-1]:
        assert entry["population/skipped_members"] == ES_TEST_KNOBS["population_size"]
        assert entry["completions/unscorable"] == ES_TEST_KNOBS["population_size"] * 9
        assert entry["update_norm"] == 0.0
    for n, param in previous_trainable_params.items():
        assert torch.equal(param, trainer.model.get_parameter(n))


def test_train_num_generations_larger_than_batch_size(tmp_path, tiny_model_id):
    # TRL also sets `gradient_accumulation_steps=2` so that GRPO's generation batch can hold 6 generations of one
    # prompt; ESConfig rejects gradient_accumulation_steps != 1 by name (no gradients) and needs no such constraint:
    # each member generates per_device_train_batch_size x num_generations completions.
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")
    calls = []

    def reward_func(completions, **kwargs):
        calls.append(len(completions))
        return [float(len(completion)) for completion in completions]

    training_args = make_training_args(
        tmp_path,
        num_generations=6,  # the number of generations is larger than the batch size
    )
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        make_training_args(tmp_path, num_generations=6, gradient_accumulation_steps=2)
    trainer = ESTrainer(model=tiny_model_id, reward_funcs=reward_func, args=training_args, train_dataset=dataset)
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)
    assert calls == [3 * 6] * (ES_TEST_KNOBS["population_size"] * ES_TEST_KNOBS["max_steps"])


def test_train_with_generation_kwargs(tmp_path, tiny_model_id):
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    training_args = make_training_args(
        tmp_path,
        # Pass gen kwargs
        generation_kwargs={"do_sample": True, "top_k": 50, "num_beams": 2, "length_penalty": -0.1},
    )
    trainer = ESTrainer(model=tiny_model_id, reward_funcs=reward_len, args=training_args, train_dataset=dataset)
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)


def test_train_with_reward_func_accessing_trainer_state(tmp_path, tiny_model_id):
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")
    global_steps = []

    def reward_func(completions, **kwargs):
        trainer_state = kwargs.get("trainer_state")
        assert trainer_state is not None
        # transformers.TrainerState instance should have a `global_step` property.
        assert hasattr(trainer_state, "global_step")
        global_steps.append(trainer_state.global_step)
        return [float(len(set(completion))) for completion in completions]

    trainer = ESTrainer(
        model=tiny_model_id, reward_funcs=reward_func, args=make_training_args(tmp_path), train_dataset=dataset
    )
    trainer.train()

    population = ES_TEST_KNOBS["population_size"]
    assert global_steps == [0] * population + [1] * population  # the state of the step being evaluated


def test_train_reward_func_with_log_extra(tmp_path, tiny_model_id):
    # TRL then asserts `"test_column" in trainer._logs["extra"]` (a private attribute of GRPOTrainer).
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    def reward_func(completions, **kwargs):
        log_extra = kwargs.get("log_extra")
        assert log_extra is not None
        log_extra("test_column", [completion[:5] for completion in completions])
        return [float(len(completion)) for completion in completions]

    trainer = ESTrainer(
        model=tiny_model_id,
        reward_funcs=reward_func,
        args=make_training_args(tmp_path, log_completions=True),
        train_dataset=dataset,
    )
    trainer.train()
    # ES keeps the columns of the last scored completions in a public attribute.
    column = trainer.completion_extras["test_column"]
    assert column and all(isinstance(value, str) and len(value) <= 5 for value in column)


def test_train_reward_func_with_log_metric(tmp_path, tiny_model_id):
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    def reward_func(completions, **kwargs):
        log_metric = kwargs.get("log_metric")
        assert log_metric is not None
        log_metric("custom_accuracy", 0.75)
        return [float(len(completion)) for completion in completions]

    trainer = ESTrainer(
        model=tiny_model_id, reward_funcs=reward_func, args=make_training_args(tmp_path), train_dataset=dataset
    )
    trainer.train()
    # log_metric appends to _metrics, which gets averaged and merged into log_history
    logged_keys = {k for entry in trainer.state.log_history for k in entry}
    assert "custom_accuracy" in logged_keys


def test_train_peft_config(tmp_path, tiny_model_id):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_id, dtype="float32")
    base_param_names = [f"base_model.model.{n}" for n, _ in model.named_parameters()]
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    trainer = ESTrainer(
        model=model,
        reward_funcs=reward_len,  # TRL: a reward model by name (see the module docstring)
        args=make_training_args(tmp_path),
        train_dataset=dataset,
        peft_config=LoraConfig(),
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    # Check that the peft params have changed and the base model params have not changed
    num_changed = 0
    for n, param in previous_trainable_params.items():
        new_param = trainer.model.get_parameter(n)
        if n in base_param_names:  # We expect the base model params to be the same
            torch.testing.assert_close(param, new_param, msg=f"Parameter {n} has changed.")
        elif "base_layer" not in n:  # We expect the peft params to be different (except for the base layer)
            assert not torch.equal(param, new_param), f"Parameter {n} has not changed."
            num_changed += 1
        else:  # ES specific: a frozen tensor is never touched, bit for bit
            assert torch.equal(param, new_param), f"Parameter {n} has changed."
    assert num_changed == 8  # LoraConfig() on Llama: q_proj and v_proj of 2 layers, lora_A and lora_B


def test_train_peft_model(tmp_path, tiny_model_id):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_id, dtype="float32")
    base_param_names = [f"base_model.model.{n}" for n, _ in model.named_parameters()]
    lora_config = LoraConfig()
    model = get_peft_model(model, lora_config)
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")

    trainer = ESTrainer(
        model=model,
        reward_funcs=reward_len,  # TRL: a reward model by name (see the module docstring)
        args=make_training_args(tmp_path),
        train_dataset=dataset,
        processing_class=tiny_tokenizer(),  # TRL reads it from the model's Hub id; a PeftModel's is a local folder
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    for n, param in previous_trainable_params.items():
        new_param = trainer.model.get_parameter(n)
        if n in base_param_names:  # We expect the base model params to be the same
            torch.testing.assert_close(param, new_param, msg=f"Parameter {n} has changed.")
        elif "base_layer" not in n and "ref" not in n:  # and the peft params to be different (except base and ref)
            assert not torch.equal(param, new_param), f"Parameter {n} has not changed."


def test_init_minimal(tmp_path, tiny_model_id, monkeypatch):
    # ESTrainer can be instantiated with only model, reward function and train_dataset (TRL passes a reward model by
    # name, which ESTrainer refuses: see test_reward_model_by_name_is_refused). Default args write to the cwd.
    monkeypatch.chdir(tmp_path)
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")
    trainer = ESTrainer(model=tiny_model_id, reward_funcs=reward_len, train_dataset=dataset)
    assert trainer.args.output_dir.endswith("-ES")


@pytest.fixture(scope="module")
def tiny_reward_model_id(tmp_path_factory):
    """A local tiny random one-logit sequence-classification model: stands in for TRL's tiny Hub reward model."""
    from transformers import LlamaForSequenceClassification

    path = tmp_path_factory.mktemp("tiny-LlamaForSequenceClassification")
    LlamaForSequenceClassification(tiny_llama(seed=5, num_labels=1).config).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def test_train_multiple_mixed_reward_funcs(tmp_path, tiny_model_id, tiny_reward_model_id):
    # TRL's test_train_multiple_mixed_reward_funcs: a reward function and a reward model given by name.
    dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")
    trainer = ESTrainer(
        model=tiny_model_id,
        reward_funcs=[reward_len, tiny_reward_model_id],
        args=make_training_args(tmp_path),
        train_dataset=dataset,
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_all_params_changed(previous_trainable_params, trainer)
    assert_es_step_logged(trainer)
    model_reward = f"rewards/{trainer.reward_func_names[1]}/mean"
    for entry in trainer.state.log_history[:-1]:  # unweighted: the total is the sum of the two means
        assert entry["reward"] == pytest.approx(entry["rewards/reward_len/mean"] + entry[model_reward])


@pytest.mark.parametrize(
    "grpo_field", [dict(num_iterations=2), dict(beta=0.1), dict(loss_type="dapo"), dict(sync_ref_model=True)]
)
def test_grpo_only_fields_are_rejected_by_name(tmp_path, grpo_field):
    # TRL's test_train_multiple_iterations / test_train_beta_non_zero / test_train_loss_types /
    # test_train_with_sync_ref_model set fields that have no meaning in ES: ESConfig names them instead of ignoring them.
    (name,) = grpo_field
    with pytest.raises(ValueError, match=f"GRPO-only field.*`{name}`"):
        make_training_args(tmp_path, **grpo_field)


def test_other_grpo_fields_are_rejected_by_name(tmp_path):
    # TRL's test_reward_metric_reflects_reward_weights sets `multi_objective_aggregation`.
    with pytest.raises(ValueError, match="multi_objective_aggregation"):
        make_training_args(tmp_path, multi_objective_aggregation="normalize_then_sum")


def test_trl_quick_start(tmp_path, tiny_model_id, monkeypatch):
    # TRL's quick start (docs: "GRPO Trainer > Quick start") with GRPOTrainer -> ESTrainer: DeepMath-103K (not
    # available offline) is replaced by in-memory rows of the same shape (conversational `prompt`, `solution`), Qwen2.5
    # by the tiny model. The default ESConfig needs no change; it is only shortened here to one small ES step.
    from trl.rewards import accuracy_reward

    pytest.importorskip("math_verify")
    monkeypatch.chdir(tmp_path)
    dataset = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(4)],
            "solution": [f"${2 * i}$" for i in range(4)],
        }
    )
    args = ESConfig(output_dir=str(tmp_path / "out"), max_steps=1, population_size=2, max_completion_length=8)

    trainer = ESTrainer(model=tiny_model_id, reward_funcs=accuracy_reward, train_dataset=dataset, args=args)
    trainer.train()

    step = trainer.state.log_history[0]
    # A random model never answers right: every member scores 0, so the rewards tie and the centre stays put.
    assert step["reward"] == 0.0 and step["rewards/accuracy_reward/mean"] == 0.0
    assert step["update_norm"] == 0.0
    assert trainer.state.global_step == 1
