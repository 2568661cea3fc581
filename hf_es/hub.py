"""Hub uploads and secret redaction: one commit per push, retried on transient failures, never leaking the token.

[`push_checkpoint`] is how every hf_es push reaches the Hub (`ESTrainer.push_to_hub`, `hub_strategy` pushes);
[`describe_hub_error`] turns a failed push into one sentence that says which failure it was (Hub unreachable, no or
invalid token, no permission, missing repo) and that the local files are intact. [`redact`] and [`scrub_text`] keep
credentials out of everything hf_es writes (cards, drift statistics, training arguments, log and error messages).
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "PUSH_ALLOW_PATTERNS",
    "HubPushError",
    "describe_hub_error",
    "push_checkpoint",
    "redact",
    "scrub_file",
    "scrub_text",
]

_SECRET_KEY = re.compile(r"(^|_)(token|secret|password|passwd|api_key|apikey|credentials?|auth)$", re.IGNORECASE)
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
_REDACTED = "<redacted>"
_TEXT_SUFFIXES = (".json", ".md", ".txt", ".jinja", ".yaml", ".yml")

PUSH_ALLOW_PATTERNS: tuple[str, ...] = (
    "*.safetensors",
    "*.safetensors.index.json",
    "config.json",
    "adapter_config.json",
    "generation_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "chat_template.jinja",
    "*.model",
    "README.md",
    "drift_stats.json",
    "trainer_state.json",
    "es_state.json",
    "hf_es_lineage.json",
    "training_args.json",
    "*.png",
)
"""Files of a checkpoint folder that [`push_checkpoint`] uploads by default: weights, card, drift, trainer and ES state,
training lineage, the (redacted) training arguments and plots."""


class HubPushError(RuntimeError):
    """A push that failed for good; its message comes from [`describe_hub_error`] and never holds the token."""


# --------------------------------------------------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------------------------------------------------


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """Returns a copy of `value` without credentials.

    Mapping keys named like a credential (`hub_token`, `token`, `api_key`, `password`, ...) are dropped; strings shaped
    like a Hugging Face token (`hf_...`) or equal to / containing one of `secrets` become `<redacted>`.

    Args:
        value (`Any`): A JSON-like value (dicts, lists, scalars).
        secrets (`Iterable[str]`, *optional*): Literal strings to scrub (e.g. `args.hub_token`).
    """
    secrets = [s for s in secrets if s]
    if isinstance(value, Mapping):
        return {k: redact(v, secrets) for k, v in value.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, secrets) for v in value)
    if isinstance(value, str):
        return scrub_text(value, secrets)
    return value


def scrub_text(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` with every one of `secrets` and anything shaped like a Hugging Face token replaced by `<redacted>`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, _REDACTED)
    return _HF_TOKEN.sub(_REDACTED, text)


def scrub_file(path: str | Path, secrets: Sequence[str] = ()) -> None:
    """Rewrites the text file at `path` through [`scrub_text`] (left untouched when it holds no secret)."""
    path = Path(path)
    text = path.read_text()
    clean = scrub_text(text, secrets)
    if clean != text:
        path.write_text(clean)


# --------------------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------------------


def _status_code(error: BaseException) -> int | None:
    return getattr(getattr(error, "response", None), "status_code", None)


def _is_network_error(error: BaseException) -> bool:
    """Connection refused, DNS failure, timeout: the request never got an HTTP answer."""
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    # huggingface_hub's HTTP client (httpx / httpx2) raises its own TransportError family for these.
    return any(cls.__name__ in ("TransportError", "TimeoutException") for cls in type(error).__mro__)


def describe_hub_error(exc: BaseException, *, repo_id: str | None = None, local_dir: str | Path | None = None) -> str:
    """One sentence saying why a Hub call failed and what to do, ending with the fact that the local copy is intact.

    Args:
        exc (`BaseException`): The error raised by `huggingface_hub`.
        repo_id (`str`, *optional*): The repo the call was for (named in the message).
        local_dir (`str` or `Path`, *optional*): The local folder that was to be pushed (named in the message).

    Returns:
        `str`: e.g. `"Hub unreachable at https://huggingface.co (ConnectError: ...): check the network ..."`. The
        token never appears in it.
    """
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalTokenNotFoundError, OfflineModeIsEnabled, RepositoryNotFoundError

    repo = f" {repo_id}" if repo_id else ""
    detail = scrub_text(f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
    status = _status_code(exc)
    if isinstance(exc, OfflineModeIsEnabled):
        cause = "HF_HUB_OFFLINE=1 is set, so the Hub is not contacted: unset it to push"
    elif isinstance(exc, LocalTokenNotFoundError) or status == 401:
        cause = (
            f"No Hub token, or an invalid one ({detail}): log in with `hf auth login`, set HF_TOKEN, or pass hub_token"
        )
    elif status == 403:
        cause = f"The token has no write permission on the repo{repo} ({detail}): use a write token, or a repo you own"
    elif isinstance(exc, RepositoryNotFoundError) or status == 404:
        cause = f"The repo{repo} does not exist or is not visible to this token ({detail}): check hub_model_id"
    elif _is_network_error(exc):
        cause = f"Hub unreachable at {constants.ENDPOINT} ({detail}): check the network, proxy or HF_ENDPOINT"
    elif status is not None and (status >= 500 or status in (408, 429)):
        cause = f"The Hub answered HTTP {status} ({detail}), a server-side or rate-limit failure: push again later"
    else:
        cause = f"Pushing to the Hub{repo} failed ({detail})"
    where = f" in {local_dir}" if local_dir else ""
    return f"{cause}. The local copy{where} is intact; push it again later."


def _is_transient(error: BaseException) -> bool:
    """Worth a retry: the network, timeouts, HTTP 5xx / 408 / 429. Auth, permission, missing repo, invalid card and
    offline mode are not."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(error, (OfflineModeIsEnabled, ValueError)):
        return False
    status = _status_code(error)
    if status is not None:
        return status >= 500 or status in (408, 429)
    return True


# --------------------------------------------------------------------------------------------------------------------
# Upload
# --------------------------------------------------------------------------------------------------------------------


def _files_to_push(folder: Path, allow_patterns, ignore_patterns) -> list[str]:
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    return list(
        filter_repo_objects(
            sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()),
            allow_patterns=list(allow_patterns) if allow_patterns is not None else None,
            ignore_patterns=[*(ignore_patterns or ()), *DEFAULT_IGNORE_PATTERNS],
        )
    )


def push_checkpoint(
    folder: str | Path,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    path_in_repo: str | None = None,
    commit_message: str = "Upload ES checkpoint with model card and drift stats",
    allow_patterns: Sequence[str] | None = PUSH_ALLOW_PATTERNS,
    ignore_patterns: Sequence[str] | None = None,
    max_retries: int = 3,
    backoff_s: float = 2.0,
    api: Any = None,
) -> Any:
    r"""
    Uploads a checkpoint folder to the Hub in a single commit, retrying transient failures with exponential backoff.

    The files are sent with `HfApi.create_commit` (not `upload_folder`, which with `hf_xet` installed may split a folder
    into several commits), so the weights, the card, `drift_stats.json`, `trainer_state.json` and the plots always land
    together. `huggingface_hub` retries single HTTP requests (`http_backoff`) but not a whole repo-creation + commit
    sequence, hence the loop here. The local folder is never modified or deleted. Before uploading, every text file
    that would be sent is checked for the token (and anything shaped like one); if one is found the upload is refused
    with a `ValueError` naming the file, never the token. Failures a retry cannot fix (HTTP 401/403/404, invalid card
    metadata, `HF_HUB_OFFLINE=1`) are raised at once.

    Args:
        folder (`str` or `Path`): The checkpoint folder (written by `save_model` and the model card writer).
        repo_id (`str`): Target model repo, created if needed.
        token (`str`, *optional*): Hub token (defaults to the logged-in one).
        private (`bool`, *optional*): Visibility when the repo is created.
        revision (`str`, *optional*): Branch to commit to.
        path_in_repo (`str`, *optional*): Sub-folder of the repo (e.g. `"checkpoint-500"`).
        commit_message (`str`, *optional*): Commit message.
        allow_patterns (`Sequence[str]`, *optional*, defaults to `PUSH_ALLOW_PATTERNS`): Files to upload (`None`: all).
        ignore_patterns (`Sequence[str]`, *optional*): Files to skip.
        max_retries (`int`, *optional*, defaults to 3): Retries after the first failed attempt.
        backoff_s (`float`, *optional*, defaults to 2.0): First wait between attempts; doubles after each failure.
        api (`huggingface_hub.HfApi`, *optional*): Client to use (defaults to `HfApi(token=token)` on
            `huggingface_hub.constants.ENDPOINT`, i.e. `HF_ENDPOINT`).

    Returns:
        The `CommitInfo` of the upload.

    Raises:
        `HubPushError`: the push failed for good; the message is [`describe_hub_error`]'s (cause, local copy intact).
    """
    from huggingface_hub import CommitOperationAdd, HfApi

    folder = Path(folder)
    secrets = [token] if token else []
    files = _files_to_push(folder, allow_patterns, ignore_patterns)
    if not files:
        raise ValueError(f"Nothing to push: no file of {folder} matches the upload patterns.")
    for rel in files:  # refuse to publish a credential
        if Path(rel).suffix in _TEXT_SUFFIXES:
            text = (folder / rel).read_text(errors="ignore")
            if scrub_text(text, secrets) != text:
                raise ValueError(f"Refusing to upload {rel}: it contains a Hugging Face token.")

    prefix = (path_in_repo or "").strip("/")
    api = api if api is not None else HfApi(token=token, library_name="hf_es", library_version=_version())
    for attempt in range(max_retries + 1):
        try:
            api.create_repo(repo_id, token=token, private=private, exist_ok=True)
            operations = [
                CommitOperationAdd(
                    path_in_repo=f"{prefix}/{rel}" if prefix else rel, path_or_fileobj=str(folder / rel)
                )
                for rel in files
            ]  # fresh operations on every attempt: huggingface_hub refuses to reuse committed ones
            return api.create_commit(
                repo_id=repo_id, operations=operations, commit_message=commit_message, token=token, revision=revision
            )
        except Exception as error:
            if not _is_transient(error) or attempt >= max_retries:
                message = describe_hub_error(error, repo_id=repo_id, local_dir=folder)
                raise HubPushError(
                    scrub_text(
                        f"Pushing {folder} to {repo_id} failed after {attempt + 1} attempt(s): {message}", secrets
                    )
                ) from None
            wait = backoff_s * 2**attempt
            detail = scrub_text(f"{type(error).__name__}: {error}", secrets)
            logger.warning(
                f"Push to {repo_id} failed ({detail}); retrying in {wait:.1f}s ({attempt + 1}/{max_retries})."
            )
            time.sleep(wait)
    raise AssertionError("unreachable")  # the loop returns or raises


def _version() -> str:
    try:
        return importlib.metadata.version("hf_es")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
