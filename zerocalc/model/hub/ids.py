"""What a visitor may type: a model id, a revision and a token, each checked before huggingface_hub is imported;
the error every Hub failure raises, and what a fetch returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from ...scenario import FieldError

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
_REF_PART = r"[A-Za-z0-9_][A-Za-z0-9_.+-]*+"     # possessive: a part ends at "/" or the end
_REVISION = re.compile(rf"{_REF_PART}(?:/{_REF_PART})*")
MAX_REVISION = 255
REVISION_ALLOWED = ("a branch, tag, refs/pr/N or 40-hex commit (e.g. main, v1.0): parts of A-Z a-z 0-9 _ . + - "
                    f"separated by single slashes, each starting with a letter, digit or _, no '..', at most "
                    f"{MAX_REVISION} characters; no spaces, control characters, '\\', '?', '#', '%' or ':'")
MAX_TOKEN = 1024
TOKEN_ALLOWED = ("an access token as copied from https://huggingface.co/settings/tokens: 1 to 1,024 printable "
                 "characters without spaces (or nothing, to use HF_TOKEN)")
HIDDEN = "(hidden)"
_LOOKS_LIKE_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8}")      # eight are enough to say so


# A secret typed into the wrong field: "hf_" and the Hub's letters and digits, or a long run of letters and digits
# that mixes cases or letters with digits the way generated keys do. A commit (40 lower-case hex digits), a branch
# or a tag written in words is none of these.
_HUB_TOKEN = re.compile(r"hf_[A-Za-z0-9]{30,}")
_KEY_RUN = re.compile(r"[A-Za-z0-9]{32,}")
_HEX = re.compile(r"[0-9a-f]+")
TOKEN_LIKE = "(looks like an access token: not shown)"


def looks_like_token(text: str) -> bool:
    """Whether a value typed as a revision (or an id) looks like an access token, so it is never sent, echoed or
    made a file name."""
    if _HUB_TOKEN.search(text):
        return True
    for run in _KEY_RUN.findall(text):
        mixed = run != run.lower() and run != run.upper()
        if not _HEX.fullmatch(run) and (mixed or (any(c.isdigit() for c in run) and any(c.isalpha() for c in run))):
            return True
    return False


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



def shown(text: str) -> str:
    """The value as a message may show it: short, and never something that looks like an access token."""
    if _LOOKS_LIKE_TOKEN.search(text) or looks_like_token(text):
        return TOKEN_LIKE
    return text if len(text) <= 120 else text[:120] + "..."


def validate_repo_id(text) -> str:
    """The Hub model id ORG/NAME, checked as huggingface_hub checks it; HubError("hub", ...) otherwise."""
    if not isinstance(text, str):
        raise HubError("hub", type(text).__name__, REPO_ID_ALLOWED)
    hint = ""
    if "://" in text or text.startswith(("huggingface.co/", "hf.co/", "www.")):
        hint = " (for a link https://huggingface.co/ORG/NAME give ORG/NAME)"
    if (not _REPO_ID.fullmatch(text) or "--" in text or ".." in text or text.endswith(".git")):
        raise HubError("hub", shown(text), REPO_ID_ALLOWED + hint)
    return text


def validate_revision(text) -> str:
    """A branch, tag, refs/pr/N or commit ("main" for None or ""); HubError("revision", ...) otherwise."""
    if text is None or text == "":
        return "main"
    if not isinstance(text, str):
        raise HubError("revision", type(text).__name__, REVISION_ALLOWED)
    if looks_like_token(text):
        # refused before any request: huggingface_hub would send it in a URL and keep it as a file name in its
        # cache (refs/<revision>), and a success message would echo it
        raise HubError("revision", TOKEN_LIKE, "a branch, tag, refs/pr/N or 40-hex commit; an access token "
                                               "belongs in the token field (this value was not sent or stored)")
    parts = text.split("/")
    if (len(text) > MAX_REVISION or not _REVISION.fullmatch(text) or ".." in text
            or any(p.endswith((".", ".lock")) for p in parts)):
        raise HubError("revision", shown(text), REVISION_ALLOWED)
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
