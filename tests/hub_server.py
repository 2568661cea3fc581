"""A local HTTP server that speaks just enough of the Hugging Face Hub API for `huggingface_hub`'s uploads.

It implements the endpoints that `HfApi.create_repo`, `HfApi.upload_folder` and `HfApi.create_commit` call:

- `POST /api/repos/create`: creates (or finds) a repo;
- `POST /api/validate-yaml`: parses the README's YAML front matter (400 with an error when it does not parse);
- `POST /api/{type}s/{repo_id}/preupload/{revision}`: answers `"regular"` for every file, so their contents arrive
  base64-encoded inline in the commit payload (no LFS, no Xet, no second storage endpoint);
- `POST /api/{type}s/{repo_id}/commit/{revision}`: decodes the NDJSON commit and stores its files;
- `GET /api/{type}s/{repo_id}[/revision/{revision}]`: minimal repo info (used by the client for empty commits);
- `GET`/`HEAD /[{type}s/]{repo_id}/resolve/main/{path}`: the raw file (what `evaluate.load("ns/name")` downloads).

Every request (method, path, headers, body) is recorded so a test can check where a token travels, and the first
`fail_commits` commit attempts can be answered with HTTP 500 to exercise retries.

Example:

```python
>>> with LocalHub() as hub:
...     monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.endpoint)
...     HfApi(endpoint=hub.endpoint).upload_folder(repo_id="me/model", folder_path="out")
...     hub.commits[-1].files["config.json"]
```
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

__all__ = ["Commit", "LocalHub", "Request"]

_REPO_API = re.compile(
    r"^/api/(models|datasets|spaces)/(?P<repo>[^/]+/[^/]+|[^/]+)/(?P<op>preupload|commit)/(?P<rev>.+)$"
)
_RESOLVE = re.compile(r"^/(?:(?P<type>spaces|datasets)/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_REPO_INFO = re.compile(r"^/api/(models|datasets|spaces)/(?P<repo>[^/]+/[^/]+|[^/]+?)(/revision/(?P<rev>.+))?$")


@dataclass
class Request:
    """One HTTP request received by the server."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Commit:
    """One successful commit: its repo, revision, message and `{path_in_repo: bytes}` of the files it added."""

    repo_id: str
    revision: str
    summary: str
    oid: str
    files: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)


class LocalHub:
    r"""
    A fake Hub endpoint on `127.0.0.1` served from a background thread; use it as a context manager.

    Args:
        fail_commits (`int`, *optional*, defaults to 0): Number of commit attempts to answer with HTTP 500 before
            accepting commits. Can be changed later through the attribute of the same name.

    Attributes:
        endpoint (`str`): The base URL to give `HfApi(endpoint=...)` / `HF_ENDPOINT`.
        commits (`list[Commit]`): The accepted commits, in order.
        requests (`list[Request]`): Every request received, in order.
        failed_commits (`int`): How many commit attempts were refused with HTTP 500.
        repos (`dict[str, dict[str, bytes]]`): Current files of each repo (all commits applied).
    """

    def __init__(self, fail_commits: int = 0) -> None:
        self.fail_commits = fail_commits
        self.failed_commits = 0
        self.commits: list[Commit] = []
        self.requests: list[Request] = []
        self.repos: dict[str, dict[str, bytes]] = {}
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return None

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _reply(self, status: int, payload: Any, head: bool = False) -> None:
                raw = isinstance(payload, bytes)  # a file download; anything else is a JSON answer
                data = payload if raw else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream" if raw else "application/json")
                if raw:
                    self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            def _handle(self, method: str) -> None:
                body = self._body() if method == "POST" else b""
                path = unquote(urlsplit(self.path).path)
                with hub._lock:
                    hub.requests.append(Request(method, self.path, dict(self.headers.items()), body))
                try:
                    status, payload = hub._route(method, path, body)
                except Exception as error:  # a bug in the fake must show up as a failed request, not a hang
                    status, payload = 500, {"error": f"{type(error).__name__}: {error}"}
                self._reply(status, payload, head=method == "HEAD")

            def do_GET(self) -> None:
                self._handle("GET")

            def do_HEAD(self) -> None:
                self._handle("HEAD")

            def do_POST(self) -> None:
                self._handle("POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-hub", daemon=True)

    # ------------------------------------------------------------------------------------------------------------
    def __enter__(self) -> LocalHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def patch(self, monkeypatch: Any) -> None:
        """Points `huggingface_hub` at this server for one test, as `HF_ENDPOINT` would at import time.

        Sets the `HF_ENDPOINT` environment variable and `huggingface_hub.constants.ENDPOINT` (read by every `HfApi()`
        created without `endpoint=`), turns the test suite's `HF_HUB_OFFLINE=1` off, and disables Xet
        (`HF_HUB_DISABLE_XET`), so nothing can try to reach another storage backend.
        """
        from huggingface_hub import constants

        monkeypatch.setenv("HF_ENDPOINT", self.endpoint)
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.setattr(constants, "ENDPOINT", self.endpoint)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)

    # ------------------------------------------------------------------------------------------------------------
    def _route(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if method == "POST" and path == "/api/repos/create":
            request = json.loads(body)
            repo_id = "/".join(p for p in (request.get("organization"), request["name"]) if p)
            with self._lock:
                self.repos.setdefault(repo_id, {})
            return 200, {"url": f"{self.endpoint}/{repo_id}", "name": repo_id, "id": repo_id}
        if method == "POST" and path == "/api/validate-yaml":
            content = json.loads(body)["content"]
            match = re.match(r"^---\s*\n(.*?)\n---\s*\n", content, re.DOTALL)
            try:
                if match:
                    yaml.safe_load(match.group(1))
            except yaml.YAMLError as error:
                return 400, {"errors": [{"message": str(error)}]}
            return 200, {"warnings": []} if match else {"warnings": [{"message": "empty or missing yaml metadata"}]}
        match = _REPO_API.match(path)
        if method == "POST" and match:
            repo_id, revision = match.group("repo"), match.group("rev")
            if repo_id not in self.repos:
                return 404, {"error": f"Repository {repo_id} not found"}
            if match.group("op") == "preupload":
                files = json.loads(body)["files"]
                return 200, {
                    "files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None} for f in files
                    ]
                }
            return self._commit(repo_id, revision, body)
        match = _RESOLVE.match(path)
        if method in ("GET", "HEAD") and match and match.group("rev") == "main":
            content = self.repos.get(match.group("repo"), {}).get(match.group("file"))
            if content is not None:
                return 200, content
        match = _REPO_INFO.match(path)
        if method == "GET" and match and match.group("repo") in self.repos:
            repo_id = match.group("repo")
            sha = next((c.oid for c in reversed(self.commits) if c.repo_id == repo_id), "0" * 40)
            siblings = [{"rfilename": name} for name in sorted(self.repos[repo_id])]
            return 200, {"id": repo_id, "sha": sha, "siblings": siblings, "private": False}
        return 404, {"error": f"Not implemented by the local hub: {method} {path}"}

    def _commit(self, repo_id: str, revision: str, body: bytes) -> tuple[int, Any]:
        with self._lock:
            if self.failed_commits < self.fail_commits:
                self.failed_commits += 1
                return 500, {"error": "Internal Error (simulated by the local hub)"}
        summary, files, deleted = "", {}, []
        for line in body.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                summary = value.get("summary", "")
            elif key == "file":
                if value.get("encoding") != "base64":
                    return 400, {"error": f"unsupported encoding {value.get('encoding')!r}"}
                files[value["path"]] = base64.b64decode(value["content"])
            elif key in ("deletedFile", "deletedFolder"):
                deleted.append(value["path"])
            else:  # lfsFile / copies: the preupload answer never asks for them
                return 400, {"error": f"unexpected commit operation {key!r}"}
        oid = hashlib.sha1(body).hexdigest()
        with self._lock:
            state = self.repos[repo_id]
            for path in deleted:
                for name in [n for n in state if n == path or n.startswith(path.rstrip("/") + "/")]:
                    del state[name]
            state.update(files)
            self.commits.append(Commit(repo_id, revision, summary, oid, files, deleted))
        return 200, {"commitUrl": f"{self.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}
