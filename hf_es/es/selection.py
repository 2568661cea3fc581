"""Which parameters ES evolves: PEFT's `target_modules` matching, applied to parameter names.

ES moves only the parameters it evolves: the others are never perturbed, restored or updated, and get no fp32 master
copy, so memory and the time of a perturbation scale with the selection. The matching rule is PEFT's (so a list
written for `LoraConfig(target_modules=...)` selects the same modules here), applied to a parameter's module path and
to its full name, so a parameter can also be picked on its own (e.g. `"q_proj.bias"`):

- a string is a regular expression that must match the whole name (`re.fullmatch`);
- a list selects a name equal to one of its entries or ending with `"." + entry`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["module_names", "select_parameters"]


def module_names(parameter_names: Sequence[str]) -> list[str]:
    """The distinct module leaf names (`q_proj`, `input_layernorm`, `embed_tokens`, ...) of parameter names, sorted.

    Args:
        parameter_names: Names as given by `model.named_parameters()`.

    Returns:
        The last component of each parameter's module path, without layer indices, once each.
    """
    leaves = set()
    for name in parameter_names:
        parts = [part for part in name.split(".")[:-1] if not part.isdigit()]
        leaves.add(parts[-1] if parts else name)
    return sorted(leaves)


def select_parameters(parameter_names: Sequence[str], target_modules: str | Sequence[str] | None) -> list[str]:
    """Selects the parameters whose module (or full name) matches `target_modules`, in PEFT's convention.

    Args:
        parameter_names: Names as given by `model.named_parameters()`.
        target_modules: `None` selects everything; a string is a regular expression matched against the whole
            module path or parameter name (e.g. `r".*\\.(q_proj|v_proj)"`); a list of strings selects names equal to
            an entry or ending with `"." + entry` (e.g. `["q_proj", "v_proj", "input_layernorm"]`).

    Returns:
        The selected names, in the order of `parameter_names`.

    Raises:
        `ValueError`: `target_modules` is an empty list, an invalid regular expression, or selects nothing (the
            message lists the module names that exist).
    """
    names = list(parameter_names)
    if target_modules is None:
        return names
    if isinstance(target_modules, str):
        try:
            pattern = re.compile(target_modules)
        except re.error as error:
            raise ValueError(
                f"es_target_modules={target_modules!r} is not a valid regular expression: {error}."
            ) from error

        def matches(key: str) -> bool:
            return pattern.fullmatch(key) is not None
    else:
        targets = list(target_modules)
        if not targets or not all(isinstance(target, str) and target for target in targets):
            raise ValueError(
                f"es_target_modules must be None, a regular expression or a non-empty list of module names, got "
                f"{target_modules!r}."
            )

        def matches(key: str) -> bool:
            return any(key == target or key.endswith("." + target) for target in targets)

    selected = [name for name in names if matches(name.rpartition(".")[0]) or matches(name)]
    if not selected:
        available = module_names(names)
        shown = ", ".join(available[:30]) + (", ..." if len(available) > 30 else "")
        hint = (
            " (a string is a regular expression matched against the whole name)"
            if isinstance(target_modules, str)
            else ""
        )
        raise ValueError(
            f"es_target_modules={target_modules!r} selects no parameter{hint}. Module names in this model: {shown}. "
            "Example: es_target_modules=['q_proj', 'k_proj', 'v_proj', 'o_proj']."
        )
    return selected
