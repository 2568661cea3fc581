"""The run guard (tests/run_guard.py): a run with an unexpected skip, an xfail or a named empty file is not green."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from run_guard import ALLOWED_SKIPS, AllowedSkip, _vllm_not_installed, is_allowed_skip

DOCS = Path(__file__).resolve().parents[1] / "docs" / "TESTING.md"
CUDA_REASON = "torch.randn on CUDA and CPU draw different values; only the table is device-independent."


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "run_guard", *args)


def test_a_skip_whose_reason_is_not_allowed_fails_the_run_and_is_named(pytester):
    pytester.makepyfile("import pytest\ndef test_a(): pytest.skip('optional thing missing')\ndef test_b(): pass\n")
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*unexpected skips*", "*::test_a: optional thing missing"])


def test_an_allowed_skip_keeps_the_run_green(pytester):
    pytester.makepyfile(f"import pytest\ndef test_a(): pytest.skip({CUDA_REASON!r})\ndef test_b(): pass\n")
    assert _run(pytester).ret == pytest.ExitCode.OK


def test_a_module_skipped_at_collection_fails_the_run(pytester):
    pytester.makepyfile(test_mod="import pytest\npytest.importorskip('no_such_module_hf_es')\ndef test_a(): pass\n")
    result = _run(pytester, "test_mod.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*unexpected skips*", "test_mod.py: could not import 'no_such_module_hf_es'*"])


def test_vllm_missing_fails_where_vllm_is_required(pytester, monkeypatch):
    monkeypatch.setenv("HF_ES_REQUIRE_VLLM", "1")
    pytester.makepyfile(test_vllm="import pytest\npytest.skip('vLLM is not installed', allow_module_level=True)\n")
    assert _run(pytester, "test_vllm.py").ret == pytest.ExitCode.TESTS_FAILED


def test_vllm_missing_is_allowed_only_where_it_cannot_be_found(monkeypatch):
    monkeypatch.delenv("HF_ES_REQUIRE_VLLM", raising=False)
    assert _vllm_not_installed() == (importlib.util.find_spec("vllm") is None)
    monkeypatch.setenv("HF_ES_REQUIRE_VLLM", "1")
    assert not _vllm_not_installed() and not is_allowed_skip("vLLM is not installed (CPU: ...)")


def test_allowed_skips_match_by_prefix_and_condition():
    entries = (AllowedSkip("A reason", lambda: True, ""), AllowedSkip("Elsewhere only", lambda: False, ""))
    assert is_allowed_skip("A reason, with detail", entries)
    assert not is_allowed_skip("Elsewhere only", entries)
    assert not is_allowed_skip("another reason", entries)


def test_xfail_and_xpass_fail_the_run(pytester):
    pytester.makepyfile(
        "import pytest\n@pytest.mark.xfail(reason='known bug')\ndef test_a(): assert False\n"
        "@pytest.mark.xfail(reason='stale')\ndef test_b(): pass\n"
    )
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*::test_a: xfail: known bug", "*::test_b: xfail: stale"])


def test_a_named_file_with_no_test_fails_the_run(pytester):
    pytester.makepyfile(test_empty="def helper(): pass\n", test_full="def test_a(): pass\n")
    result = _run(pytester, "test_empty.py", "test_full.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*no test collected*", "test_empty.py"])
    # Deselecting with -m or -k is asked for: the tests were collected.
    assert _run(pytester, "test_empty.py", "test_full.py", "-k", "nothing").ret != pytest.ExitCode.OK
    assert _run(pytester, "test_full.py", "-k", "test_a").ret == pytest.ExitCode.OK


def test_docs_state_the_same_allowed_skips():
    text = DOCS.read_text()
    section = text.split("## Allowed skips", 1)[1].split("\n## ", 1)[0]
    stated = re.findall(r'^- "([^"]+)"', section, flags=re.M)
    assert stated == [entry.reason for entry in ALLOWED_SKIPS]
