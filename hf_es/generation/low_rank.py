"""One batched forward pass for a whole low-rank population: every batch row sees its own member's weights.

With low-rank directions (see [`hf_es.es.low_rank`]) member k's matrices are `W + s_k A_k B_k^T / sqrt(r)`, so a
Linear layer's output for a row of member k is `x W^T + s_k (x B_k) A_k^T / sqrt(r)`: the shared product plus two
thin matmuls. [`LowRankMemberHooks`] adds that correction with forward hooks, row by row through batched matmuls, so
the live weights are never written and nothing has to be restored. It matches, up to rounding, the model with member
k's weights written in (what `LowRankCentre.perturb_` does), including in how it treats:

- tied weights (an LM head sharing the embedding matrix): the tensor is evolved once under its Hugging Face name,
  so the embedding and the head both see the same direction, exactly as when it is written into the shared tensor;
- embeddings (`nn.Embedding`): the looked-up rows of the direction, `s_k A_k[ids] B_k^T / sqrt(r)`, are added to
  the output;
- non-matrix parameters with full-rank noise: a Linear's bias gets `s_k eps_k` added; any other module owning such
  parameters (RMSNorm, LayerNorm) is re-run per row under `torch.func.vmap` with its per-row parameters.

Matrices used by other module types (e.g. GPT-2's `Conv1D`) are refused: use `perturbation="full"` for such models.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from ..es import LowRankCentre
from .base import SamplingConfig

__all__ = ["LowRankMemberHooks", "PerRowSampler"]


class LowRankMemberHooks:
    """Context manager that makes each batch row of `model` behave as its own low-rank population member.

    Args:
        model: The module that reads `centre.parameters` (its weights hold the exact centre).
        centre: The low-rank centre (factors and non-matrix noise are regenerated from it).
        seeds: Seed of each member evaluated in this batch.
        scales: `sign * sigma` of each member.

    Call [`select_rows`] before each forward/generate call to say which member each batch row belongs to.
    """

    def __init__(self, model: nn.Module, centre: LowRankCentre, seeds: Sequence[int], scales: Sequence[float]):
        if len(seeds) != len(scales):
            raise ValueError(f"Got {len(seeds)} seeds but {len(scales)} scales.")
        self.model, self.centre = model, centre
        self.seeds, self.scales = list(seeds), list(scales)
        self._names = {tensor.data_ptr(): name for name, tensor in centre.parameters.items()}
        self._member_stacks: dict[str, tuple[torch.Tensor, ...]] = {}
        self._rows: dict[tuple[str, int, bool], torch.Tensor] = {}
        self._groups: torch.Tensor | None = None
        self._row_members: torch.Tensor | None = None
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._in_vmap = False

    # ------------------------------------------------------------------ factors

    def _stack(self, name: str) -> tuple[torch.Tensor, ...]:
        """Per-member tensors of one evolved parameter, in the live dtype: `(A * s / sqrt r, B)` or `(s * eps,)`."""
        if name not in self._member_stacks:
            live, centre = self.centre.parameters[name], self.centre
            if centre.is_matrix(name):
                pairs = [centre.factors(seed, name, live.device) for seed in self.seeds]
                scaled_a = [a * (scale / math.sqrt(centre.rank)) for (a, _), scale in zip(pairs, self.scales)]
                stack = (torch.stack(scaled_a), torch.stack([b for _, b in pairs]))
            else:
                master = centre.master[name].to(live.device)
                # Rows of member k hold the member's parameter itself, rounded as perturb_ would write it.
                stack = (
                    torch.stack(
                        [
                            master + scale * centre.noise.full(seed, name, master.shape, live.device)
                            for seed, scale in zip(self.seeds, self.scales)
                        ]
                    ),
                )
            self._member_stacks[name] = tuple(t.to(live.dtype) for t in stack)
        return self._member_stacks[name]

    def select_rows(self, row_members: torch.Tensor | Sequence[int]) -> None:
        """Says which member (index into `seeds`) each row of the next batch belongs to.

        Member-major batches (equal blocks of consecutive rows per member, as `generate_members` builds them) are
        computed per block: one thin matmul per member instead of one per row.

        Args:
            row_members: Integer member index of each batch row, shape `(batch,)`.
        """
        row_members = torch.as_tensor(row_members, dtype=torch.long)
        if row_members.numel() and not 0 <= int(row_members.min()) <= int(row_members.max()) < len(self.seeds):
            raise ValueError(f"row_members must index the {len(self.seeds)} members, got {row_members.tolist()}.")
        blocks, counts = torch.unique_consecutive(row_members, return_counts=True)
        self._row_members = row_members
        self._groups = blocks if counts.numel() and bool((counts == counts[0]).all()) else row_members
        self._rows = {}

    def _gathered(self, name: str, which: int, device: torch.device, per_row: bool = False) -> torch.Tensor:
        """`self._stack(name)[which]` gathered per group of rows, or per row (cached until the next `select_rows`)."""
        key = (name, which, per_row)
        if key not in self._rows:
            index = self._row_members if per_row else self._groups
            self._rows[key] = self._stack(name)[which][index.to(device)]
        return self._rows[key]

    def _check_batch(self, batch: int) -> int:
        """Checks the batch against `select_rows` and returns the number of row groups."""
        if self._row_members is None or batch != self._row_members.numel():
            known = None if self._row_members is None else self._row_members.numel()
            raise ValueError(f"Batch of {batch} rows but select_rows() was given {known}; call it before each batch.")
        return self._groups.numel()

    # -------------------------------------------------------------------- hooks

    def _linear_hook(self, weight: str | None, bias: str | None):
        def hook(module: nn.Linear, args: tuple, output: torch.Tensor) -> torch.Tensor:
            x = args[0]
            groups = self._check_batch(x.shape[0])
            out = output.reshape(groups, -1, output.shape[-1])
            if weight is not None:
                a, b = self._gathered(weight, 0, x.device), self._gathered(weight, 1, x.device)
                thin = torch.bmm(x.reshape(groups, -1, x.shape[-1]), b)
                out = torch.baddbmm(out, thin, a.transpose(1, 2))
            if bias is not None:
                out = out + (self._gathered(bias, 0, x.device) - module.bias)[:, None, :]
            return out.reshape(output.shape)

        return hook

    def _embedding_hook(self, weight: str):
        def hook(module: nn.Embedding, args: tuple, output: torch.Tensor) -> torch.Tensor:
            ids = args[0]
            groups = self._check_batch(ids.shape[0])
            scaled_a = self._stack(weight)[0]
            index = self._groups.to(ids.device)
            coefficients = scaled_a[index[:, None], ids.reshape(groups, -1)]  # (groups, rows * seq, r)
            b = self._gathered(weight, 1, ids.device)
            out = torch.baddbmm(output.reshape(groups, -1, output.shape[-1]), coefficients, b.transpose(1, 2))
            return out.reshape(output.shape)

        return hook

    def _per_row_module_hook(self, owned: dict[str, str]):
        # None: not tried yet; then whether broadcasting (groups, 1, d) parameters gives vmap's result bit for bit.
        broadcasts: list[bool | None] = [None]

        def per_row(module, args, kwargs):
            params = {local: self._gathered(name, 0, args[0].device, per_row=True) for local, name in owned.items()}

            def one_row(row_params, *row_args):
                batched = tuple(arg.unsqueeze(0) for arg in row_args)
                return torch.func.functional_call(module, row_params, batched, kwargs).squeeze(0)

            return torch.func.vmap(one_row)(params, *args)

        def broadcast(module, args, kwargs, output):
            # One call with per-group parameters shaped (groups, 1, d), e.g. RMSNorm's `weight * x`: no vmap cost.
            groups, x = self._groups.numel(), args[0]
            params = {local: self._gathered(name, 0, x.device)[:, None] for local, name in owned.items()}
            grouped = (x.reshape(groups, -1, *x.shape[2:]), *args[1:])
            return torch.func.functional_call(module, params, grouped, kwargs).reshape(output.shape)

        def hook(module: nn.Module, args: tuple, kwargs: dict, output: torch.Tensor) -> torch.Tensor | None:
            if self._in_vmap:
                return None
            self._check_batch(args[0].shape[0])
            self._in_vmap = True
            try:
                if broadcasts[0]:
                    return broadcast(module, args, kwargs, output)
                exact = per_row(module, args, kwargs)
                if broadcasts[0] is None:
                    try:
                        broadcasts[0] = args[0].dim() >= 2 and torch.equal(
                            broadcast(module, args, kwargs, output), exact
                        )
                    except (RuntimeError, ValueError):
                        broadcasts[0] = False
                return exact
            finally:
                self._in_vmap = False

        return hook

    def _install(self, module: nn.Module, owned: dict[str, str]) -> None:
        matrices = {local for local, name in owned.items() if self.centre.is_matrix(name)}
        if self.centre.non_matrix_noise == "none":
            owned = {local: name for local, name in owned.items() if local in matrices}
        if not owned:
            return
        if isinstance(module, nn.Linear) and set(owned) <= {"weight", "bias"}:
            hook = self._linear_hook(owned.get("weight"), owned.get("bias"))
        elif isinstance(module, nn.Embedding) and set(owned) == {"weight"}:
            hook = self._embedding_hook(owned["weight"])
        elif not matrices:
            self._handles.append(module.register_forward_hook(self._per_row_module_hook(owned), with_kwargs=True))
            return
        else:
            raise ValueError(
                f"Low-rank batched generation supports matrices read by nn.Linear or nn.Embedding; "
                f"{type(module).__name__} owns {sorted(owned[m] for m in matrices)}. Use perturbation='full' for "
                "this model."
            )
        self._handles.append(module.register_forward_hook(hook))

    def __enter__(self) -> LowRankMemberHooks:
        reached = set()
        try:
            for module in self.model.modules():
                owned = {
                    local: self._names[param.data_ptr()]
                    for local, param in module.named_parameters(recurse=False)
                    if param.data_ptr() in self._names
                }
                reached.update(owned.values())
                self._install(module, owned)
        except Exception:
            self.__exit__(None, None, None)
            raise
        missing = set(self.centre.parameters) - reached
        if missing:
            self.__exit__(None, None, None)
            raise ValueError(f"Evolved parameters not read by any module of the model: {sorted(missing)[:5]}.")
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._member_stacks, self._rows = {}, {}


class PerRowSampler(LogitsProcessor):
    """Samples each row with its own generator, so a row's tokens depend only on its seed and its own logits.

    Used with greedy `generate` (the processor returns `0` at the sampled token and `-inf` elsewhere, so argmax picks
    it). Two rows with the same seed draw the same uniforms: the two members of an antithetic pair keep common random
    numbers inside one batched call. Applies the same warpers as transformers' sampling (temperature, top-k, top-p,
    min-p) before sampling; repetition penalty runs earlier, in `generate`'s own processors.

    Args:
        sampling: The sampling settings (`temperature > 0`).
        row_seeds: Seed of each batch row.
        device: Device of the logits.
    """

    def __init__(self, sampling: SamplingConfig, row_seeds: Sequence[int], device: torch.device | str):
        warpers = [TemperatureLogitsWarper(sampling.temperature)]
        if sampling.top_k:
            warpers.append(TopKLogitsWarper(top_k=sampling.top_k))
        if sampling.top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p=sampling.top_p))
        if sampling.min_p is not None:
            warpers.append(MinPLogitsWarper(min_p=sampling.min_p))
        self.warpers = LogitsProcessorList(warpers)
        self.generators = [torch.Generator(device=device).manual_seed(seed) for seed in row_seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probabilities = torch.softmax(self.warpers(input_ids, scores).float(), dim=-1)
        tokens = torch.cat(
            [torch.multinomial(p, 1, generator=g) for p, g in zip(probabilities, self.generators, strict=True)]
        )
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(1, tokens[:, None], 0.0)
