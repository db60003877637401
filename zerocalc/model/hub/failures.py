"""Every huggingface_hub or HTTP failure as a HubError of our own words: no text of the library's exception or of
the server's answer is copied, so nothing can carry the token.
"""

from __future__ import annotations

from .ids import HIDDEN, HubError
from .transfer import Deadline, TooLarge

GATED = "the model is gated or private: accept its licence on the Hub and give a token"
TOKEN_HINT = "the token field in the app, HF_TOKEN for the command line"


class Failures:
    """The HubError for each way a fetch can fail (a mixin of fetch._Fetch: it reads the fetch's repo, endpoint,
    revision, limits and the library's error classes)."""

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
        if isinstance(exc, TooLarge):
            return self._too_large(filename, limit, exc.size, exc.announced)
        if isinstance(exc, Deadline) or isinstance(exc, httpx.TimeoutException):
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


def reason(error: HubError) -> str:
    """What went wrong, without the "what is allowed" lead of a HubError's text (for notes)."""
    return error.allowed.split(": ", 1)[-1]
