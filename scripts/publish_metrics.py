# Copyright 2026 The hf_es Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
"""Publish hf_es's `pass_at_k` and `maj_at_k` metrics as Hub Spaces, so that anyone can `evaluate.load("NS/pass_at_k")`.

Each metric becomes the Gradio Space `<namespace>/<name>` that `evaluate` reads: the metric card `README.md` (with
the Space YAML header: `sdk: gradio`, `app_file: app.py`, `tags: [evaluate, metric]`), `app.py` (evaluate's standard
widget), `requirements.txt`, the metric script `<name>.py` and the helper modules it imports. One commit per Space.

    python scripts/publish_metrics.py --namespace my-org              # both metrics, token from `hf auth login`
    python scripts/publish_metrics.py --namespace my-org --metrics maj_at_k --private

`HF_ENDPOINT` selects another Hub (the tests use a local one).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.utils import HFValidationError, validate_repo_id

from hf_es.metrics.registration import AVAILABLE_METRICS, METRICS_DIR

SPACE_FILES = ("README.md", "app.py", "requirements.txt")


def space_files(name: str) -> dict[str, Path]:
    """
    The files of a metric's Space: card, app, requirements, the metric script and its helper modules.

    Args:
        name (`str`): `"pass_at_k"` or `"maj_at_k"`.

    Returns:
        `dict[str, Path]`: path in the Space -> local file.
    """
    folder = METRICS_DIR / name
    files = {file: folder / file for file in SPACE_FILES}
    files.update({path.name: path for path in sorted(folder.glob("*.py")) if path.name != "__init__.py"})
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"Metric folder {folder} is incomplete, missing: {', '.join(missing)}")
    return files


def publish_metric(api: HfApi, namespace: str, name: str, private: bool = False) -> str:
    """
    Create (or update) the Space `<namespace>/<name>` with one commit.

    Args:
        api (`HfApi`): the client (its endpoint and token are used).
        namespace (`str`): user or organisation.
        name (`str`): `"pass_at_k"` or `"maj_at_k"`.
        private (`bool`, *optional*, defaults to `False`): create the Space private (existing Spaces keep theirs).

    Returns:
        `str`: the commit URL.
    """
    repo_id = f"{namespace}/{name}"
    api.create_repo(repo_id, repo_type="space", space_sdk="gradio", private=private, exist_ok=True)
    operations = [
        CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(local)) for path, local in space_files(name).items()
    ]
    commit = api.create_commit(
        repo_id, operations, commit_message=f"Publish the {name} metric (hf_es)", repo_type="space"
    )
    return commit.commit_url


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Publish hf_es's evaluate metrics as Hub Spaces <namespace>/<metric>.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--namespace", required=True, help="Hub user or organisation that will own the Spaces.")
    parser.add_argument(
        "--metrics", nargs="+", default=list(AVAILABLE_METRICS), help="Metrics to publish (pass_at_k, maj_at_k)."
    )
    parser.add_argument("--private", action="store_true", help="Create the Spaces as private.")
    parser.add_argument("--token", default=None, help="Hub token; None uses HF_TOKEN or the `hf auth login` token.")
    args = parser.parse_args(argv)
    unknown = [name for name in args.metrics if name not in AVAILABLE_METRICS]
    if unknown:
        parser.error(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(AVAILABLE_METRICS)}")
    if "/" in args.namespace:
        parser.error(f"--namespace is a user or organisation name without '/', got {args.namespace!r}")
    try:
        validate_repo_id(f"{args.namespace}/pass_at_k")
    except HFValidationError as error:
        parser.error(f"--namespace {args.namespace!r} does not make a valid Space id: {error}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    api = HfApi(token=args.token)
    for name in args.metrics:
        url = publish_metric(api, args.namespace, name, private=args.private)
        print(f"{args.namespace}/{name}: {url}  (evaluate.load({f'{args.namespace}/{name}'!r}))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
