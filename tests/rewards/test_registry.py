"""`hf_es.rewards.registry`: verifiers register themselves by name, and a new module in the package is found."""

import sys
import textwrap

import pytest

import hf_es.rewards
from hf_es.rewards import (
    accuracy_reward,
    countdown_reward,
    format_reward,
    get_reward,
    register_reward,
    registered_rewards,
    reward_functions,
)
from hf_es.rewards import registry as registry_module
from hf_es.tasks import TASKS


@pytest.fixture
def registry(monkeypatch):
    """The registry, restored after the test (so names registered here do not leak into other tests)."""
    monkeypatch.setattr(registry_module, "_REWARDS", dict(registry_module._REWARDS))
    return registry_module


def test_the_builtin_verifiers_are_registered_under_their_names():
    assert registered_rewards() == ["accuracy", "countdown", "format"]
    assert reward_functions(["accuracy", "format", "countdown"]) == [accuracy_reward, format_reward, countdown_reward]
    assert get_reward("countdown") is countdown_reward


def test_every_task_default_reward_is_registered():
    for task in TASKS.values():
        funcs = reward_functions(list(task.rewards))
        assert len(funcs) == len(task.rewards) >= 1, task.name
        assert all(callable(func) for func in funcs), task.name


def test_the_task_module_name_is_the_registry_lookup():
    # The model card's usage snippet imports `reward_functions` from hf_es.tasks.
    from hf_es.tasks import reward_functions as from_tasks

    assert from_tasks(["accuracy", "format"]) == [accuracy_reward, format_reward]


def test_an_unknown_name_suggests_the_closest_and_lists_the_registered_ones():
    with pytest.raises(ValueError) as error:
        reward_functions(["accuracy", "acuracy", "nonsense"])
    message = str(error.value)
    assert "['acuracy', 'nonsense']" in message
    assert "did you mean 'accuracy' for 'acuracy'?" in message
    assert "'nonsense'?" not in message
    assert "choose from ['accuracy', 'countdown', 'format']" in message
    with pytest.raises(ValueError, match="Unknown reward function"):
        get_reward("formatt")


def test_register_as_call_or_decorator_and_names_stay_unique(registry):
    def parity_reward(completions, **kwargs):
        return [float(len(c) % 2) for c in completions]

    assert register_reward("parity", parity_reward) is parity_reward
    assert register_reward("parity", parity_reward) is parity_reward  # the same function again: a no-op

    @register_reward("parity_decorated")
    def decorated(completions, **kwargs):
        return [0.0] * len(completions)

    assert get_reward("parity_decorated") is decorated
    assert get_reward("parity")(completions=["ab", "abc"]) == [0.0, 1.0]
    with pytest.raises(ValueError, match="'accuracy' is already registered"):
        register_reward("accuracy", parity_reward)
    assert get_reward("accuracy") is accuracy_reward


VERIFIER = """
from hf_es.rewards import register_reward


@register_reward("{name}")
def {name}_reward(prompts, completions, solution, **kwargs):
    return [float(str(c).strip() == str(s)) for c, s in zip(completions, solution)]
"""


@pytest.mark.parametrize("layout", ["module", "subpackage"])
def test_a_verifier_dropped_into_the_package_folder_is_found_by_name(tmp_path, monkeypatch, registry, layout):
    # A second folder on the package's search path stands in for hf_es/rewards/ itself: the new verifier is one file
    # (or one folder) there, and nothing else is edited; the package's own discovery call finds it.
    name = f"echo_{layout}"
    path = tmp_path / (f"{name}.py" if layout == "module" else f"{name}/__init__.py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(VERIFIER.format(name=name)))
    monkeypatch.setattr(hf_es.rewards, "__path__", [*hf_es.rewards.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, f"hf_es.rewards.{name}", raising=False)
    with pytest.raises(ValueError):
        get_reward(name)

    registry.discover_rewards(hf_es.rewards)
    try:
        reward = get_reward(name)
        assert name in registered_rewards()
        assert reward(prompts=["p", "p"], completions=["4", "5"], solution=["4", "4"]) == [1.0, 0.0]
        assert reward_functions(["accuracy", name])[0] is accuracy_reward
    finally:
        sys.modules.pop(f"hf_es.rewards.{name}", None)
