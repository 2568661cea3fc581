"""The reward registry: the names recipes (`reward_funcs`), tasks ([`hf_es.tasks.Task.rewards`]) and the evaluation
script (`--reward`) use, mapped to reward functions.

Each verifier registers itself in its own module, and `hf_es.rewards` imports every module and subpackage in its
folder ([`discover_rewards`]), so adding a verifier is one new file (or folder) under `hf_es/rewards/`, with no edit
elsewhere:

```python
# hf_es/rewards/parity.py
from .registry import register_reward


@register_reward("parity")
def parity_reward(prompts, completions, solution, **kwargs):
    return [float(len(str(c)) % 2 == int(s)) for c, s in zip(completions, solution)]
```
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import overload

from .base import RewardFunction

__all__ = ["discover_rewards", "get_reward", "register_reward", "registered_rewards", "reward_functions"]

_REWARDS: dict[str, RewardFunction] = {}


@overload
def register_reward(name: str, func: RewardFunction) -> RewardFunction: ...


@overload
def register_reward(name: str, func: None = None) -> Callable[[RewardFunction], RewardFunction]: ...


def register_reward(
    name: str, func: RewardFunction | None = None
) -> RewardFunction | Callable[[RewardFunction], RewardFunction]:
    """Registers a reward function under `name`; as a decorator (`@register_reward("parity")`) or a call
    (`accuracy_reward = register_reward("accuracy", make_accuracy_reward())`).

    Args:
        name: The registry name (what `reward_funcs` in a recipe lists).
        func: The reward function (TRL's convention: `f(prompts, completions, **columns) -> list[float | None]`);
            omit it to get a decorator.

    Returns:
        `func` itself, or a decorator that registers and returns the function it decorates.

    Raises:
        ValueError: If another function is already registered under `name`.
    """

    def register(func: RewardFunction) -> RewardFunction:
        existing = _REWARDS.get(name)
        if existing is not None and existing is not func:
            raise ValueError(
                f"The reward name {name!r} is already registered (by {getattr(existing, '__module__', '?')}); "
                "choose another name."
            )
        _REWARDS[name] = func
        return func

    return register if func is None else register(func)


def registered_rewards() -> list[str]:
    """The registered reward names, sorted."""
    return sorted(_REWARDS)


def reward_functions(names: Sequence[str]) -> list[RewardFunction]:
    """Looks up reward functions by registry name, e.g. `reward_functions(["accuracy", "format"])`.

    Raises:
        ValueError: If a name is not registered; the message suggests the closest name and lists the registered ones.
    """
    unknown = [name for name in names if name not in _REWARDS]
    if unknown:
        # Imported here, on the error path only: hf_es.cli pulls in trl (and torch), which the verifiers and their
        # worker processes otherwise never load.
        from ..cli import closest_name

        guesses = {name: closest_name(name, _REWARDS) for name in unknown}
        hints = "".join(f" (did you mean {guess!r} for {name!r}?)" for name, guess in guesses.items() if guess)
        raise ValueError(
            f"Unknown reward function(s) {unknown}{hints}; choose from {registered_rewards()}, or add a module "
            "under hf_es/rewards/ that calls `register_reward`."
        )
    return [_REWARDS[name] for name in names]


def get_reward(name: str) -> RewardFunction:
    """The reward function registered as `name` (see [`reward_functions`] for the error on an unknown name)."""
    return reward_functions([name])[0]


def discover_rewards(package: ModuleType) -> None:
    """Imports every module and subpackage of `package`, so that the verifiers in them register themselves.

    Args:
        package: The package whose folder(s) (`package.__path__`) are searched; `hf_es.rewards` calls this on itself.
    """
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
