"""The one registry pattern behind every named choice of a run (noise, shaping, estimator, perturbation, engine).

A [`Registry`] is a plain `dict` from a name to a factory (evosax style), plus a `register` decorator and a lookup
whose error lists the registered names. `ESConfig` validates its fields against the same registries that build the
objects, so a choice registered here is accepted by the config, and an unknown one is refused with the names known.

Example:

```python
>>> from hf_es.es import NOISE_SOURCES, GaussianNoise
>>> @NOISE_SOURCES.register("my_gaussian")
... def my_gaussian(table_size, chunk_size, num_parameters):
...     return GaussianNoise(chunk_size=chunk_size)
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(dict[str, T]):
    """Name -> factory for one choice, named after the config field that selects it.

    Args:
        field: The `ESConfig` field (or argument) that names the choice, used in error messages.
    """

    def __init__(self, field: str):
        super().__init__()
        self.field = field

    def register(self, name: str, factory: T | None = None) -> Callable[[T], T] | T:
        """Adds `factory` under `name`; without `factory`, returns a decorator that does.

        Args:
            name: The name a config gives to choose it.
            factory: What the name resolves to (a function or a class).

        Returns:
            `factory`, or the decorator.
        """

        def add(item: T) -> T:
            if name in self:
                raise ValueError(f"{self.field} {name!r} is already registered.")
            self[name] = item
            return item

        return add if factory is None else add(factory)

    def check(self, name: str) -> None:
        """Raises a `ValueError` naming the registered choices when `name` is not one of them."""
        if name not in self:
            raise ValueError(f"{self.field} must be one of {sorted(self)}, got {name!r}.")

    def resolve(self, name: str) -> T:
        """The factory registered under `name` (a `ValueError` listing the registered names if there is none)."""
        self.check(name)
        return self[name]
