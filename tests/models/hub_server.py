"""A loopback stand-in for the Hugging Face Hub: the HTTP calls huggingface_hub 2.4 makes to fetch a model
(snapshot_download) and to upload one (create_repo, create_branch, upload_folder), and nothing more.

    GET  /api/models/{repo}/revision/{rev}         repo_info: the commit a branch / tag / commit names
    GET  /api/models/{repo}/tree/{commit}          list_repo_tree (recursive): path, size, oid of each file
    HEAD /{repo}/resolve/{commit}/{path}           file metadata: X-Repo-Commit, ETag, Content-Length
    GET  /{repo}/resolve/{commit}/{path}           the bytes (or, for a path in `truncate`, half of them)
    POST /api/validate-yaml                        the model card's metadata, checked before an upload
    POST /api/repos/create                         create_repo
    POST /api/models/{repo}/branch/{branch}        create_branch
    POST /api/models/{repo}/preupload/{rev}        every file uploads inline ("regular"), so no LFS / Xet
    POST /api/models/{repo}/commit/{rev}           the commit: ndjson of a header and base64 files

Errors carry the X-Error-Code huggingface_hub maps to its exceptions (RepoNotFound, RevisionNotFound,
EntryNotFound). Every request is recorded in `requests` as (method, path).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


@dataclass
class Repo:
    """A model repository: commits (sha -> {path: bytes}) and refs (branch or tag -> sha)."""

    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    private: bool = False

    def commit(self, files: dict[str, bytes], branch: str = "main") -> str:
        """Add a commit holding `files` (the whole tree) on `branch`; returns its sha."""
        sha = hashlib.sha1(repr(sorted(files.items())).encode() + str(len(self.commits)).encode()).hexdigest()
        self.commits[sha], self.refs[branch] = dict(files), sha
        return sha

    def resolve(self, rev: str) -> str | None:
        return rev if rev in self.commits else self.refs.get(rev)


def folder_files(folder: str | Path) -> dict[str, bytes]:
    """{relative path: bytes} of every file under `folder`."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class HubServer(ThreadingHTTPServer):
    """The stand-in Hub on 127.0.0.1 (a free port); `url` is its endpoint, `repos` its repositories by id."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.repos: dict[str, Repo] = {}
        self.truncate: set[str] = set()  # "repo/path" whose downloads break off half-way
        self.requests: list[tuple[str, str]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    server: HubServer

    def log_message(self, *args) -> None:  # quiet
        pass

    def reply(self, status: int, body: bytes | dict | list = b"", headers: dict | None = None, length: int | None = None):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status: int, code: str, message: str):
        self.reply(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def parts(self) -> list[str]:
        self.server.requests.append((self.command, urlparse(self.path).path))
        return [unquote(p) for p in urlparse(self.path).path.strip("/").split("/")]

    def repo(self, org: str, name: str) -> Repo | None:
        repo = self.server.repos.get(f"{org}/{name}")
        if repo is None:
            self.error(404, "RepoNotFound", f"Repository {org}/{name} not found")
        return repo

    def commit_of(self, repo: Repo, rev: str) -> str | None:
        sha = repo.resolve(rev)
        if sha is None:
            self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return sha

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        p = self.parts()
        if p[:2] == ["api", "models"] and len(p) >= 6 and p[4] in ("revision", "tree"):
            repo = self.repo(p[2], p[3])
            sha = repo and self.commit_of(repo, p[5])
            if sha is None:
                return
            files = repo.commits[sha]
            if p[4] == "revision":
                return self.reply(200, {"id": f"{p[2]}/{p[3]}", "sha": sha, "private": repo.private,
                                        "siblings": [{"rfilename": f} for f in files]})
            return self.reply(200, [{"type": "file", "path": f, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                                    for f, b in files.items()])
        if len(p) >= 5 and p[2] == "resolve":
            repo = self.repo(p[0], p[1])
            sha = repo and self.commit_of(repo, p[3])
            if sha is None:
                return
            path = "/".join(p[4:])
            if path not in repo.commits[sha]:
                return self.error(404, "EntryNotFound", f"{path} does not exist at {sha}")
            data = repo.commits[sha][path]
            headers = {"X-Repo-Commit": sha, "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}
            if f"{p[0]}/{p[1]}/{path}" in self.server.truncate and self.command == "GET":
                self.reply(200, data[: len(data) // 2], headers, length=len(data))
                self.close_connection = True  # the connection drops half-way through
                return
            return self.reply(200, data, headers)
        self.error(404, "NotFound", f"no route for GET {self.path}")

    def do_POST(self):
        p = self.parts()
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if p == ["api", "validate-yaml"]:  # the README's metadata block, checked before a commit
            return self.reply(200, {"errors": [], "warnings": []})
        if p == ["api", "repos", "create"]:
            spec = json.loads(body)
            repo_id = f"{spec['organization']}/{spec['name']}" if spec.get("organization") else spec["name"]
            private = spec.get("visibility", "private" if spec.get("private") else "public") == "private"
            self.server.repos.setdefault(repo_id, Repo(private=private))
            return self.reply(200, {"url": f"{self.server.url}/{repo_id}", "name": repo_id})
        if p[:2] != ["api", "models"] or len(p) < 6:
            return self.error(404, "NotFound", f"no route for POST {self.path}")
        repo = self.repo(p[2], p[3])
        if repo is None:
            return
        if p[4] == "branch":
            repo.refs.setdefault(p[5], repo.refs.get("main", ""))
            return self.reply(200, {})
        if p[4] == "preupload":
            return self.reply(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                              for f in json.loads(body)["files"]]})
        if p[4] == "commit":
            parent = repo.resolve(p[5])
            files = dict(repo.commits.get(parent, {})) if parent else {}
            for line in body.decode().splitlines():
                entry = json.loads(line)
                if entry["key"] == "file":
                    files[entry["value"]["path"]] = base64.b64decode(entry["value"]["content"])
            sha = repo.commit(files, branch=p[5])
            return self.reply(200, {"commitUrl": f"{self.server.url}/{p[2]}/{p[3]}/commit/{sha}", "commitOid": sha,
                                    "pullRequestUrl": None})
        self.error(404, "NotFound", f"no route for POST {self.path}")
