"""The README and the pages in docs/: every relative link resolves, and the README stays a front door."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Fenced blocks and inline code hold commands, not links (`[--sigmas ...]` is an option list).
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    return _CODE.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    heading = heading.replace("`", "").strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading))


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        slug = base = _slug(heading)
        count = 0
        while slug in anchors:  # GitHub numbers repeated headings: name, name-1, name-2, ...
            count += 1
            slug = f"{base}-{count}"
        anchors.add(slug)
    return anchors


def broken_links(page: Path) -> list[str]:
    """The relative links of a Markdown page whose file, or whose heading anchor in a Markdown file, does not exist.

    Args:
        page: The Markdown file.

    Returns:
        One `target: reason` line per broken link, in page order.
    """
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...: not checked offline
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading with that anchor")
    return broken


def test_slug_matches_github_anchors():
    assert _slug("One ES step, in words") == "one-es-step-in-words"
    assert _slug("Pass@K and Maj@K after training") == "passk-and-majk-after-training"
    assert _slug("The `pass_at_k` and `maj_at_k` metrics") == "the-pass_at_k-and-maj_at_k-metrics"
    assert _slug("`python -m bench`") == "python--m-bench"


def test_broken_links_are_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Present heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#present-heading) [gone](missing.md) [bad anchor](other.md#absent) [self](#nowhere)\n"
        "[web](https://example.com/x) `[code](missing.md)`\n```\n[fenced](missing.md)\n```\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#absent: no heading with that anchor",
        "#nowhere: no heading with that anchor",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # The two first-screen commands (`.ci/run` runs the second one).
    assert "bash scripts/demo_cpu.sh" in readme and "bash scripts/run_tests.sh" in readme
    assert "from hf_es import ESConfig, ESTrainer" in readme
    assert len(readme.splitlines()) <= 150
    # Module ownership has one table, in docs/ARCHITECTURE.md.
    assert not re.search(r"^\|\s*`hf_es/", readme, re.MULTILINE)
    assert re.search(r"^\|\s*`hf_es/scoring/`", (ROOT / "docs" / "ARCHITECTURE.md").read_text(), re.MULTILINE)
