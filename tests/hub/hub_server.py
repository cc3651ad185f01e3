"""A Hub-compatible HTTP server for the tests, on 127.0.0.1 (stdlib http.server, one thread per request).

It implements what huggingface_hub 2.4 and transformers 5.23 really call (found by reading their
sources and by logging requests; unknown requests are logged in `HubServer.unhandled` and get 404):

    GET  /api/whoami-v2                                   the token's user
    POST /api/repos/create                                create a repo (initial commit with .gitattributes)
    POST /api/validate-yaml                               README metadata check (create_commit sends it)
    GET  /api/models/{repo}[/revision/{rev}]              repo info (sha, siblings)
    GET  /api/models/{repo}/tree/{rev}[/{path}]           file listing (list_repo_files)
    POST /api/models/{repo}/paths-info/{rev}              file info
    POST /api/models/{repo}/branch/{branch}               create a branch
    POST /api/models/{repo}/preupload/{rev}               regular or LFS/Xet per file, remote oids
    POST /{repo}.git/info/lfs/objects/batch               LFS batch API -> upload/verify actions
    PUT  /_lfs/objects/{sha256}, POST /_lfs/verify        LFS storage (sha256 and size checked)
    GET  /api/models/{repo}/xet-{read,write}-token/{rev}  Xet token: the CAS is `local://DIR`
    POST /api/models/{repo}/commit/{rev}[?create_pr=1]    the commit, NDJSON (header, file, lfsFile, deleted*)
    HEAD/GET /{repo}/resolve/{rev}/{path}                 download (X-Repo-Commit, ETag, X-Linked-*, X-Xet-Hash)

Xet: the write token points hf_xet at a `local://` storage folder. At commit time an `lfsFile` must
name content that was really uploaded: an LFS object, or a file recorded in the Xet shards of that
folder (parsed here: MDB shard v2, file info section with its sha256 metadata extension). Downloads
of Xet files announce `X-Xet-Hash` (clients with hf_xet fetch from the local CAS); a plain GET is
served by reconstructing the file with hf_xet.

Faults can be injected (`fail(method, path_regex, status, times)`), and `stats()` counts repos,
commits and stored blobs. Private repos are readable by their owner only.
"""

import base64
import hashlib
import json
import re
import struct
import threading
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_THRESHOLD = 10 * 1024 * 1024
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".onnx", ".model", ".msgpack", ".npz",
                ".npy", ".pkl", ".pickle", ".zip", ".gz", ".tar", ".png", ".jpg", ".jpeg")
GITATTRIBUTES = "".join(f"*{s} filter=lfs diff=lfs merge=lfs -text\n" for s in LFS_SUFFIXES).encode()
HEX40 = re.compile(r"^[0-9a-f]{40}$")


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


# ----------------------------------------------------------------------------------------------
# Xet shards (MDB v2): which uploaded file has which sha256
# ----------------------------------------------------------------------------------------------

_SHARD_HEADER = 48
_ENTRY = 48
_FLAG_VERIFICATION = 0x80000000
_FLAG_METADATA_EXT = 0x40000000


def _merkle_hex(raw: bytes) -> str:
    """xet-core prints a 32-byte hash as four little-endian u64, each as 16 hex digits."""
    return "".join(f"{v:016x}" for v in struct.unpack("<4Q", raw))


def parse_shard(data: bytes) -> dict[str, tuple[str, int]]:
    """{sha256: (xet file hash, size)} for the files recorded in one shard."""
    files = {}
    pos = _SHARD_HEADER
    while pos + _ENTRY <= len(data):
        file_hash = data[pos:pos + 32]
        if file_hash == b"\xff" * 32:  # bookend: end of the file info section
            break
        flags, num_entries = struct.unpack_from("<II", data, pos + 32)
        pos += _ENTRY
        size = sum(struct.unpack_from("<I", data, pos + i * _ENTRY + 36)[0] for i in range(num_entries))
        pos += num_entries * _ENTRY
        if flags & _FLAG_VERIFICATION:
            pos += num_entries * _ENTRY
        if flags & _FLAG_METADATA_EXT:
            files[_merkle_hex(data[pos:pos + 32])] = (_merkle_hex(file_hash), size)
            pos += _ENTRY
    return files


# ----------------------------------------------------------------------------------------------
# Repositories
# ----------------------------------------------------------------------------------------------

@dataclass
class Entry:
    size: int
    data: bytes | None = None  # regular files
    sha256: str | None = None  # LFS / Xet files
    xet_hash: str | None = None

    @property
    def is_lfs(self) -> bool:
        return self.sha256 is not None

    @property
    def oid(self) -> str:
        """The git blob oid (of the content, or of the LFS pointer)."""
        return git_blob_oid(lfs_pointer(self.sha256, self.size) if self.is_lfs else self.data)


@dataclass
class Commit:
    oid: str
    parent: str | None
    message: str
    files: dict[str, Entry]
    created: float = field(default_factory=time.time)


@dataclass
class Repo:
    repo_id: str
    owner: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  # "main", other branches, "refs/pr/N" -> commit oid
    prs: int = 0


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


class HubState:
    def __init__(self, storage: Path, tokens: dict[str, str]):
        self.lock = threading.RLock()
        self.storage = Path(storage)
        self.xet_dir = self.storage / "xet-cas"
        self.xet_dir.mkdir(parents=True, exist_ok=True)
        self.tokens = dict(tokens)  # token -> user name
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.xet_index: dict[str, tuple[str, int]] = {}
        self.xet_cache: dict[str, bytes] = {}
        self.faults: list[dict] = []
        self.requests: list[tuple[str, str, int]] = []
        self.unhandled: list[tuple[str, str]] = []

    # -- queries ----------------------------------------------------------------------------------
    def repo(self, repo_id: str, user: str | None, write: bool = False) -> Repo:
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and user != repo.owner):
            raise HubError(404 if user else 401, "Repository not found", "RepoNotFound")
        if write and user != repo.owner:
            raise HubError(403, f"You don't have the rights to write to {repo_id}")
        return repo

    def commit(self, repo: Repo, revision: str) -> Commit:
        revision = unquote(revision)
        oid = repo.refs.get(revision) or (revision if revision in repo.commits else None)
        if oid is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo.commits[oid]

    def xet_lookup(self, sha256: str) -> tuple[str, int] | None:
        if sha256 not in self.xet_index:
            for shard in self.xet_dir.rglob("*.mdb"):
                self.xet_index.update(parse_shard(shard.read_bytes()))
        return self.xet_index.get(sha256)

    def xet_content(self, entry: Entry) -> bytes:
        """The bytes of a Xet-stored file, reconstructed from the local CAS with hf_xet."""
        if entry.sha256 not in self.xet_cache:
            import tempfile

            import hf_xet

            session = hf_xet.XetSession()
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "file"
                with session.new_file_download_group(endpoint=f"local://{self.xet_dir}", token="local",
                                                     token_expiry_unix_secs=int(time.time()) + 3600) as group:
                    group.start_download_file(hf_xet.XetFileInfo(entry.xet_hash, entry.size), str(out))
                self.xet_cache[entry.sha256] = out.read_bytes()
        return self.xet_cache[entry.sha256]

    def stats(self) -> dict:
        with self.lock:
            regular = {e.oid for r in self.repos.values() for c in r.commits.values() for e in c.files.values()
                       if not e.is_lfs}
            xorbs = [p for p in self.xet_dir.rglob("*") if p.is_file() and p.parent.name == "xorbs"
                     and not p.name.endswith(".tagset")]
            return {
                "repos": sorted(self.repos),
                "commits": {r.repo_id: len(r.commits) for r in self.repos.values()},
                "refs": {r.repo_id: dict(r.refs) for r in self.repos.values()},
                "files": {r.repo_id: {ref: sorted(r.commits[oid].files) for ref, oid in r.refs.items()}
                          for r in self.repos.values()},
                "private": {r.repo_id: r.private for r in self.repos.values()},
                "lfs_objects": len(self.lfs),
                "regular_blobs": len(regular),
                "xorbs": len(xorbs),
                "blobs": len(regular) + len(self.lfs) + len(xorbs),
            }

    # -- changes ----------------------------------------------------------------------------------
    def create_repo(self, repo_id: str, owner: str, private: bool) -> Repo:
        repo = Repo(repo_id, owner, private)
        files = {".gitattributes": Entry(size=len(GITATTRIBUTES), data=GITATTRIBUTES)}
        self._add_commit(repo, None, "initial commit", files, "main")
        self.repos[repo_id] = repo
        return repo

    def _add_commit(self, repo: Repo, parent: str | None, message: str, files: dict[str, Entry], ref: str) -> Commit:
        digest = hashlib.sha1(json.dumps([parent, message, time.time_ns(),
                                          sorted((p, e.oid) for p, e in files.items())]).encode())
        commit = Commit(digest.hexdigest(), parent, message, files)
        repo.commits[commit.oid] = commit
        repo.refs[ref] = commit.oid
        return commit


# ----------------------------------------------------------------------------------------------
# HTTP
# ----------------------------------------------------------------------------------------------

ROUTES = []


def route(method: str, pattern: str):
    def register(func):
        ROUTES.append((method, re.compile("^" + pattern + "$"), func))
        return func
    return register


REPO = r"(?P<repo>[^/]+/[^/]+?)"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "HubServer"

    def log_message(self, format, *args):  # quiet
        pass

    def send_error(self, code, message=None, explain=None):
        """Errors raised by http.server itself (malformed requests): recorded for the tests to see."""
        request_line = str(getattr(self, "raw_requestline", b"")[:200])
        self.server.state.unhandled.append(("HTTP", request_line, f"{code} {message}"))
        super().send_error(code, message, explain)

    # -- plumbing ---------------------------------------------------------------------------------
    @property
    def state(self) -> HubState:
        return self.server.state

    @property
    def endpoint(self) -> str:
        return self.server.url

    def body(self) -> bytes:
        if "_body" not in self.__dict__:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        break
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                self._body = b"".join(chunks)
            else:
                self._body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return self._body

    def json_body(self):
        try:
            return json.loads(self.body() or b"{}")
        except ValueError:
            raise HubError(400, "invalid JSON body") from None

    def user(self, required: bool = False) -> str | None:
        auth = self.headers.get("Authorization", "")
        if not auth:
            if required:
                raise HubError(401, "You must be authenticated to do this")
            return None
        token = auth.removeprefix("Bearer ").strip()
        user = self.state.tokens.get(token)
        if user is None:
            raise HubError(401, "Invalid credentials in Authorization header")
        return user

    def send(self, status: int, body=b"", headers: dict | None = None, content_type="application/json"):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.state.requests.append((self.command, self.path, status))

    def dispatch(self):
        self.__dict__.pop("_body", None)  # one handler serves every request of a keep-alive connection
        path = urlsplit(self.path).path
        try:
            fault = self.server.take_fault(self.command, self.path)
            if fault is not None:
                self.body()
                raise HubError(fault["status"], fault.get("message", "injected server error"))
            for method, pattern, func in ROUTES:
                match = pattern.match(path)
                if match and (method == self.command or (method == "GET" and self.command == "HEAD")):
                    args = {k: None if v is None else unquote(v) for k, v in match.groupdict().items()}
                    with self.state.lock:
                        return func(self, **args)
            self.state.unhandled.append((self.command, self.path))
            raise HubError(404, f"no such endpoint: {self.command} {path}")
        except HubError as err:
            headers = dict(err.headers)
            headers["X-Error-Message"] = err.message
            if err.code:
                headers["X-Error-Code"] = err.code
            self.send(err.status, {"error": err.message}, headers)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as err:  # a bug in the server: show it in the response and the log
            self.state.unhandled.append((self.command, self.path, traceback.format_exc()))
            self.send(500, {"error": f"test server error: {err!r}"})

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = dispatch

    # -- helpers ----------------------------------------------------------------------------------
    def query(self) -> dict[str, str]:
        return {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}

    def file_info(self, path: str, entry: Entry, expand: bool = False) -> dict:
        info = {"type": "file", "path": path, "size": entry.size, "oid": entry.oid}
        if entry.is_lfs:
            info["lfs"] = {"oid": entry.sha256, "size": entry.size, "pointerSize": len(lfs_pointer(entry.sha256,
                                                                                                   entry.size))}
        if entry.xet_hash:
            info["xetHash"] = entry.xet_hash
        return info


# -- account and repos ----------------------------------------------------------------------------

@route("GET", r"/api/whoami-v2")
def whoami(h: Handler):
    user = h.user(required=True)
    h.send(200, {"type": "user", "id": user, "name": user, "fullname": user, "orgs": [],
                 "auth": {"type": "access_token", "accessToken": {"displayName": "tests", "role": "write"}}})


@route("GET", r"/api/agent-harnesses")
def agent_harnesses(h: Handler):
    h.send(200, {"standardEnvVars": [], "harnesses": {}})  # huggingface_hub asks once a day


@route("POST", r"/api/repos/create")
def create_repo(h: Handler):
    user = h.user(required=True)
    payload = h.json_body()
    name, namespace = payload.get("name"), payload.get("organization") or user
    if payload.get("type", "model") not in (None, "model"):
        raise HubError(400, "only model repos are supported by the test server")
    if not name or not re.fullmatch(r"[\w.-]+", name):
        raise HubError(400, f"invalid repo name {name!r}")
    if namespace != user:
        raise HubError(403, f"You don't have the rights to create a model under the namespace {namespace}")
    repo_id = f"{namespace}/{name}"
    if repo_id in h.state.repos:  # the Hub answers 409 with the repo's url (create_repo(exist_ok=True) reads it)
        h.send(409, {"error": "You already created this model repo", "url": f"{h.endpoint}/{repo_id}"},
               {"X-Error-Message": "You already created this model repo"})
        return
    h.state.create_repo(repo_id, user, payload.get("visibility") == "private" or bool(payload.get("private")))
    h.send(200, {"url": f"{h.endpoint}/{repo_id}", "name": repo_id, "id": repo_id})


@route("POST", r"/api/validate-yaml")
def validate_yaml(h: Handler):
    import yaml

    content = h.json_body().get("content", "")
    match = re.match(r"^---\n(.*?)\n---", content, flags=re.DOTALL)
    if match:
        try:
            metadata = yaml.safe_load(match.group(1))
        except yaml.YAMLError as err:
            raise HubError(400, f"Invalid YAML metadata: {err}") from None
        if metadata is not None and not isinstance(metadata, dict):
            raise HubError(400, "YAML metadata must be a mapping")
    h.send(200, {"errors": [], "warnings": []})


@route("GET", r"/api/models/" + REPO + r"(?:/revision/(?P<revision>.+))?")
def repo_info(h: Handler, repo: str, revision: str | None):
    r = h.state.repo(repo, h.user())
    commit = h.state.commit(r, revision or "main")
    h.send(200, {"id": repo, "modelId": repo, "author": r.owner, "sha": commit.oid, "private": r.private,
                 "siblings": [{"rfilename": p, "size": e.size, "blobId": e.oid}
                              for p, e in sorted(commit.files.items())],
                 "tags": [], "lastModified": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(commit.created))})


@route("GET", r"/api/models/" + REPO + r"/tree/(?P<revision>[^/]+)(?:/(?P<path>.*))?")
def tree(h: Handler, repo: str, revision: str, path: str | None):
    r = h.state.repo(repo, h.user())
    commit = h.state.commit(r, revision)
    recursive = h.query().get("recursive", "false").lower() == "true"
    prefix = (path.strip("/") + "/") if path else ""
    entries, folders = [], set()
    for file_path, entry in sorted(commit.files.items()):
        if not file_path.startswith(prefix):
            continue
        rest = file_path[len(prefix):]
        if "/" in rest and not recursive:
            folders.add(prefix + rest.split("/")[0])
            continue
        for i in range(rest.count("/")):
            folders.add(prefix + "/".join(rest.split("/")[: i + 1]))
        entries.append(h.file_info(file_path, entry))
    if path and not entries and not folders:
        raise HubError(404, f"{path} does not exist", "EntryNotFound")
    entries += [{"type": "directory", "path": f, "oid": hashlib.sha1(f.encode()).hexdigest(), "size": 0}
                for f in sorted(folders)]
    h.send(200, entries)


@route("POST", r"/api/models/" + REPO + r"/paths-info/(?P<revision>[^/]+)")
def paths_info(h: Handler, repo: str, revision: str):
    r = h.state.repo(repo, h.user())
    commit = h.state.commit(r, revision)
    body = h.body()
    try:
        paths = json.loads(body).get("paths", [])
    except ValueError:
        paths = parse_qs(body.decode()).get("paths", [])
    h.send(200, [h.file_info(p, commit.files[p]) for p in paths if p in commit.files])


@route("POST", r"/api/models/" + REPO + r"/branch/(?P<branch>.+)")
def create_branch(h: Handler, repo: str, branch: str):
    r = h.state.repo(repo, h.user(required=True), write=True)
    if branch in r.refs:
        raise HubError(409, f"Reference already exists: refs/heads/{branch}")
    start = (h.json_body() or {}).get("startingPoint") or "main"
    r.refs[branch] = h.state.commit(r, start).oid
    h.send(200, {})


# -- uploads --------------------------------------------------------------------------------------

def _upload_mode(path: str, size: int, sample: bytes) -> str:
    if size >= LFS_THRESHOLD or path.endswith(LFS_SUFFIXES) or b"\0" in sample:
        return "lfs"
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError:
        return "lfs" if len(sample) < 512 else "regular"  # a sample may cut a multi-byte character
    return "regular"


@route("POST", r"/api/models/" + REPO + r"/preupload/(?P<revision>[^/]+)")
def preupload(h: Handler, repo: str, revision: str):
    r = h.state.repo(repo, h.user(required=True), write=True)
    create_pr = h.query().get("create_pr") == "1"
    commit = h.state.commit(r, "main" if create_pr and revision not in r.refs else revision)
    files = []
    for item in h.json_body().get("files", []):
        sample = base64.b64decode(item.get("sample", ""))
        mode = _upload_mode(item["path"], int(item["size"]), sample)
        existing = commit.files.get(item["path"])
        oid = None
        if existing is not None:
            oid = existing.sha256 if existing.is_lfs else git_blob_oid(existing.data)
        files.append({"path": item["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
    h.send(200, {"files": files, "commitOid": commit.oid})


@route("POST", r"/" + REPO + r"\.git/info/lfs/objects/batch")
def lfs_batch(h: Handler, repo: str):
    h.state.repo(repo, h.user(required=True), write=True)
    payload = h.json_body()
    if payload.get("operation") != "upload":
        raise HubError(400, "only uploads are supported")
    objects = []
    for obj in payload.get("objects", []):
        oid, size = obj["oid"], int(obj["size"])
        item = {"oid": oid, "size": size, "authenticated": True}
        if oid not in h.state.lfs:
            item["actions"] = {
                "upload": {"href": f"{h.endpoint}/_lfs/objects/{oid}", "header": {}},
                "verify": {"href": f"{h.endpoint}/_lfs/verify", "header": {}},
            }
        objects.append(item)
    h.send(200, {"transfer": "basic", "objects": objects}, content_type="application/vnd.git-lfs+json")


@route("PUT", r"/_lfs/objects/(?P<oid>[0-9a-f]{64})")
def lfs_put(h: Handler, oid: str):
    data = h.body()
    if hashlib.sha256(data).hexdigest() != oid:
        raise HubError(400, "uploaded content does not match its sha256")
    h.state.lfs[oid] = data
    h.send(200, b"", content_type="text/plain")


@route("POST", r"/_lfs/verify")
def lfs_verify(h: Handler):
    payload = h.json_body()
    data = h.state.lfs.get(payload.get("oid"))
    if data is None or len(data) != payload.get("size"):
        raise HubError(404, "object not found")
    h.send(200, {})


@route("GET", r"/api/models/" + REPO + r"/xet-(?P<kind>read|write)-token/(?P<revision>.+)")
def xet_token(h: Handler, repo: str, kind: str, revision: str):
    h.state.repo(repo, h.user(required=kind == "write"), write=kind == "write")
    expires = int(time.time()) + 3600
    cas = f"local://{h.state.xet_dir}"
    h.send(200, {"casUrl": cas, "accessToken": f"xet-{kind}", "exp": expires},
           {"X-Xet-Cas-Url": cas, "X-Xet-Access-Token": f"xet-{kind}", "X-Xet-Token-Expiration": str(expires)})


@route("POST", r"/api/models/" + REPO + r"/commit/(?P<revision>.+)")
def commit(h: Handler, repo: str, revision: str):
    r = h.state.repo(repo, h.user(required=True), write=True)
    create_pr = h.query().get("create_pr") == "1"
    lines = [json.loads(line) for line in h.body().splitlines() if line.strip()]
    if not lines or lines[0].get("key") != "header":
        raise HubError(400, "the commit payload must start with a header line")
    header = lines[0]["value"]
    base = h.state.commit(r, revision)
    if header.get("parentCommit") and header["parentCommit"] != base.oid:
        raise HubError(412, "A commit has happened since. Please refresh and try again.")
    files = dict(base.files)
    for line in lines[1:]:
        key, value = line["key"], line["value"]
        path = value["path"]
        if key == "file":
            data = base64.b64decode(value["content"])
            files[path] = Entry(size=len(data), data=data)
        elif key == "lfsFile":
            oid = value["oid"]
            # Xet first: when both stores hold the bytes (another repo uploaded them by LFS), a Xet client
            # still gets the Xet entry it uploaded, as the Hub records per file how it was stored.
            if (found := h.state.xet_lookup(oid)) is not None:
                files[path] = Entry(size=found[1], sha256=oid, xet_hash=found[0])
            elif oid in h.state.lfs:
                files[path] = Entry(size=len(h.state.lfs[oid]), sha256=oid)
            else:
                raise HubError(422, f"Your push was rejected because an LFS pointer pointed to a file that does not "
                                    f"exist: {path} ({oid})")
        elif key == "deletedFile":
            if path not in files:
                raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
            del files[path]
        elif key == "deletedFolder":
            files = {p: e for p, e in files.items() if not p.startswith(path.rstrip("/") + "/")}
        else:
            raise HubError(400, f"unknown commit operation {key!r}")
    message = header.get("summary") or "commit"
    if create_pr:
        r.prs += 1
        ref = f"refs/pr/{r.prs}"
    else:
        ref = unquote(revision)
        if ref not in r.refs:
            raise HubError(404, f"Invalid rev id: {ref}", "RevisionNotFound")
    new = h.state._add_commit(r, base.oid, message, files, ref)
    result = {"success": True, "commitOid": new.oid, "commitUrl": f"{h.endpoint}/{repo}/commit/{new.oid}",
              "hookOutput": ""}
    if create_pr:
        result["pullRequestUrl"] = f"{h.endpoint}/{repo}/discussions/{r.prs}"
    h.send(200, result)


# -- downloads ------------------------------------------------------------------------------------

@route("GET", r"/" + REPO + r"/resolve/(?P<revision>[^/]+)/(?P<path>.+)")
def resolve(h: Handler, repo: str, revision: str, path: str):
    r = h.state.repo(repo, h.user())
    commit = h.state.commit(r, revision)
    entry = commit.files.get(path)
    headers = {"X-Repo-Commit": commit.oid, "Accept-Ranges": "bytes"}
    if entry is None:
        raise HubError(404, "Entry not found", "EntryNotFound", headers=headers)
    headers["ETag"] = f'"{entry.sha256 if entry.is_lfs else entry.oid}"'
    if entry.is_lfs:
        headers["X-Linked-Etag"] = headers["ETag"]
        headers["X-Linked-Size"] = str(entry.size)
    if entry.xet_hash:
        headers["X-Xet-Hash"] = entry.xet_hash
        headers["Link"] = f'<{h.endpoint}/api/models/{quote(repo)}/xet-read-token/{commit.oid}>; rel="xet-auth"'
    if h.command == "HEAD":
        h.send_response(200)
        for key, value in {**headers, "Content-Length": str(entry.size)}.items():
            h.send_header(key, value)
        h.end_headers()
        h.state.requests.append((h.command, h.path, 200))
        return
    if entry.data is not None:
        data = entry.data
    elif entry.xet_hash:
        data = h.state.xet_content(entry)
    else:
        data = h.state.lfs[entry.sha256]
    status, rng = 200, h.headers.get("Range")
    if rng and (m := re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())):
        start, end = int(m.group(1)), int(m.group(2)) if m.group(2) else len(data) - 1
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        data, status = data[start:end + 1], 206
    h.send(status, data, headers, content_type="application/octet-stream")


# -- test controls (not part of the Hub API) ------------------------------------------------------

@route("GET", r"/_test/stats")
def test_stats(h: Handler):
    h.send(200, h.state.stats())


@route("POST", r"/_test/fail")
def test_fail(h: Handler):
    """Inject a fault from a child process: {method, path (regex), status, times}."""
    fault = h.json_body()
    h.server.fail(fault["method"], fault["path"], int(fault.get("status", 500)), int(fault.get("times", 1)))
    h.send(200, {})


@route("POST", r"/_test/clear")
def test_clear(h: Handler):
    h.server.clear_faults()
    h.send(200, {})


# ----------------------------------------------------------------------------------------------
# The server
# ----------------------------------------------------------------------------------------------

class HubServer(ThreadingHTTPServer):
    """`with HubServer(storage, tokens={"hf_x": "alice"}) as hub: ... hub.url ...`"""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, storage, tokens: dict[str, str] | None = None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.state = HubState(storage, tokens or {})
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread = None

    def take_fault(self, method: str, path: str):
        with self.state.lock:
            for fault in self.state.faults:
                if fault["times"] > 0 and fault["method"] == method and re.search(fault["path"], path):
                    fault["times"] -= 1
                    return fault
        return None

    def fail(self, method: str, path_regex: str, status: int = 500, times: int = 1, message: str | None = None):
        """The next `times` requests matching `method` and `path_regex` get `status`."""
        with self.state.lock:
            self.state.faults.append({"method": method, "path": path_regex, "status": status, "times": times,
                                      "message": message or f"injected {status}"})

    def clear_faults(self):
        with self.state.lock:
            self.state.faults.clear()

    def stats(self) -> dict:
        return self.state.stats()

    def __enter__(self):
        self._thread = threading.Thread(target=self.serve_forever, name="test-hub", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
