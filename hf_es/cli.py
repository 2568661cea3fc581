"""Command-line conventions shared by every script in `scripts/`.

- `--help` is short: what the script does, where the recipes are, the fields that matter with their defaults;
  `--help-all` lists every field.
- A usage error is one line plus a hint, with exit code 2 and no traceback (`accelerate launch --quiet` then adds
  nothing either).
- A misspelt field, on the command line or in a YAML recipe, names the closest valid one.

[`ScriptArgumentParser`] wraps TRL's `TrlParser` (dataclass fields, `--config` recipes) for the training scripts;
[`SimpleArgumentParser`] is a plain `argparse.ArgumentParser` with the same conventions for the report scripts.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import yaml
from trl import TrlParser

__all__ = [
    "RECIPES",
    "USAGE_ERROR",
    "ScriptArgumentParser",
    "SimpleArgumentParser",
    "closest_name",
    "print_each_log_line_once",
    "recipe_name",
    "resolve_recipe",
    "training_help_sections",
]

USAGE_ERROR = 2  # argparse's and the shells' convention for "wrong usage"
RECIPES_DIR = "recipes"
#: The YAML recipes shipped with the package (package data, so an installed wheel has them; a checkout's top-level
#: `recipes/` links here).
RECIPES = Path(str(resources.files("hf_es") / "recipes" / "configs"))


def resolve_recipe(config: str) -> str:
    """A `--config` value as a file path: an existing path as given, else the shipped recipe it names.

    A shipped recipe is named with or without `.yaml` (`smollm2_cpu_arithmetic`), or as a checkout's
    `recipes/<name>.yaml`, so the same command works in a checkout and with an installed package.

    Args:
        config: A path or a recipe name.

    Returns:
        The path to read; `config` itself when it names nothing (the caller reports it as not found).
    """
    path = Path(config)
    if path.exists() or path.parent not in (Path("."), Path(RECIPES_DIR)):
        return config
    shipped = RECIPES / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    return str(shipped) if shipped.is_file() else config


def recipe_name(path: str) -> str:
    """How a command line names a recipe: a shipped one by its file name (valid in any working directory, see
    [`resolve_recipe`]), any other by its path."""
    return Path(path).name if Path(path).resolve().parent == RECIPES.resolve() else path


def closest_name(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to a misspelt `name` (difflib similarity >= 0.6), or `None`."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _unknown_names_message(names: Sequence[str], candidates: Iterable[str], prefix: str, where: str) -> str:
    candidates = sorted(set(candidates))
    parts = []
    for name in names:
        guess = closest_name(name, candidates)
        parts.append(f"{prefix}{name}" + (f" (did you mean {prefix}{guess}?)" if guess else ""))
    noun = ("option" if prefix else "field") + ("" if len(names) == 1 else "s")
    return f"unknown {noun} {where}: " + ", ".join(parts)


def print_each_log_line_once() -> None:
    """Stops `huggingface_hub`'s log records from reaching the root logger: its library logger has its own stderr
    handler *and* propagates, so once anything gives the root logger a handler (`logging.basicConfig`, a notebook,
    pytest) every Hub message, e.g. each upload retry, is printed twice. `transformers`' logger already does not
    propagate. Called by both parsers, i.e. by every script, never by the library."""
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.disable_propagation()


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class _ConventionsMixin:
    """One-line errors with a usage hint and exit code 2; unknown options name their closest valid spelling."""

    prog: str

    def error(self, message: str) -> NoReturn:
        if os.environ.get("RANK", "0") != "0":  # under torchrun every process parses the same command line
            sys.exit(USAGE_ERROR)
        sys.stderr.write(f"{self.prog}: error: {_one_line(message)}\n{self.prog}: run with --help for usage.\n")
        sys.exit(USAGE_ERROR)

    def _option_names(self) -> list[str]:
        return [opt[2:] for action in self._actions for opt in action.option_strings if opt.startswith("--")]

    def _reject_unknown_options(self, remaining: Sequence[str]) -> None:
        if remaining:
            flags = [arg[2:].split("=")[0] for arg in remaining if arg.startswith("--")]
            if flags:
                self.error(_unknown_names_message(flags, self._option_names(), "--", "on the command line"))
            self.error(f"unexpected arguments: {' '.join(remaining)}")


def _no_default(value: Any) -> bool:
    return value is None or value is False or value is argparse.SUPPRESS


class _DefaultsFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's layout and appends every option's default."""

    def __init__(self, prog: str):
        super().__init__(prog, max_help_position=32, width=min(119, shutil.get_terminal_size((119, 24)).columns))

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if "%(default)" in help_text or _no_default(action.default) or action.required:
            return help_text
        return f"{help_text} (default: {'%(default)r' if action.default == '' else '%(default)s'})".strip()


class SimpleArgumentParser(_ConventionsMixin, argparse.ArgumentParser):
    """`argparse.ArgumentParser` with the conventions of `scripts/`: defaults in `--help`, one-line errors with exit
    code 2, and the closest valid option for a misspelt one.

    Args:
        description: The script's docstring; its layout is kept.
        **kwargs: Passed to `argparse.ArgumentParser`.
    """

    def __init__(self, description: str | None = None, **kwargs: Any):
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(description=_short_description(description), **kwargs)
        self.epilog = self.epilog or f"More in the docstring of scripts/{self.prog}."

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        """`argparse.ArgumentParser.add_argument`; an option without help text still shows its default, and option
        values are named by their type (`INT`, `FLOAT`, `TEXT`)."""
        if not kwargs.get("help") and not _no_default(kwargs.get("default")) and not kwargs.get("required"):
            kwargs["help"] = "(default: %(default)r)" if kwargs.get("default") == "" else "(default: %(default)s)"
        action = super().add_argument(*args, **kwargs)
        if action.option_strings and action.metavar is None and not action.choices and action.nargs != 0:
            action.metavar = _type_name(action.type)
        return action

    def format_usage(self) -> str:
        return self.format_help().split("\n\n")[0] + "\n"

    def format_help(self) -> str:
        if self.usage is None:  # argparse's usage lists every option; --help lists them anyway
            positionals = [action.metavar or action.dest for action in self._actions if not action.option_strings]
            self.usage = " ".join(["%(prog)s", *map(str, positionals), "[options]"])
        return super().format_help()

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:
        parsed, remaining = self.parse_known_args(args, namespace)
        self._reject_unknown_options(remaining)
        print_each_log_line_once()
        return parsed


class _HelpAllAction(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> NoReturn:
        parser.print_help(full=True)
        parser.exit()


def _metavar(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.metavar:
        name = str(action.metavar)
    elif action.choices:
        name = "{" + ",".join(str(getattr(c, "value", c)) for c in action.choices) + "}"
    else:
        name = _type_name(action.type)
    return f"{name} [{name} ...]" if action.nargs in ("+", "*") else name


def _type_name(type_: Any) -> str:
    type_name = getattr(type_, "__name__", "str")
    return {"string_to_bool": "BOOL", "str": "TEXT"}.get(type_name, type_name.upper())


def _short_description(doc: str | None) -> str | None:
    """A docstring's first paragraph and the indented example commands right after it."""
    if not doc:
        return doc
    paragraphs = doc.strip().split("\n\n")
    kept = [paragraphs[0]]
    for paragraph in paragraphs[1:]:
        if not all(line.startswith(" ") for line in paragraph.splitlines()):
            break
        kept.append(paragraph)
    return "\n\n".join(kept)


def _default_text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    return repr(value) if isinstance(value, str) else str(value)


class ScriptArgumentParser(_ConventionsMixin, TrlParser):
    """`TrlParser` (dataclass fields, `--config` YAML recipes, CLI overrides) with the conventions of `scripts/`.

    `--help` shows `--config` and the fields named in `help_sections` with their defaults (the recipe's values when
    `--config` is given too); `--help-all` shows every field. A missing or unreadable recipe, a misspelt field (CLI
    or YAML), an invalid value and a missing required field are one-line errors with exit code 2.

    Args:
        dataclass_types: The argument dataclasses, as for `TrlParser`.
        description: One or two sentences on what the script does.
        help_sections: Section title -> field names, in the order `--help` shows them.
        examples: Example command lines shown under `--help`.
        required: Fields that must be set by the recipe or the command line.
        check_names: Called with every field name given (YAML keys and CLI flags) before parsing; a `ValueError`
            it raises becomes the error message (e.g. fields of another trainer).
        **kwargs: Passed to `TrlParser`.
    """

    def __init__(
        self,
        dataclass_types: Sequence[type],
        *,
        description: str,
        help_sections: dict[str, list[str]],
        examples: Sequence[str] = (),
        required: Sequence[str] = (),
        check_names: Callable[[list[str]], None] | None = None,
        **kwargs: Any,
    ):
        prog = kwargs.pop("prog", os.path.basename(sys.argv[0]) or "script")
        kwargs.setdefault("allow_abbrev", False)
        usage = f"{prog} --config RECIPE.yaml [--FIELD VALUE ...]"
        super().__init__(dataclass_types, prog=prog, usage=usage, description=description, **kwargs)
        self.add_argument("--help-all", action=_HelpAllAction, help="Show every field and exit.")
        self.help_sections = help_sections
        self.examples = list(examples)
        self.required_fields = list(required)
        self.check_names = check_names
        fields = {f.name for dtype in self.dataclass_types for f in dataclasses.fields(dtype)}
        unknown = [name for names in help_sections.values() for name in names if name not in fields]
        if unknown:
            raise ValueError(f"help_sections names fields that no dataclass has: {unknown}")

    def format_help(self, full: bool = False) -> str:
        """The short help (`--help`), or argparse's full list of fields (`--help-all`)."""
        if full:
            return super().format_help()
        lines = [f"usage: {self.usage}", "", self.description, ""]
        lines.append(f"Recipes: {_recipes_dir()}/*.yaml, one per model and task (ES and GRPO twins).")
        lines.append("Every field can be set in the recipe or overridden on the command line.")
        lines += [
            "",
            "  --config RECIPE.yaml   TRL-style YAML recipe of field values: a path, or a shipped recipe's name.",
        ]
        actions = {action.dest: action for action in self._actions}
        for title, names in self.help_sections.items():
            lines += ["", f"{title}:"]
            for name in names:
                action = actions[name]
                flag = f"--{name} {_metavar(action)}".rstrip()
                summary = _one_line(action.help or "").split(". ")[0].rstrip(".")
                lines.append(f"  {flag:<38} {summary} (default: {_default_text(action.default)})")
        lines += ["", "Every field (Trainer, logging, saving, ...): --help-all"]
        if self.examples:
            lines += ["", "Examples:"] + [f"  {example}" for example in self.examples]
        return "\n".join(lines) + "\n"

    def print_help(self, file: Any = None, full: bool = False) -> None:
        (file or sys.stdout).write(self.format_help(full=full))

    def parse_args_and_config(self, args: Iterable[str] | None = None, **kwargs: Any) -> tuple[Any, ...]:
        """Parses `--config` and the command line into the dataclasses; usage errors exit with code 2.

        Args:
            args: The command line (default: `sys.argv[1:]`).

        Returns:
            One instance per dataclass type.
        """
        args = [part for arg in (sys.argv[1:] if args is None else args) for part in _split_config_equals(arg)]
        if not args:
            self.error(f"no arguments: pass a recipe with --config {RECIPES_DIR}/<recipe>.yaml")
        config = self._read_config(args)
        if config is not None and any(arg in ("-h", "--help") for arg in args):
            self.set_defaults_with_config(**{k: v for k, v in config.items() if k != "env"})
        given = [arg[2:].split("=")[0] for arg in args if arg.startswith("--")] + list(config or {})
        if self.check_names is not None:
            try:
                self.check_names(given)
            except ValueError as error:
                self.error(str(error))
        try:
            *outputs, remaining = super().parse_args_and_config(args, return_remaining_strings=True)
        except ValueError as error:  # a dataclass's __post_init__ rejected a value
            self.error(str(error))
        self._reject_unknown_options(remaining)
        for name in self.required_fields:
            if all(getattr(output, name, None) is None for output in outputs):
                self.error(f"--{name} is not set: give it in the recipe or on the command line")
        print_each_log_line_once()
        return tuple(outputs)

    def _read_config(self, args: list[str]) -> dict[str, Any] | None:
        """Validates the `--config` recipe (path, YAML, field names) before TRL reads it."""
        if "--config" not in args:
            return None
        index = args.index("--config")
        if index + 1 >= len(args) or args[index + 1].startswith("--"):
            self.error(f"--config needs a recipe path, e.g. --config {RECIPES_DIR}/<recipe>.yaml")
        path = args[index + 1] = resolve_recipe(args[index + 1])  # TRL then reads the resolved path
        if not os.path.exists(path):
            guess = closest_name(Path(path).stem, [recipe.stem for recipe in RECIPES.glob("*.yaml")])
            hint = f"did you mean {guess}? " if guess else ""
            self.error(f"config file not found: {path} ({hint}recipes are in {_recipes_dir()}/)")
        if not os.path.isfile(path):
            self.error(f"--config {path} is not a file: give a YAML recipe (recipes are in {_recipes_dir()}/)")
        try:
            with open(path) as f:
                config = yaml.safe_load(f)
        except (OSError, UnicodeDecodeError) as error:
            self.error(f"cannot read config file {path}: {error}")
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            self.error(f"config file {path} is not valid YAML: {getattr(error, 'problem', None) or error}{where}")
        if not isinstance(config, dict):
            self.error(f"config file {path} must be a YAML mapping of field: value, got {type(config).__name__}")
        known = {action.dest for action in self._actions} | {"env"}
        unknown = [str(key) for key in config if key not in known]
        if unknown and self.check_names is not None:
            try:
                self.check_names(unknown)
            except ValueError as error:
                self.error(f"{path}: {error}")
        if unknown:
            self.error(_unknown_names_message(unknown, known - {"env"}, "", f"in {path}"))
        return config


def _recipes_dir() -> str:
    """Where the shipped recipes are: `recipes` in a checkout's root (its link to them), else their folder, relative
    to the working directory when it is below it."""
    if os.path.isdir(RECIPES_DIR) and os.path.samefile(RECIPES_DIR, RECIPES):
        return RECIPES_DIR
    relative = os.path.relpath(RECIPES)
    return str(RECIPES) if relative.startswith("..") else relative


def _split_config_equals(arg: str) -> list[str]:
    # TrlParser only understands "--config PATH"
    return ["--config", arg.split("=", 1)[1]] if arg.startswith("--config=") else [arg]


def training_help_sections(method: str, method_fields: list[str], extra: dict[str, list[str]] | None = None):
    """The `--help` sections of a training script: the method's own fields, then those shared by ES and GRPO.

    Args:
        method: Title of the first section (e.g. `"ES"`).
        method_fields: Fields of that section.
        extra: More sections, shown after the generation section.

    Returns:
        Section title -> field names, for [`ScriptArgumentParser`].
    """
    sections = {
        method: method_fields,
        "Generation and rewards (as in GRPOConfig)": [
            "per_device_train_batch_size",
            "num_generations",
            "max_completion_length",
            "temperature",
            "reward_weights",
            "use_vllm",
        ],
        **(extra or {}),
        "Task": ["dataset_name", "reward_funcs", "num_train_samples", "num_eval_samples", "system_prompt"],
        "Model": ["model_name_or_path", "dtype"],
        "Run": ["output_dir", "max_steps", "eval_strategy", "eval_steps", "save_strategy", "seed", "push_to_hub"],
    }
    return sections
