"""A model's config.json (and its safetensors index) from the Hugging Face Hub, for the CLI and the app.

    validate_repo_id("meta-llama/Llama-3.1-8B")  -> the id, or HubError naming "hub" and what is allowed
    validate_revision("main")                     -> a branch, tag, refs/pr/N or 40-hex commit; HubError "revision"
    validate_token(text)                          -> None (use HF_TOKEN / a saved login) or the token; HubError "token"
    fetch_config("meta-llama/Llama-3.1-8B", revision=None, token=None, timeout_s=10, max_bytes=1_000_000)
        -> HubConfig(repo_id, revision, config, safetensors_total_size, published_dtype_note, notes, commit, ...)

The one module of zerocalc/ with an optional dependency: huggingface_hub (and its HTTP client, httpx2) is imported
inside functions only, so `import zerocalc.model.hub` and the validators work without it, and a missing install is a
HubError saying `pip install huggingface_hub`.

Safety rules:
- the id, revision and token are validated before huggingface_hub is even imported, so a bad one never reaches the
  network;
- only config.json and model.safetensors.index.json are downloaded, through huggingface_hub's cache (cache_dir, its
  default otherwise); model.safetensors is at most asked for its size (a HEAD: no weights are downloaded);
- config.json is parsed by hf_config.parse_config (json.loads and its size cap): it is data, never code, and no
  remote code is ever trusted or run;
- a config.json announced (Content-Length) as larger than max_bytes is refused before it is requested; one that
  streams past max_bytes is stopped at huggingface_hub's 10 MiB read chunk and its partial file deleted;
- the HEAD runs with timeout_s and no retries; the download (which huggingface_hub retries on its own) must finish
  within timeout_s more, else it is abandoned (its worker thread ends within the library's own retry budget and
  writes only to a temporary file);
- no telemetry: HF_HUB_DISABLE_TELEMETRY defaults to 1 when this module imports huggingface_hub (_import_hub);
- HF_HUB_OFFLINE (read at call time, and as huggingface_hub read it at import) serves the cache only;
- a token goes to the endpoint only: no message, repr or log line of this module contains it, and the errors raised
  carry no exception chain (huggingface_hub's exceptions hold the request and its Authorization header).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from ..scenario import FieldError
from .hf_config import MAX_CONFIG_BYTES, ConfigError, parse_config

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"  # never downloaded: its size comes from a HEAD at most
INDEX_MAX_BYTES = 20_000_000  # room for an index of about 200,000 tensors
MAX_TIMEOUT_S = 600
INSTALL_HINT = "pip install huggingface_hub==2.4.0 (or pip install -r requirements.txt)"
GATED = "the model is gated or private: accept its licence on the Hub and give a token"
TOKEN_HINT = "HF_TOKEN in the environment or the token field"

# Mirrors huggingface_hub.utils.validate_repo_id (2.4.0) for the ORG/NAME form: each part 1 to 96 ASCII letters,
# digits, '_', '.', '-', starting and ending with a letter, digit or '_'; no '--' or '..'; not ending in '.git'.
_ID_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"{_ID_PART}/{_ID_PART}")
REPO_ID_ALLOWED = ("ORG/NAME as the Hub spells it (e.g. meta-llama/Llama-3.1-8B): two parts of 1 to 96 characters "
                   "from A-Z a-z 0-9 _ . -, each starting and ending with a letter, digit or _, without '--' or '..', "
                   "not ending in .git; no URL, path, query string or spaces")
# Git ref names (git check-ref-format), narrowed to what the Hub's branches and tags use: components of
# A-Z a-z 0-9 _ . + - separated by single slashes (refs/pr/1), each starting with a letter, digit or _, none ending in
# '.' or '.lock', no '..'; a commit is 40 hex digits, which this also admits.
_REF_PART = r"[A-Za-z0-9_][A-Za-z0-9_.+-]*"
_REVISION = re.compile(rf"{_REF_PART}(?:/{_REF_PART})*")
MAX_REVISION = 255
REVISION_ALLOWED = ("a branch, tag, refs/pr/N or 40-hex commit (e.g. main, v1.0): parts of A-Z a-z 0-9 _ . + - "
                    f"separated by single slashes, each starting with a letter, digit or _, no '..', at most "
                    f"{MAX_REVISION} characters; no spaces, control characters, '\\', '?', '#', '%' or ':'")
MAX_TOKEN = 1024
TOKEN_ALLOWED = ("an access token as copied from https://huggingface.co/settings/tokens: 1 to 1,024 printable "
                 "characters without spaces (or nothing, to use HF_TOKEN)")
HIDDEN = "(hidden)"
_LOOKS_LIKE_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8,}")
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


class HubError(FieldError):
    """A Hub id, revision or token refused, or a Hub answer we cannot use; field is "hub", "revision" or "token".

    The message follows FieldError ("hub: got 'ORG/NAME'; allowed: ..."); for the token field the value shown is
    "(hidden)", never the token.
    """


@dataclass(frozen=True)
class HubConfig:
    """What the Hub says about one model revision: plain data (no token, no file handles)."""

    repo_id: str
    revision: str                          # as asked ("main" when none was given)
    config: dict = field(repr=False)       # config.json, parsed by hf_config.parse_config
    safetensors_total_size: Optional[int]  # metadata.total_size of model.safetensors.index.json (tensor bytes)
    published_dtype_note: Optional[str]    # the checkpoint's dtype (torch_dtype / dtype / quantization_config)
    notes: list = field(default_factory=list)
    commit: Optional[str] = None           # the 40-hex commit the revision resolved to, when known
    safetensors_file_size: Optional[int] = None  # a single model.safetensors' size from a HEAD (header included)


# ---------------------------------------------------------------------------------------------------- validation

def _shown(text: str) -> str:
    """The value as a message may show it: short, and never something that looks like an access token."""
    if _LOOKS_LIKE_TOKEN.search(text):
        return "(looks like an access token: not shown)"
    return text if len(text) <= 120 else text[:120] + "..."


def validate_repo_id(text) -> str:
    """The Hub model id ORG/NAME, checked as huggingface_hub checks it; HubError("hub", ...) otherwise."""
    if not isinstance(text, str):
        raise HubError("hub", type(text).__name__, REPO_ID_ALLOWED)
    hint = ""
    if "://" in text or text.startswith(("huggingface.co/", "hf.co/", "www.")):
        hint = " (for a link https://huggingface.co/ORG/NAME give ORG/NAME)"
    if (not _REPO_ID.fullmatch(text) or "--" in text or ".." in text or text.endswith(".git")):
        raise HubError("hub", _shown(text), REPO_ID_ALLOWED + hint)
    return text


def validate_revision(text) -> str:
    """A branch, tag, refs/pr/N or commit ("main" for None or ""); HubError("revision", ...) otherwise."""
    if text is None or text == "":
        return "main"
    if not isinstance(text, str):
        raise HubError("revision", type(text).__name__, REVISION_ALLOWED)
    parts = text.split("/")
    if (len(text) > MAX_REVISION or not _REVISION.fullmatch(text) or ".." in text
            or any(p.endswith((".", ".lock")) for p in parts)):
        raise HubError("revision", _shown(text), REVISION_ALLOWED)
    return text


def validate_token(text) -> Optional[str]:
    """None for no token (huggingface_hub then uses HF_TOKEN or a saved login), else the token without surrounding
    whitespace; HubError("token", "(hidden)", ...) for anything else. The token itself is never put in a message."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise HubError("token", HIDDEN, TOKEN_ALLOWED)
    token = text.strip()
    if not token:
        return None
    if len(token) > MAX_TOKEN or not all("\x21" <= c <= "\x7e" for c in token):
        raise HubError("token", HIDDEN, TOKEN_ALLOWED)
    return token


def _check_limits(timeout_s, max_bytes) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise FieldError("timeout_s", timeout_s, f"seconds above 0, at most {MAX_TIMEOUT_S}")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not 1 <= max_bytes <= MAX_CONFIG_BYTES:
        raise FieldError("max_bytes", max_bytes, f"an integer from 1 to {MAX_CONFIG_BYTES:,}")


def _endpoint_label(url: str) -> str:
    """scheme://host[:port] of an endpoint: what messages show (never a user:password part or a path)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def _check_endpoint(url) -> str:
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise FieldError("endpoint", "(not shown)", "an http:// or https:// URL of a Hub, without query or fragment")
    return url.rstrip("/")


# ---------------------------------------------------------------------------------------------------- the fetch

def fetch_config(repo_id, revision=None, token=None, timeout_s=10, max_bytes=1_000_000, *,
                 cache_dir=None, endpoint=None) -> HubConfig:
    """config.json of a Hub model (and the published size from its safetensors index), or a HubError.

    token: None uses huggingface_hub's own (HF_TOKEN, then a saved login). cache_dir: huggingface_hub's cache
    (HF_HUB_CACHE / HF_HOME) when None. endpoint: the Hub to ask, HF_ENDPOINT as huggingface_hub read it at import
    when None; meant for tests and mirrors, never for a value typed by a visitor.
    """
    secrets = _secrets(token)
    try:
        fetch = _Fetch(repo_id, revision, token, timeout_s, max_bytes, cache_dir, endpoint)
        return fetch.run()
    except HubError as exc:
        error = HubError(exc.field, _scrub(exc.value, secrets), _scrub(exc.allowed, secrets))
    except FieldError as exc:  # timeout_s, max_bytes, endpoint: a caller's mistake, still without the token
        error = FieldError(exc.field, _scrub(exc.value, secrets), _scrub(exc.allowed, secrets))
    except Exception as exc:  # every library failure is mapped below; this is the net for a surprise
        shown = _scrub(_shown(repo_id), secrets) if isinstance(repo_id, str) else type(repo_id).__name__
        error = HubError("hub", shown, f"a model zerocalc can read: an unexpected {type(exc).__name__} while "
                                       "fetching it (please report it)")
    raise error  # raised outside the except blocks: no __context__ leads back to a request and its token


def _secrets(token) -> list:
    found = [token] if isinstance(token, str) else []
    found += [os.environ.get(name) for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")]
    return sorted({s.strip() for s in found if isinstance(s, str) and len(s.strip()) >= 8}, key=len, reverse=True)


def _scrub(value, secrets):
    if not isinstance(value, str):
        return value
    for secret in secrets:
        value = value.replace(secret, HIDDEN)
    return value


def _import_hub(repo_id: str):
    """(huggingface_hub, its constants and errors modules, httpx2), or a HubError saying how to install them.

    When zerocalc is the first to import huggingface_hub, HF_HUB_DISABLE_TELEMETRY defaults to 1 (set it to 0 to opt
    back in): huggingface_hub 2.4.0 reads it at import, and without it the first request of a process also sends a
    GET {HF_ENDPOINT}/api/agent-harnesses (to huggingface.co even when an endpoint argument names another Hub) and
    puts the torch version in the User-Agent.
    """
    if "huggingface_hub" not in sys.modules:
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        import httpx2
        import huggingface_hub
        from huggingface_hub import constants, errors
    except ImportError:
        raise HubError("hub", repo_id, f"huggingface_hub installed: reading a model from the Hub needs it "
                                       f"({INSTALL_HINT})") from None
    return huggingface_hub, constants, errors, httpx2


class _TooLarge(Exception):
    def __init__(self, size: int, announced: bool):
        super().__init__(size)
        self.size, self.announced = size, announced


class _Deadline(Exception):
    pass


def _byte_cap(limit: int):
    """A progress-bar class for hf_hub_download(tqdm_class=...) that stops a download past `limit` bytes: it is
    created with the announced total and told of every chunk read, before the chunk is written."""

    class ByteCap:
        def __init__(self, *args, total=None, initial=0, **kwargs):
            self.n = initial or 0
            if total is not None and total > limit:
                raise _TooLarge(total, announced=True)

        def update(self, n=1):
            self.n += n
            if self.n > limit:
                raise _TooLarge(self.n, announced=False)

        def close(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    return ByteCap


def _with_deadline(work, seconds: float):
    """work() in a daemon thread, or _Deadline after `seconds` (the thread is left to finish on its own)."""
    box = {}

    def run():
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=run, name="zerocalc-hub-download", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise _Deadline()
    if "error" in box:
        raise box.pop("error")
    return box["value"]


def _truthy(value) -> bool:
    return isinstance(value, str) and value.strip().upper() in ("1", "ON", "YES", "TRUE")


class _Fetch:
    """One fetch_config call: validated inputs, then config.json, then the published size."""

    def __init__(self, repo_id, revision, token, timeout_s, max_bytes, cache_dir, endpoint):
        self.repo_id = validate_repo_id(repo_id)
        self.revision = validate_revision(revision)
        self.token = validate_token(token)
        _check_limits(timeout_s, max_bytes)
        self.timeout_s, self.max_bytes = timeout_s, max_bytes
        self.hub, self.constants, self.errors, self.httpx = _import_hub(self.repo_id)
        self.endpoint = _check_endpoint(endpoint if endpoint is not None else self.constants.ENDPOINT)
        self.where = _endpoint_label(self.endpoint)
        self.cache_dir = str(cache_dir) if cache_dir is not None else None
        self.offline = (_truthy(os.environ.get("HF_HUB_OFFLINE")) or _truthy(os.environ.get("TRANSFORMERS_OFFLINE"))
                        or self.constants.is_offline_mode())
        self.notes = []
        self.pinned = self.revision

    # -- huggingface_hub calls (each failure goes through _error) --

    def _head(self, filename: str, revision: str):
        """One HEAD with timeout_s and no retries: the file's size, ETag and commit, or a library error."""
        url = self.hub.hf_hub_url(self.repo_id, filename, revision=revision, endpoint=self.endpoint)
        logger.debug("Hub: HEAD %s of %s at %s from %s", filename, self.repo_id, revision, self.where)
        return self.hub.get_hf_file_metadata(url, token=self.token, timeout=self.timeout_s, endpoint=self.endpoint,
                                             library_name="zerocalc", retry_on_errors=False)

    def _download(self, filename: str, limit: int, revision: str) -> str:
        """The file's path in the cache, downloaded if need be (within timeout_s, at most `limit` bytes)."""
        logger.debug("Hub: download %s of %s at %s from %s", filename, self.repo_id, revision, self.where)
        kwargs = dict(repo_id=self.repo_id, filename=filename, revision=revision, cache_dir=self.cache_dir,
                      token=self.token, etag_timeout=self.timeout_s, endpoint=self.endpoint,
                      library_name="zerocalc", tqdm_class=_byte_cap(limit))
        return _with_deadline(lambda: self.hub.hf_hub_download(**kwargs), self.timeout_s)

    def _cached(self, filename: str) -> str:
        return self.hub.hf_hub_download(self.repo_id, filename, revision=self.revision, cache_dir=self.cache_dir,
                                        local_files_only=True)

    def _read(self, path: str, filename: str, limit: int) -> bytes:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise self._too_large(filename, limit, len(data), announced=False, cached=True)
        return data

    # -- the steps --

    def run(self) -> HubConfig:
        config_bytes, commit = self._config_bytes()
        self.pinned = commit or self.revision  # the index is read at the very commit config.json came from
        try:
            config = parse_config(config_bytes)
        except ConfigError as exc:
            raise HubError("hub", self.repo_id, f"a model whose {CONFIG_FILE} can be read: {self.repo_id}'s "
                                                f"{CONFIG_FILE} is {exc.value}; expected {exc.allowed}") from None
        if config.get("auto_map"):
            self.notes.append(f"{CONFIG_FILE} names custom modelling code (auto_map): it is ignored; remote code is "
                              "never run, only the JSON fields are read")
        total, file_size = self._published_size()
        return HubConfig(repo_id=self.repo_id, revision=self.revision, config=config, safetensors_total_size=total,
                         published_dtype_note=_dtype_note(config, total), notes=self.notes, commit=commit,
                         safetensors_file_size=file_size)

    def _config_bytes(self):
        error = None
        try:
            if self.offline:
                path = self._cached(CONFIG_FILE)
                commit = _commit_of(path)
                self.notes.append(f"{CONFIG_FILE} of {self.repo_id} at {self.revision} from the cache "
                                  "(HF_HUB_OFFLINE is set)")
            else:
                meta = self._head(CONFIG_FILE, self.revision)
                if not meta.commit_hash or not meta.etag:
                    raise self._not_a_hub(CONFIG_FILE)
                if meta.size is not None and meta.size > self.max_bytes:
                    raise _TooLarge(meta.size, announced=True)
                path = self._download(CONFIG_FILE, self.max_bytes, self.revision)
                commit = _commit_of(path) or meta.commit_hash  # where hf_hub_download resolved the revision
                self.notes.append(f"{CONFIG_FILE} of {self.repo_id} at {self.revision}"
                                  + (f" (commit {commit})" if commit else "") + f" from {self.where}")
            return self._read(path, CONFIG_FILE, self.max_bytes), commit
        except HubError:
            raise
        except Exception as exc:
            error = self._error(exc, CONFIG_FILE, self.max_bytes)
        raise error

    def _published_size(self):
        """(metadata.total_size of the index or None, a single model.safetensors' size or None); failures are notes:
        the config alone is enough for our own count."""
        found, why = self._index_path()
        if found is not None:
            try:
                total = _index_total(self._read(found, INDEX_FILE, INDEX_MAX_BYTES))
            except HubError as exc:
                self.notes.append(f"{INDEX_FILE} could not be used ({_reason(exc)}): published size unknown")
                return None, None
            except ValueError:
                self.notes.append(f"{INDEX_FILE} is not valid JSON: published size unknown")
                return None, None
            except OSError as exc:
                self.notes.append(f"{INDEX_FILE} could not be read from the cache ({type(exc).__name__}): "
                                  "published size unknown")
                return None, None
            if total is None:
                self.notes.append(f"{INDEX_FILE} has no integer metadata.total_size: published size unknown")
            else:
                self.notes.append(f"published size: {total:,} bytes of tensors (metadata.total_size of {INDEX_FILE})")
            return total, None
        if why != "absent":
            self.notes.append(why)
            return None, None
        return None, self._single_file_size()

    def _index_path(self):
        """(path, None) for a readable index, (None, "absent") when the repo has none, else (None, a note)."""
        if self.offline:
            cached = self.hub.try_to_load_from_cache(self.repo_id, INDEX_FILE, cache_dir=self.cache_dir,
                                                     revision=self.pinned)
            if isinstance(cached, str):
                return cached, None
            if cached is self.hub._CACHED_NO_EXIST:
                return None, (f"no {INDEX_FILE} (as cached); with HF_HUB_OFFLINE set the size of a single "
                              f"{SINGLE_FILE} is not asked for: published size unknown")
            return None, f"{INDEX_FILE} is not in the cache (HF_HUB_OFFLINE is set): published size unknown"
        error = None
        try:
            return self._download(INDEX_FILE, INDEX_MAX_BYTES, self.pinned), None
        except Exception as exc:
            if isinstance(exc, self.errors.RemoteEntryNotFoundError):
                return None, "absent"
            error = self._error(exc, INDEX_FILE, INDEX_MAX_BYTES)
        return None, f"{INDEX_FILE} could not be read ({_reason(error)}): published size unknown"

    def _single_file_size(self) -> Optional[int]:
        """A single model.safetensors' size from a HEAD (huggingface_hub does not follow the redirect to the
        storage host, so no weights are read), or None with a note."""
        error = None
        try:
            size = self._head(SINGLE_FILE, self.pinned).size
        except Exception as exc:
            if isinstance(exc, self.errors.RemoteEntryNotFoundError):
                self.notes.append(f"no {INDEX_FILE} and no {SINGLE_FILE}: the published size is unknown without "
                                  "downloading weights (which zerocalc never does)")
                return None
            error = self._error(exc, SINGLE_FILE, 0)
        if error is not None or not isinstance(size, int) or isinstance(size, bool) or size < 0:
            self.notes.append(f"no {INDEX_FILE}; the size of {SINGLE_FILE} is unknown without downloading weights "
                              "(which zerocalc never does)")
            return None
        self.notes.append(f"no {INDEX_FILE}; {SINGLE_FILE} is {size:,} bytes (HEAD metadata, not downloaded; this "
                          "includes its JSON header, so it is slightly more than the tensor bytes)")
        return size

    # -- failures -> HubError --

    def _too_large(self, filename, limit, size, announced, cached=False) -> HubError:
        if cached:
            got = f"the cached {filename} has more than {limit:,} bytes"
        elif announced:
            got = f"{self.where} announces {size:,} bytes for {filename} (refused before reading it)"
        else:
            got = f"{self.where} sent more than {limit:,} bytes for {filename} (stopped, partial file deleted)"
        return HubError("hub", self.repo_id, f"a {filename} of at most {limit:,} bytes: {got}")

    def _not_a_hub(self, filename) -> HubError:
        return HubError("hub", self.repo_id, f"a Hugging Face Hub: {self.where} answered for {filename} without the "
                                             "X-Repo-Commit and ETag headers the Hub sends")

    def _error(self, exc: BaseException, filename: str, limit: int) -> HubError:
        """The HubError for one huggingface_hub / HTTP failure. Messages are ours alone: no text of the library's
        exception (or of the server's answer) is copied, so nothing can carry the token."""
        errors, httpx, repo, where = self.errors, self.httpx, self.repo_id, self.where
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(exc, _TooLarge):
            return self._too_large(filename, limit, exc.size, exc.announced)
        if isinstance(exc, _Deadline) or isinstance(exc, httpx.TimeoutException):
            return HubError("hub", repo, f"an answer in time: no answer from {where} within {self.timeout_s:g} s "
                                         f"for {filename} (try again, allow a longer timeout, or set "
                                         "HF_HUB_OFFLINE=1 to use the cache)")
        if isinstance(exc, errors.LocalEntryNotFoundError) and not self.offline and exc.__cause__ is not None:
            return self._error(exc.__cause__, filename, limit)  # the HEAD inside hf_hub_download failed: say why
        if isinstance(exc, errors.LocalEntryNotFoundError) and self.offline:
            where_cached = self.cache_dir or self.constants.HF_HUB_CACHE
            return HubError("hub", repo, f"a model already in the cache: HF_HUB_OFFLINE is set and {filename} of "
                                         f"{repo} at {self.revision} is not in the cache {where_cached} (fetch it "
                                         "once online, or unset HF_HUB_OFFLINE)")
        if isinstance(exc, errors.GatedRepoError):
            return HubError("hub", repo, f"a model you may read: {GATED} ({TOKEN_HINT})"
                                         + ("; the token given has no access to it yet" if status == 403 else ""))
        if isinstance(exc, errors.RevisionNotFoundError):
            return HubError("revision", self.revision, f"a branch, tag or commit of {repo}: {where} has no "
                                                       f"revision {self.revision!r} in it")
        if isinstance(exc, errors.RemoteEntryNotFoundError):
            return HubError("hub", repo, f"a model with a {filename}: {repo} has none at {self.revision} (is it a "
                                         "transformers model?)")
        if isinstance(exc, errors.DisabledRepoError):
            return HubError("hub", repo, f"a model you may read: {repo} is disabled on the Hub")
        if isinstance(exc, errors.HfHubHTTPError) and status == 401 and \
                "invalid credentials" in str(getattr(exc, "server_message", "") or "").lower():
            return HubError("token", HIDDEN, "a valid access token: the Hub refused the token sent as invalid or "
                                             f"expired ({TOKEN_HINT}; new ones at https://huggingface.co/settings/"
                                             "tokens)")
        if isinstance(exc, errors.RepositoryNotFoundError):
            if status == 404:
                return HubError("hub", repo, f"an existing model: {where} has no model {repo!r} (check ORG/NAME)")
            return HubError("hub", repo, f"a model you may read: {where} shows no model {repo!r} to this request: "
                                         f"check ORG/NAME; if it exists, {GATED} ({TOKEN_HINT})")
        if isinstance(exc, errors.HfHubHTTPError):
            if status in (401, 403):
                return HubError("hub", repo, f"a model you may read: {GATED} ({TOKEN_HINT})")
            if status == 404:
                return HubError("hub", repo, f"an existing model: {where} has no {filename} of {repo!r} at "
                                             f"{self.revision}")
            if status == 429:
                return HubError("hub", repo, f"fewer requests: {where} is rate limiting them (HTTP 429); try later")
            return HubError("hub", repo, f"a working Hub: {where} answered HTTP {status} for {filename}; try again "
                                         "later")
        if isinstance(exc, (errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError)):
            return HubError("hub", repo, f"a reachable Hub: huggingface_hub is offline (HF_HUB_OFFLINE was set when "
                                         f"it was imported) and {filename} of {repo} is not in the cache")
        if isinstance(exc, httpx.TooManyRedirects):
            return HubError("hub", repo, f"a Hub answer: {where} redirected {filename} too many times")
        if isinstance(exc, (httpx.ConnectError, httpx.NetworkError, httpx.ProxyError)):
            return HubError("hub", repo, f"a reachable Hub: cannot connect to {where} ({type(exc).__name__})")
        if isinstance(exc, errors.FileMetadataError):
            return self._not_a_hub(filename)
        return HubError("hub", repo, f"a complete answer: {where} failed for {filename} ({type(exc).__name__})")


def _reason(error: HubError) -> str:
    """What went wrong, without the "what is allowed" lead of a HubError's text (for notes)."""
    return error.allowed.split(": ", 1)[-1]


def _commit_of(path: str) -> Optional[str]:
    """The commit of a cached file: huggingface_hub keeps it at <cache>/<repo>/snapshots/<commit>/<filename>."""
    name = Path(path).parent.name
    return name if re.fullmatch(r"[0-9a-f]{40}", name) else None


def _index_total(data: bytes) -> Optional[int]:
    """metadata.total_size of a model.safetensors.index.json, or None when it has no usable one."""
    try:
        index = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    # UnicodeDecodeError and JSONDecodeError are ValueErrors: the caller notes them
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, float) and total.is_integer():
        total = int(total)
    if isinstance(total, bool) or not isinstance(total, int) or not 0 <= total <= 10**16:
        return None
    return total


def _dtype_note(config: dict, total: Optional[int]) -> Optional[str]:
    """The checkpoint's dtype as config.json states it, and what the published size means in parameters."""
    quant = config.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method", "unknown"))[:40]
        return (f"quantized checkpoint (quantization_config.quant_method {method!r}): the published size is not "
                "parameters x one dtype width")
    key = "dtype" if "dtype" in config else "torch_dtype"
    dtype = config.get(key)
    if not isinstance(dtype, str):
        return None
    dtype = dtype[:40]
    width = DTYPE_BYTES.get(dtype)
    if width is None:
        return f"published dtype {dtype!r} (config.json {key!r}): its width is unknown here"
    note = f"published in {dtype} (config.json {key!r}, {width} bytes a parameter)"
    if total is not None:
        approx = "" if total % width == 0 else "about "
        note += (f": {total:,} bytes / {width} = {approx}{total // width:,} parameters if every tensor is stored in "
                 f"{dtype}")
    return note
