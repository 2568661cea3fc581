"""Configuration of [`ESTrainer`]: TRL's GRPOConfig field names wherever the meaning carries over, plus ES fields.

Over ~400 lines by design: a config dataclass holds one field per option with its help text, next to its checks.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainingArguments

from ..es import ESTIMATORS, FITNESS_SHAPING, NOISE_SOURCES, NON_MATRIX_NOISE, PERTURBATIONS
from ..generation import BACKENDS

__all__ = ["GRPO_ONLY_FIELDS", "ESConfig", "check_no_grpo_only_fields"]

# GRPOConfig fields with no meaning in ES, and what to do instead. Passing one to ESConfig is an error, so that a
# recipe written for GRPO never silently trains with a setting that is ignored.
GRPO_ONLY_FIELDS: dict[str, str] = {
    "beta": "ES has no KL penalty to a reference model; remove it",
    "epsilon": "ES has no policy-ratio clipping; remove it",
    "epsilon_high": "ES has no policy-ratio clipping; remove it",
    "delta": "ES has no policy-ratio clipping; remove it",
    "loss_type": "ES has no loss; choose the update with `estimator` and `fitness_shaping`",
    "scale_rewards": "use `fitness_shaping` ('zscore', 'centered_rank' or 'none')",
    "num_iterations": "each ES step evaluates fresh members; remove it",
    "importance_sampling_level": "ES does not use importance sampling; remove it",
    "mask_truncated_completions": "truncated completions are scored as they are; remove it",
    "sync_ref_model": "ES has no reference model; remove it",
    "ref_model_mixup_alpha": "ES has no reference model; remove it",
    "ref_model_sync_steps": "ES has no reference model; remove it",
    "top_entropy_quantile": "ES has no token-level loss; remove it",
    "entropy_coef": "ES has no token-level loss; remove it",
    "steps_per_generation": "every ES step generates with its own population; remove it",
    "generation_batch_size": "an ES step generates per_device_train_batch_size x num_generations per member",
    "vllm_importance_sampling_correction": "ES does not use importance sampling; remove it",
}


@functools.cache
def _other_grpo_fields() -> frozenset[str]:
    """Fields of the installed TRL's `GRPOConfig` that ESConfig neither has nor explains in `GRPO_ONLY_FIELDS`: TRL
    adds such fields often, and each must still be refused by name rather than with dataclass's bare TypeError."""
    try:
        from trl import GRPOConfig
    except ImportError:  # pragma: no cover - trl is a dependency
        return frozenset()
    own = {f.name for f in dataclasses.fields(ESConfig)}
    return frozenset(f.name for f in dataclasses.fields(GRPOConfig)) - own - set(GRPO_ONLY_FIELDS)


def check_no_grpo_only_fields(names: Iterable[str]) -> None:
    """Raises a `ValueError` naming every GRPO-only field among `names`, with what to do instead.

    Args:
        names: Field names given by the user (keyword arguments, YAML keys or CLI flags).
    """
    other_grpo_fields = _other_grpo_fields()
    rejected = [name for name in names if name in GRPO_ONLY_FIELDS or name in other_grpo_fields]
    if rejected:
        details = "; ".join(
            f"`{name}`: {GRPO_ONLY_FIELDS.get(name, 'a GRPO setting with no counterpart in ES; remove it')}"
            for name in rejected
        )
        raise ValueError(
            f"ESConfig got GRPO-only field(s) {rejected} that have no meaning in Evolution Strategies. {details}. "
            "To convert a whole GRPOConfig, use `ESConfig.from_grpo_config(grpo_config)`."
        )


@dataclass
class ESConfig(TrainingArguments):
    r"""
    Configuration class for [`ESTrainer`]: Evolution Strategies post-training of a causal LM with verifiable rewards.

    Fields shared with TRL's `GRPOConfig` keep their names and meaning, so a GRPO recipe ports by swapping the class
    (GRPO-only fields such as `beta` raise an error naming the field; see [`ESConfig.from_grpo_config`]).
    One ES step draws `population_size` perturbations `theta + sigma * eps_i` of the weights; every member answers the
    same `per_device_train_batch_size` prompts (`num_generations` completions each); the members' mean rewards are
    shaped and combine the directions into the update `theta += learning_rate * (1/N) * sum_i z_i * eps_i`.

    Parameters:
        > ES parameters

        population_size (`int`, *optional*, defaults to `32`):
            N, the number of perturbed members per step. Members are split across processes.
        sigma (`float`, *optional*, defaults to `1.5e-3`):
            Standard deviation of the weight perturbation.
        learning_rate (`float`, *optional*, defaults to `2.5e-4`):
            alpha, the ES step size (it absorbs the 1/sigma of the gradient estimate). Follows `lr_scheduler_type`.
        fitness_shaping (`str`, *optional*, defaults to `"zscore"`):
            How rewards become update weights: `"zscore"`, `"centered_rank"` or `"none"` (raw rewards).
        estimator (`str`, *optional*, defaults to `"one_point"`):
            `"one_point"` (N independent directions) or `"antithetic"` (N/2 directions at +/- sigma, common sampling
            seeds within a pair).
        noise_seed (`int`, *optional*, defaults to `0`):
            Seed of all noise directions; with the step and member index it regenerates every perturbation.
        noise_type (`str`, *optional*, defaults to `"table"`):
            `"table"`: slices of a shared, standardised table of Gaussian values (Salimans et al. 2017), drawn on the
            host and copied once to the master's device: fast on any device, identical on every process.
            `"gaussian"`: exact i.i.d. `torch.randn` per chunk on the master's device: fast when the master is on a
            GPU (see `es_master_device`), slow on the host; its values depend on the GPU model.
        noise_table_size (`int`, *optional*):
            Number of float32 values in the noise table. `None` sizes it to the model: a power of two near 1/16 of
            the parameter count, between `2**22` (16 MiB) and `2**25` (128 MiB).
        reward_failure (`str`, *optional*, defaults to `"error"`):
            What to do when a reward function raises, returns the wrong length, or a non-finite value:
            `"error"` stops with the function and sample named; `"skip_member"` leaves that member out of the update
            (logged as `population/skipped_members`); `"zero"` scores the failing sample 0.
        reward_timeout (`float`, *optional*, defaults to `600.0`):
            Seconds one call of one reward function may take (all the completions of one member); a call that runs
            longer counts as a failure under `reward_failure`. `None` or `0` disables the deadline. Uses `SIGALRM` in
            the main thread (a hang inside one long C call is only noticed when it returns to Python); elsewhere the
            call runs in a helper thread that is abandoned on timeout.
        prompt_overflow (`str`, *optional*, defaults to `"error"`):
            What to do with a prompt that leaves fewer than `max_completion_length` tokens of the model context:
            `"error"` stops with the prompt named; `"truncate"` drops tokens from the *start* of the prompt (the end,
            with the question and the generation prompt, is kept) and logs a warning.

        > Generation parameters (as in GRPOConfig)

        num_generations (`int`, *optional*, defaults to `1`):
            Completions per prompt per member (GRPO's default is 8 completions per prompt in total).
        max_completion_length (`int`, *optional*, defaults to `512`):
            Maximum number of generated tokens.
        temperature (`float`, *optional*, defaults to `0.0`):
            Sampling temperature; `0.0` is greedy decoding (the paper's easy setting; GRPO's default is 1.0).
        top_p (`float`, *optional*, defaults to `1.0`), top_k (`int`, *optional*, defaults to `0`),
        min_p (`float`, *optional*), repetition_penalty (`float`, *optional*, defaults to `1.0`):
            Sampling filters, as in GRPOConfig (`top_k=0` disables top-k).
        generation_kwargs (`dict`, *optional*):
            Extra keyword arguments for the generation backend (`GenerationConfig` or vLLM `SamplingParams`).
        chat_template_kwargs (`dict`, *optional*):
            Extra keyword arguments for `apply_chat_template` on conversational prompts.

        generation_max_rows (`int`, *optional*):
            Most sequences (members x prompts x `num_generations` rows) in one `generate` call of the transformers
            backend, in training, `evaluate()` and the Pass@K evaluation. `None`: as many as fit in the
            accelerator's free memory at each call (KV cache, prefill activations and logits of the longest row),
            no cap on the CPU. Greedy results do not depend on it. (TRL's `generation_batch_size` means something
            else: completions per optimizer step.)
        generation_backend (`str`, *optional*):
            The generation engine, a name registered in [`hf_es.generation.BACKENDS`] (`"transformers"`, `"vllm"`,
            or one added as in docs/ENGINES.md). `None`: `"vllm"` with `use_vllm`, else `"transformers"`;
            `"vllm"` sets `use_vllm`. A `generation_backend` instance passed to [`ESTrainer`] overrides it.

        > vLLM parameters (as in GRPOConfig; ES supports only the colocated mode)

        use_vllm (`bool`, *optional*, defaults to `False`), vllm_mode (`str`, *optional*, defaults to `"colocate"`),
        vllm_gpu_memory_utilization (`float`, *optional*, defaults to `0.3`),
        vllm_tensor_parallel_size (`int`, *optional*, defaults to `1`), vllm_max_model_length (`int`, *optional*),
        vllm_enable_sleep_mode (`bool`, *optional*, defaults to `False`; `True` is rejected: the engine generates in
        every phase of an ES run, so sleeping would free nothing anything else uses).

        > Rewards, logging and model

        reward_weights (`list[float]`, *optional*):
            Weight of each reward function (all 1.0 by default).
        log_completions (`bool`, *optional*, defaults to `False`):
            Print the completions of the first member evaluated in the last step, with their rewards, at each logging
            step: TRL's `rich` table (`print_prompt_completions_sample`), plain lines when `rich` is not installed.
        num_completions_to_print (`int`, *optional*):
            How many completions to print (all when `None`).
        success_threshold (`float`, *optional*):
            A completion counts as correct for the population's diversity metrics (`population/coverage`,
            `population/coverage_same_mean`, `population/coverage_gap`, `population/js_diversity`) when its total
            (weighted) reward is `>=` this. `None` (default): the sum of the positive `reward_weights`, the largest
            total of verifiers scoring in `[0, 1]`, i.e. "the reward equals its maximum" for binary verifiers. Set it
            for other rewards (e.g. `0.5` for a partial-credit reward in `[0, 1]`).
        model_init_kwargs (`dict`, *optional*):
            Keyword arguments for `AutoModelForCausalLM.from_pretrained` when `model` is a string
            (e.g. `{"dtype": "bfloat16"}`).
        trust_remote_code (`bool`, *optional*, defaults to `False`):
            Allow custom model code from the Hub.
        model_card_drift (`bool`, *optional*, defaults to `True`):
            Measure parameter drift from the base checkpoint (streamed from disk) at every save and put it in the
            model card (`drift_stats.json`). Needs the base model as a local folder.
        save_es_master (`bool`, *optional*, defaults to `False`):
            Also write the fp32 master weights (`es_master.safetensors`) into final saves (`save_model()`, the end
            of training, `push_to_hub()` keeps it local). Checkpoints always hold it, so a resume is exact; a final
            save needs it only to continue training exactly from it. Only written when the model is not fp32.

        > Parameter selection and PEFT

        es_target_modules (`list[str]` or `str`, *optional*):
            Which parameters evolve without PEFT, in PEFT's `target_modules` convention: a list selects modules whose
            name equals an entry or ends with `"." + entry` (e.g. `["q_proj", "k_proj", "v_proj", "o_proj",
            "input_layernorm"]`), a string is a regular expression matching the whole module or parameter name.
            Parameters left out are never perturbed nor updated and get no fp32 master copy. `None` (default): every
            trainable parameter evolves (with `peft_config`, the adapter). On the command line give a regular
            expression (`--es_target_modules '.*\\.(q_proj|v_proj)'`); lists come from Python or YAML.
        save_merged_model (`bool`, *optional*, defaults to `False`):
            With a PEFT adapter, also write the adapter merged into the base weights (a full model loadable without
            `peft`) to `<output_dir>/merged` at every save; the adapter itself is always saved.

        > Accelerator placement

        es_master_device (`str`, *optional*, defaults to `"auto"`):
            Where the fp32 master copy and the noise live, for both backends. `"auto"`: on the device of the live
            weights (the GPU) when 4 bytes per parameter + the noise table fit in its free memory (beside vLLM's
            `vllm_gpu_memory_utilization` share keeping a fixed 2 GiB, or keeping 10% of the device for transformers
            generation), else on the host with a logged reason that, with vLLM, names the largest utilization at which
            it would fit; `"accelerator"`: on the live weights' device regardless; `"cpu"`: on the host (saves
            device memory; every perturbation is then host arithmetic plus a copy, much slower).
        check_perturbations (`bool`, *optional*, defaults to `True`):
            Before the first step and after a resume, prove on a few short prompts that perturbing each group of
            evolved weights (attention, MLP, embeddings / LM head, norms, adapters) changes the centre's logits and
            that restoring makes them bit-identical again; stop with an error naming the group otherwise (see
            `hf_es.trainer.probe`; a few forwards).

    > [!NOTE]
    > Defaults that differ from `TrainingArguments`: `learning_rate=2.5e-4`, `lr_scheduler_type="constant"`,
    > `logging_steps=1`, `per_device_train_batch_size=64` (prompts per step, the same on every process: members
    > are split across processes, prompts are not), `max_grad_norm=0` (no gradients), `remove_unused_columns=False`
    > (reward functions read the dataset's other columns), `save_only_model=True` (there is no optimizer state).
    """

    _VALID_DICT_FIELDS = TrainingArguments._VALID_DICT_FIELDS + [
        "model_init_kwargs",
        "generation_kwargs",
        "chat_template_kwargs",
    ]

    # ES
    population_size: int = field(default=32, metadata={"help": "N, perturbed members per step."})
    sigma: float = field(default=1.5e-3, metadata={"help": "Standard deviation of the weight perturbation."})
    learning_rate: float = field(default=2.5e-4, metadata={"help": "alpha, the ES step size."})
    fitness_shaping: str = field(
        default="zscore", metadata={"help": "Fitness shaping: 'zscore', 'centered_rank' or 'none'."}
    )
    estimator: str = field(default="one_point", metadata={"help": "'one_point' or 'antithetic'."})
    noise_seed: int = field(default=0, metadata={"help": "Seed of the noise directions."})
    noise_type: str = field(default="table", metadata={"help": "'table' (shared noise table) or 'gaussian'."})
    noise_table_size: int | None = field(
        default=None, metadata={"help": "Values in the shared noise table (None: sized to the model)."}
    )
    reward_failure: str = field(
        default="error", metadata={"help": "On a failing reward function: 'error', 'skip_member' or 'zero'."}
    )
    reward_timeout: float | None = field(
        default=600.0, metadata={"help": "Seconds one reward-function call may take; None or 0 disables it."}
    )
    prompt_overflow: str = field(
        default="error",
        metadata={"help": "Prompts longer than the context allows: 'error' or 'truncate' (keeps the end)."},
    )

    # Model
    model_init_kwargs: dict[str, Any] | str | None = field(
        default=None, metadata={"help": "Keyword arguments for AutoModelForCausalLM.from_pretrained."}
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow custom model code from the Hub."})

    # Data and generation
    remove_unused_columns: bool | None = field(
        default=False, metadata={"help": "Keep False: reward functions read the dataset's other columns."}
    )
    per_device_train_batch_size: int = field(
        default=64, metadata={"help": "Prompts per ES step, shared by every member and every process."}
    )
    num_generations: int = field(default=1, metadata={"help": "Completions per prompt per member."})
    max_completion_length: int | None = field(default=512, metadata={"help": "Maximum generated tokens."})
    shuffle_dataset: bool = field(default=True, metadata={"help": "Shuffle the training dataset."})
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature; 0 is greedy."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling probability mass."})
    top_k: int = field(default=0, metadata={"help": "Top-k filtering; 0 disables it."})
    min_p: float | None = field(default=None, metadata={"help": "Minimum token probability relative to the top."})
    repetition_penalty: float = field(default=1.0, metadata={"help": "Repetition penalty; 1.0 disables it."})
    generation_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Extra keyword arguments for the generation backend."}
    )
    chat_template_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Extra keyword arguments for apply_chat_template."}
    )

    generation_max_rows: int | None = field(
        default=None,
        metadata={"help": "Most rows in one transformers generate call; None: what fits in free accelerator memory."},
    )
    generation_backend: str | None = field(
        default=None,
        metadata={"help": "Registered generation engine ('transformers', 'vllm', ...); None: from use_vllm."},
    )

    # vLLM
    use_vllm: bool = field(default=False, metadata={"help": "Generate with a colocated vLLM engine."})
    vllm_mode: str = field(default="colocate", metadata={"help": "Only 'colocate' is supported by ES."})
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata={"help": "GPU memory fraction for vLLM."})
    vllm_tensor_parallel_size: int = field(default=1, metadata={"help": "Tensor parallel size of each engine."})
    vllm_max_model_length: int | None = field(default=None, metadata={"help": "Context window for vLLM."})
    vllm_enable_sleep_mode: bool = field(default=False, metadata={"help": "Not supported by ES (must be False)."})

    # Rewards and logging
    reward_weights: list[float] | None = field(default=None, metadata={"help": "Weight of each reward function."})
    log_completions: bool = field(default=False, metadata={"help": "Print sample completions when logging."})
    num_completions_to_print: int | None = field(default=None, metadata={"help": "Completions to print."})

    # Model card
    model_card_drift: bool = field(
        default=True,
        metadata={"help": "Put parameter-drift statistics from the base model in every saved model card."},
    )
    save_es_master: bool = field(
        default=False,
        metadata={
            "help": "Also put the fp32 master (es_master.safetensors) in final saves; checkpoints always have it."
        },
    )

    # TrainingArguments defaults that do not fit ES
    lr_scheduler_type: str = field(default="constant", metadata={"help": "Schedule of alpha."})
    logging_steps: float = field(default=1, metadata={"help": "Log every X ES steps."})
    max_grad_norm: float = field(default=0.0, metadata={"help": "Unused: ES has no gradients."})
    save_only_model: bool = field(default=True, metadata={"help": "ES has no optimizer state to save."})

    # parameter selection / PEFT (issue 14)
    es_target_modules: list[str] | str | None = field(
        default=None,
        metadata={
            "help": "Full-rank parameters to evolve, in PEFT's target_modules style: module-name suffixes (list) or a "
            "full-match regex (string; the command line takes a regex, e.g. '.*\\.(q_proj|v_proj)'). None evolves every "
            "trainable parameter."
        },
    )
    save_merged_model: bool = field(
        default=False,
        metadata={
            "help": "With a PEFT adapter, also save the merged full model in `<output_dir>/merged` at each save."
        },
    )

    # low-rank population (issue 17)
    perturbation: str = field(
        default="full",
        metadata={"help": "'full' (the paper's i.i.d. noise) or 'low_rank' (A B^T / sqrt(r) per matrix, one batch)."},
    )
    perturbation_rank: int = field(default=1, metadata={"help": "r, rank of each member's direction per matrix."})
    low_rank_non_matrix_noise: str = field(
        default="full",
        metadata={"help": "With 'low_rank': 'full' noise for non-matrix parameters (norms, biases) or 'none'."},
    )

    # accelerator placement (issue 12)
    es_master_device: str = field(
        default="auto",
        metadata={
            "help": "Where the fp32 master and noise live: 'auto' (the weights' device if it fits), "
            "'accelerator' or 'cpu'."
        },
    )
    check_perturbations: bool = field(
        default=True,
        metadata={"help": "At start and resume, prove that perturbing each weight group reaches the logits."},
    )

    # population diversity (issue 24)
    success_threshold: float | None = field(
        default=None,
        metadata={
            "help": "A completion counts as correct in population/coverage and population/js_diversity when its "
            "total reward is >= this. None: the sum of the positive reward_weights (binary 0/1 verifiers at their "
            "maximum)."
        },
    )

    def __post_init__(self):
        for name in ("model_init_kwargs", "generation_kwargs", "chat_template_kwargs"):
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, json.loads(value))
        super().__post_init__()
        self._resolve_generation_backend()
        self.validate_es_fields()

    def validate_es_fields(self) -> None:
        """Checks the ES fields (`__post_init__` does; call it again after changing them on a built config, as a
        sweep does for each setting).

        Raises:
            ValueError: Naming the first invalid field and what it must be.
        """
        self._validate_es_fields()
        self._validate_perturbation_fields()
        self._validate_placement_fields()
        if self.success_threshold is not None and not math.isfinite(self.success_threshold):
            raise ValueError(f"success_threshold must be None or a finite number, got {self.success_threshold}.")

    @property
    def backend_name(self) -> str:
        """The generation engine of this run: `generation_backend`, else `"vllm"` with `use_vllm` (TRL's field),
        else `"transformers"`."""
        return self.generation_backend or ("vllm" if self.use_vllm else "transformers")

    def _resolve_generation_backend(self) -> None:
        if self.generation_backend is None:
            return
        BACKENDS.check(self.generation_backend)
        if self.use_vllm and self.generation_backend != "vllm":
            raise ValueError(
                f"use_vllm=True asks for the vLLM engine but generation_backend={self.generation_backend!r}; set one."
            )
        self.use_vllm = self.generation_backend == "vllm"  # what checks of vLLM's limits read, as in TRL

    def _validate_perturbation_fields(self) -> None:
        PERTURBATIONS.check(self.perturbation)
        if self.perturbation_rank < 1:
            raise ValueError(f"perturbation_rank must be >= 1, got {self.perturbation_rank}.")
        if self.low_rank_non_matrix_noise not in NON_MATRIX_NOISE:
            raise ValueError(
                f"low_rank_non_matrix_noise must be one of {list(NON_MATRIX_NOISE)}, got "
                f"{self.low_rank_non_matrix_noise!r}."
            )
        if self.perturbation == "low_rank" and self.use_vllm:
            raise ValueError(
                "perturbation='low_rank' needs the transformers backend (use_vllm=False): it evaluates the whole "
                "population in one batch by adding each row's low-rank correction inside the forward pass, which "
                "vLLM does not expose (its multi-LoRA route is not implemented in hf_es). Use perturbation='full' "
                "with vLLM."
            )

    def _validate_es_fields(self) -> None:
        def require(condition: bool, message: str) -> None:
            if not condition:
                raise ValueError(message)

        require(
            isinstance(self.population_size, int) and self.population_size >= 2,
            f"population_size must be an integer >= 2 (ES needs at least two members to compare), got "
            f"{self.population_size}. The paper uses 32; try 8-16 on CPU.",
        )
        require(self.sigma > 0, f"sigma must be > 0, got {self.sigma}. The paper uses 1.5e-3.")
        require(self.learning_rate >= 0, f"learning_rate (alpha) must be >= 0, got {self.learning_rate}.")
        require(
            callable(self.fitness_shaping) or self.fitness_shaping in FITNESS_SHAPING,
            f"fitness_shaping must be one of {sorted(FITNESS_SHAPING)} or a callable, got {self.fitness_shaping!r}.",
        )
        ESTIMATORS.resolve(self.estimator)(self.population_size)  # the layout refuses sizes it cannot pair up
        NOISE_SOURCES.check(self.noise_type)
        require(
            self.reward_failure in ("error", "skip_member", "zero"),
            f"reward_failure must be 'error', 'skip_member' or 'zero', got {self.reward_failure!r}.",
        )
        require(
            self.reward_timeout is None or self.reward_timeout >= 0,
            f"reward_timeout must be None or >= 0 seconds (0 disables it), got {self.reward_timeout}.",
        )
        require(
            self.prompt_overflow in ("error", "truncate"),
            f"prompt_overflow must be 'error' or 'truncate', got {self.prompt_overflow!r}.",
        )
        require(
            self.generation_max_rows is None or self.generation_max_rows >= 1,
            f"generation_max_rows must be None (sized to free memory) or >= 1, got {self.generation_max_rows}.",
        )
        require(self.num_generations >= 1, f"num_generations must be >= 1, got {self.num_generations}.")
        require(
            self.max_completion_length is not None and self.max_completion_length >= 1,
            f"max_completion_length must be a positive integer, got {self.max_completion_length}.",
        )
        require(self.temperature >= 0, f"temperature must be >= 0 (0 is greedy), got {self.temperature}.")
        require(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}.")
        require(self.top_k >= 0, f"top_k must be >= 0 (0 disables it), got {self.top_k}.")
        require(
            not self.use_vllm or self.vllm_mode == "colocate",
            f"ES supports only vllm_mode='colocate' (each process perturbs its own engine's weights in place), got "
            f"{self.vllm_mode!r}.",
        )
        require(
            self.gradient_accumulation_steps == 1,
            "gradient_accumulation_steps has no meaning in ES (no gradients); leave it at 1 and raise "
            "per_device_train_batch_size to put more prompts in a step.",
        )

    def _validate_placement_fields(self) -> None:
        if self.es_master_device not in ("auto", "accelerator", "cpu"):
            raise ValueError(
                f"es_master_device must be 'auto', 'accelerator' or 'cpu', got {self.es_master_device!r}."
            )
        if self.noise_table_size is not None and self.noise_table_size <= 1 << 20:
            raise ValueError(
                f"noise_table_size must be None (sized to the model) or larger than the noise chunk (2**20 values), "
                f"got {self.noise_table_size}."
            )
        if self.vllm_enable_sleep_mode:
            raise ValueError(
                "vllm_enable_sleep_mode is not supported by ES: every step and every evaluation generates with the "
                "engine, whose weights ES moves in place, so there is no phase in which sleeping would free memory "
                "that anything else uses (checkpoints are written from the host copy). Leave it False."
            )

    @classmethod
    def from_grpo_config(cls, grpo_config: Any, **overrides: Any) -> ESConfig:
        """Translates a TRL `GRPOConfig` (or any dataclass of TrainingArguments) into an `ESConfig`.

        Shared fields are copied; GRPO-only fields are dropped with a warning listing those that differ from
        GRPOConfig's defaults; `learning_rate` is not copied (GRPO's AdamW rate is no ES alpha) unless given in
        `overrides`.

        Args:
            grpo_config: The config to translate.
            **overrides: ESConfig fields to set (e.g. `population_size=16, sigma=1e-3`).

        Returns:
            The ESConfig.
        """
        es_fields = {f.name for f in dataclasses.fields(cls) if f.init}
        values, dropped = {}, []
        for f in dataclasses.fields(grpo_config):
            if not f.init or f.name.startswith("_"):
                continue
            value = getattr(grpo_config, f.name)
            if f.name in es_fields:
                if f.name not in ("learning_rate", "logging_steps", "max_grad_norm"):
                    values[f.name] = value
            elif value != _field_default(f):
                dropped.append(f.name)
        # TrainingArguments resolves some fields in __post_init__; pass the user's intent, not resolved objects.
        for name in ("bf16", "fp16", "report_to", "logging_dir", "gradient_checkpointing"):
            values.pop(name, None)
        if dropped:
            warnings.warn(f"ESConfig.from_grpo_config dropped GRPO-only settings: {sorted(dropped)}.", stacklevel=2)
        values.update(overrides)
        return cls(**values)


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


_dataclass_init = ESConfig.__init__


@functools.wraps(_dataclass_init)
def _init_rejecting_grpo_fields(self, *args, **kwargs):
    check_no_grpo_only_fields(kwargs)
    _dataclass_init(self, *args, **kwargs)


ESConfig.__init__ = _init_rejecting_grpo_fields
