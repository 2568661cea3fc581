"""The command-line conventions of `scripts/` (hf_es.cli): short help with defaults, one-line usage errors with exit
code 2 and no traceback, and the closest valid name for a misspelt field."""

import glob
import os
import subprocess
import sys

import pytest

from hf_es.cli import USAGE_ERROR, SimpleArgumentParser, closest_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
RECIPE = os.path.join("recipes", "smollm2_cpu_arithmetic.yaml")
sys.path.insert(0, SCRIPTS)


def run_script(name, *args, launcher=()):
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    command = (
        [*launcher, os.path.join(SCRIPTS, name), *args] if launcher else [sys.executable, f"scripts/{name}", *args]
    )
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def assert_one_line_usage_error(proc, script, *fragments):
    assert proc.returncode == USAGE_ERROR, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[1] == f"{script}: run with --help for usage.", proc.stderr
    assert lines[0].startswith(f"{script}: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    "args, fragments",
    [
        ((), ["no arguments", "--config recipes/"]),
        (("--config",), ["--config needs a recipe path"]),
        (("--config", "recipes/no_such_recipe.yaml"), ["config file not found: recipes/no_such_recipe.yaml"]),
        (("--config", RECIPE, "--sigmaa", "0.1"), ["unknown option on the command line: --sigmaa", "--sigma?"]),
    ],
)
def test_train_es_usage_errors_are_one_line_with_exit_code_2(args, fragments):
    assert_one_line_usage_error(run_script("train_es.py", *args), "train_es.py", *fragments)


def test_train_es_help_is_short_and_leads_with_config_and_recipes():
    proc = run_script("train_es.py", "--help")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) < 60
    assert lines[0] == "usage: train_es.py --config RECIPE.yaml [--FIELD VALUE ...]"
    assert "Recipes: recipes/*.yaml" in proc.stdout and "--help-all" in proc.stdout
    assert proc.stdout.index("--config") < proc.stdout.index("--population_size")
    assert "--sigma FLOAT" in proc.stdout and "(default: 0.0015)" in proc.stdout
    assert "--max_completion_length INT" in proc.stdout and "--adam_beta1" not in proc.stdout


@pytest.mark.parametrize(
    "script, expected",
    [
        ("train_grpo.py", ["--beta FLOAT", "--eval_temperature FLOAT", "(default: 0.0)"]),
        ("sweep.py", ["--population_sizes INT [INT ...]", "(default: [8, 16, 32, 64])"]),
        ("compose.py", ["--es_launcher TEXT", "(default: python)"]),
        ("drift_report.py", ["usage: drift_report.py base tuned [options]", "(default: 144)"]),
        ("estimator_diagnostic.py", ["--num_directions INT", "(default: 32)"]),
        ("vllm_equivalence_report.py", ["--max_tokens INT", "(default: 64)"]),
    ],
)
def test_every_script_help_exits_0_and_shows_defaults(script, expected):
    proc = run_script(script, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.splitlines()) < 80
    for fragment in expected:
        assert fragment in proc.stdout, fragment


def test_misspelt_yaml_key_and_grpo_only_key_name_the_fix(tmp_path, capsys):
    from train_es import build_parser

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model_name_or_path: x\npopulaton_size: 8\n")
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args_and_config(["--config", str(recipe)])
    assert exit_info.value.code == USAGE_ERROR
    assert f"unknown field in {recipe}: populaton_size (did you mean population_size?)" in capsys.readouterr().err

    recipe.write_text("model_name_or_path: x\nbeta: 0.04\n")
    with pytest.raises(SystemExit):
        build_parser().parse_args_and_config(["--config", str(recipe)])
    assert "GRPO-only field(s) ['beta']" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, fragment",
    [("a: [1\n", "is not valid YAML: expected ',' or ']'"), ("- 1\n", "must be a YAML mapping"), ("", "got NoneType")],
)
def test_unreadable_recipe_is_one_line(tmp_path, capsys, content, fragment):
    from train_es import build_parser

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args_and_config(["--config", str(recipe)])
    assert exit_info.value.code == USAGE_ERROR
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 2


def test_invalid_value_and_missing_model_are_one_line(capsys):
    from train_es import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args_and_config(["--config", RECIPE, "--fitness_shaping", "zscor", "--output_dir", "x"])
    assert exit_info.value.code == USAGE_ERROR
    assert "fitness_shaping must be one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args_and_config(["--dataset_name", "arithmetic", "--output_dir", "x"])
    assert "--model_name_or_path is not set" in capsys.readouterr().err


def test_recipe_values_and_overrides_reach_the_dataclasses():
    from train_es import build_parser

    task, config, model = build_parser().parse_args_and_config(
        ["--config=" + RECIPE, "--sigma", "0.01", "--output_dir", "x"]
    )
    assert (config.sigma, config.population_size, task.dataset_name) == (0.01, 8, "arithmetic")
    assert model.model_name_or_path == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_every_recipe_parses_with_its_script_parser():
    import sweep
    import train_es
    import train_grpo

    recipes = sorted(glob.glob(os.path.join(ROOT, "recipes", "*.yaml")))
    assert len(recipes) >= 12
    for path in recipes:
        if path.endswith("_grpo.yaml"):
            train_grpo.build_parser().parse_args_and_config(["--config", path, "--bf16", "false", "--use_cpu", "true"])
        else:
            train_es.build_parser().parse_args_and_config(["--config", path, "--output_dir", "x"])
            sweep.build_parser().parse_args_and_config(["--config", path, "--output_dir", "x"])


def test_simple_parser_suggests_the_closest_option_and_shows_defaults(capsys):
    parser = SimpleArgumentParser(description="Doc.\n\n    example command\n\nDetails.", prog="tool.py")
    parser.add_argument("--num_prompts", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="")
    assert parser.parse_args(["--num_prompts", "3"]).num_prompts == 3
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--num_promts", "3"])
    assert exit_info.value.code == USAGE_ERROR
    assert capsys.readouterr().err.splitlines()[0] == (
        "tool.py: error: unknown option on the command line: --num_promts (did you mean --num_prompts?)"
    )
    help_text = parser.format_help()
    assert "--num_prompts INT" in help_text and "(default: 16)" in help_text and "(default: 0)" in help_text
    assert "(default: '')" in help_text and "example command" in help_text and "Details." not in help_text
    assert closest_name("sigmaa", ["sigma", "sigmas"]) == "sigma" and closest_name("xyz", ["sigma"]) is None


@pytest.mark.slow
def test_accelerate_launch_quiet_keeps_the_error_to_the_script_message():
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    launcher = (accelerate, "launch", "--quiet", "--cpu", "--num_processes", "1", "--num_machines", "1",
                "--mixed_precision", "no", "--dynamo_backend", "no")  # fmt: skip
    proc = run_script("train_es.py", "--config", RECIPE, "--sigmaa", "0.1", launcher=launcher)
    assert proc.returncode == 1  # accelerate's simple launcher exits 1 for any failing child
    assert "Traceback" not in proc.stderr and "CalledProcessError" not in proc.stderr
    assert "unknown option on the command line: --sigmaa (did you mean --sigma?)" in proc.stderr
    assert "had defaults used instead" not in proc.stderr
