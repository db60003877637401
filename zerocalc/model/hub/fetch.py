"""fetch_config: one model's config.json (and its published size) from the Hub or the cache, with the token
scrubbed from every error.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from ...scenario import FieldError
from ..hf_config import MAX_CONFIG_BYTES, ConfigError, parse_config
from .failures import Failures, reason
from .ids import HIDDEN, HubConfig, HubError, shown, validate_repo_id, validate_revision, validate_token
from .published import dtype_note, index_total
from .transfer import TooLarge, byte_cap, import_hub, truthy, with_deadline

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"  # never downloaded: its size comes from a HEAD at most
INDEX_MAX_BYTES = 20_000_000  # room for an index of about 200,000 tensors
MAX_TIMEOUT_S = 600


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

    token: a token; None uses huggingface_hub's own (HF_TOKEN, then a saved login), as the CLI on a user's own
    machine should; False sends none at all, what a shared server does for a visitor who typed none. cache_dir: huggingface_hub's cache
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
        named = _scrub(shown(repo_id), secrets) if isinstance(repo_id, str) else type(repo_id).__name__
        error = HubError("hub", named, f"a model zerocalc can read: an unexpected {type(exc).__name__} while "
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



class _Fetch(Failures):
    """One fetch_config call: validated inputs, then config.json, then the published size."""

    def __init__(self, repo_id, revision, token, timeout_s, max_bytes, cache_dir, endpoint):
        self.repo_id = validate_repo_id(repo_id)
        self.revision = validate_revision(revision)
        self.token = False if token is False else validate_token(token)
        _check_limits(timeout_s, max_bytes)
        self.timeout_s, self.max_bytes = timeout_s, max_bytes
        self.hub, self.constants, self.errors, self.httpx = import_hub(self.repo_id)
        self.endpoint = _check_endpoint(endpoint if endpoint is not None else self.constants.ENDPOINT)
        self.where = _endpoint_label(self.endpoint)
        self.cache_dir = str(cache_dir) if cache_dir is not None else None
        self.offline = (truthy(os.environ.get("HF_HUB_OFFLINE")) or truthy(os.environ.get("TRANSFORMERS_OFFLINE"))
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
                      library_name="zerocalc", tqdm_class=byte_cap(limit))
        return with_deadline(lambda: self.hub.hf_hub_download(**kwargs), self.timeout_s)

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
                         published_dtype_note=dtype_note(config, total), notes=self.notes, commit=commit,
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
                    raise TooLarge(meta.size, announced=True)
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
                total = index_total(self._read(found, INDEX_FILE, INDEX_MAX_BYTES))
            except HubError as exc:
                self.notes.append(f"{INDEX_FILE} could not be used ({reason(exc)}): published size unknown")
                return None, None
            except ValueError as exc:   # not JSON (its subclasses), or index_total's own words for what it holds
                what = f"not readable ({exc})" if type(exc) is ValueError else "not valid JSON"
                self.notes.append(f"{INDEX_FILE} is {what}: published size unknown")
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
        return None, f"{INDEX_FILE} could not be read ({reason(error)}): published size unknown"

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


def _commit_of(path: str) -> Optional[str]:
    """The commit of a cached file: huggingface_hub keeps it at <cache>/<repo>/snapshots/<commit>/<filename>."""
    name = Path(path).parent.name
    return name if re.fullmatch(r"[0-9a-f]{40}", name) else None
