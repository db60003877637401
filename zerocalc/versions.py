"""Library versions as rows of the plan (issue 31 item 3): the bytes depend on the release that ran.

A plan names the versions it assumes (FineTune.versions: library -> version, the defaults below for the rest, which
are the releases the CPU measurements ran: requirements-validation.txt). Each row below says what changes for
versions older than `below`, with its source at a release and how it was checked; the code that counts those bytes
asks `applies(versions, key)`. A row not modelled (`modelled` False) is named in the report as not counted.
"""

from __future__ import annotations

import re
from typing import Dict, NamedTuple, Optional, Tuple

from .scenario import FieldError

DEFAULTS = {"transformers": "5.24.0", "bitsandbytes": "0.50.2", "peft": "0.21.2", "torch": "2.13.0"}
LIBRARIES = tuple(DEFAULTS)
_VERSION = re.compile(r"^\d+(\.\d+){0,3}$")


class VersionRow(NamedTuple):
    key: str            # what the counting code asks for
    library: str
    below: str          # the row holds for releases older than this one
    change: str
    source: str
    checked: str
    modelled: bool = True
    families: Tuple[str, ...] = ()   # the vision families (model/vision.py PROJECTORS) it holds for; () every model
    switch: str = ""    # not modelled by release: the plan field that counts it where it holds (the kernel decides)


ROWS = (
    VersionRow("logits upcast in the model", "transformers", "4.46",
               "LlamaForCausalLM.forward upcasts the logits itself (.float()) and the loss reads those: the "
               "narrow logits die at the upcast, fp32 logits and their shifted copy live at the loss",
               "transformers 4.45.2 models/llama/modeling_llama.py:1213-1229 (\"TODO: remove the float() "
               "operation in v4.46\"); 4.46.0 moved it into loss/loss_utils.py ForCausalLMLoss",
               "CPU: transformers 4.45.2, torch 2.13 (tests/test_versions.py): 12 bytes per T x V at the loss's "
               "forward at bf16 (10 at 5.24)"),
    VersionRow("shifted logits copy", "transformers", "4.49",
               "the loss copies the shifted fp32 logits (logits[..., :-1, :].contiguous()) beside the upcast and "
               "the log-softmax, 4 bytes per T x V more at the loss's forward, when a micro-batch holds more than "
               "one sequence (one sequence's slice is contiguous already: no copy)",
               "transformers 4.48.0 loss/loss_utils.py:38 ForCausalLMLoss; removed by huggingface/transformers "
               "PR #35646 (4.49.0 pads the labels instead)",
               "CPU: transformers 4.45.2 (its model-side copy, the same line); 4.46-4.48 from the code"),
    VersionRow("Qwen-VL logits upcast in the model", "transformers", "4.52",
               "Qwen2-VL / Qwen2.5-VL's ForConditionalGeneration computes its own loss: logits.float() in place "
               "of the logits, then the shifted slice's .contiguous() (a copy once a micro-batch holds two "
               "sequences), as LlamaForCausalLM before 4.46; the model returns the fp32 logits",
               "transformers 4.51.3 models/qwen2_5_vl/modeling_qwen2_5_vl.py Qwen2_5_VLForConditionalGeneration"
               ".forward (\"Upcast to float if we need to compute the loss\"); 4.52.4 calls self.loss_function",
               "CPU: transformers 4.51.3, torch 2.13, a one-layer Qwen2.5-VL (tests/measure/vlm_loss_versions.py): "
               "8 bytes per T x V beyond the saved log-softmax at the loss's forward at batch 2, 4 at batch 1 (6 "
               "at 5.24)", families=("qwen2.5-vl",)),
    VersionRow("Gemma 3 logits upcast and masked copy", "transformers", "5.17",
               "Gemma 3's ForConditionalGeneration computes its own loss: logits.float() in place of the logits, "
               "then the shifted slice indexed by the attention mask (a copy at any batch size); the model "
               "returns the fp32 logits",
               "transformers 5.16.1 models/gemma3/modeling_gemma3.py Gemma3ForConditionalGeneration.forward "
               "(shift_logits[shift_attention_mask != 0].contiguous()); 5.17.0 calls self.loss_function",
               "CPU: transformers 5.16.1, torch 2.13, a one-layer Gemma 3 (tests/measure/vlm_loss_versions.py): "
               "8 bytes per T x V beyond the saved log-softmax at the loss's forward at batch 1 and 2 (6 at "
               "5.24)", families=("gemma3",)),
    VersionRow("experts as linears", "transformers", "5",
               "mixture-of-experts blocks hold one nn.Linear per expert (Mixtral w1 / w2 / w3, Qwen2-MoE / "
               "Qwen3-MoE gate_proj / up_proj / down_proj), not fused 3-D tensors: QLoRA quantizes the experts "
               "(bitsandbytes replaces nn.Linear), LoRA's all-linear targets every expert's linears and the router, "
               "and peft re-targets nothing",
               "transformers 4.45.2 models/mixtral/modeling_mixtral.py MixtralBlockSparseTop2MLP, "
               "models/qwen2_moe/modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock (nn.ModuleList of MLPs); "
               "5.x fused experts (bitsandbytes PR #1965: fused experts stay full precision)",
               "CPU: transformers 4.45.2 + peft 0.13.2 (tests/measure/experts_v4.py): the linears bitsandbytes "
               "replaces and peft's adapters, element for element, tiny Mixtral and Qwen2-MoE"),
    VersionRow("router loss one-hot", "transformers", "5.16",
               "load_balancing_loss_func concatenates every layer's router logits and materialises one_hot "
               "[L T, k, E] int64 and its .float() at the loss (with output_router_logits): 12 bytes per L x T x k "
               "x E, 48 GiB of one-hot for Qwen3-30B-A3B at 131K tokens per device",
               "transformers 5.15.1 models/qwen3_moe/modeling_qwen3_moe.py load_balancing_loss_func; one layer at "
               "a time from 5.16.0 (huggingface/transformers PR #48131)",
               "CPU: the 5.15.1 function from its wheel and 5.24.0's (tests/measure/router_loss.py)"),
    VersionRow("SDPA repeats k, v", "transformers", "4.54",
               "the SDPA attention repeats K and V to every query head (repeat_kv) before the kernel whatever the "
               "mask, and the kernel saves the copies; from 4.54 it passes them grouped (enable_gqa) where there "
               "is no mask, and still repeats them under one (a padded batch). Counted with repeat_kv "
               "(--repeat-kv, step/repeated_kv.py), which the SDPA kernel needs and flash-attention 2 does not",
               "transformers 4.53.0 integrations/sdpa_attention.py sdpa_attention_forward (repeat_kv whenever "
               "num_key_value_groups is set); 4.54.0 use_gqa_in_sdpa",
               "from the code at both releases; the repeat under a padding mask measured at 5.24.0 on the CPU "
               "(tests/test_repeated_kv.py)", modelled=False, switch="repeat_kv"),
    VersionRow("4-bit linear input saved", "bitsandbytes", "0.43.2",
               "MatMul4Bit kept every 4-bit linear's input for backward (ctx.tensors = (A, B)) though a frozen "
               "weight needs no weight gradient",
               "bitsandbytes 0.43.1 autograd/_functions.py:515-516 MatMul4Bit.forward (if any(ctx.needs_input_grad"
               "[:2]): ctx.tensors = (A, B)); 0.43.2 the same lines: (None, B) (PR #1270)",
               "CPU: MatMul4Bit of bitsandbytes 0.43.1 and 0.43.2 / 0.50.2 on a frozen weight and an input that "
               "needs a gradient (tests/measure/bnb_versions.py): 0.43.1 keeps exactly the input's bytes, the others "
               "none; counted as an 8-bit base's kept inputs (step/trainable.py)"),
)
ROW_KEYS = tuple(r.key for r in ROWS)


def _parts(version: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def older(version: str, below: str) -> bool:
    """version < below, release numbers compared part by part (4.45 < 4.46 < 4.49 < 5)."""
    a, b = _parts(version), _parts(below)
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)) < b + (0,) * (n - len(b))


def check(versions: Tuple[Tuple[str, str], ...]) -> None:
    """FieldError unless `versions` is a tuple of (library, release) pairs of known libraries, each once."""
    if not isinstance(versions, tuple) or any(not isinstance(p, tuple) or len(p) != 2 for p in versions):
        raise FieldError("versions", versions, "(library, version) pairs")
    seen = set()
    for lib, version in versions:
        if lib not in DEFAULTS or lib in seen:
            raise FieldError("versions", lib, f"each of {', '.join(LIBRARIES)} at most once")
        if not isinstance(version, str) or not _VERSION.match(version):
            raise FieldError("versions", f"{lib}={version}", "a release number such as 4.45 or 0.43.1")
        seen.add(lib)


def parse(text: str) -> Tuple[Tuple[str, str], ...]:
    """'transformers=4.45,bitsandbytes=0.43.1' -> (("bitsandbytes", "0.43.1"), ("transformers", "4.45")); a
    library at its default is left out, so equal plans compare equal."""
    pairs = []
    for item in filter(None, (p.strip() for p in str(text).split(","))):
        lib, sep, version = item.partition("=")
        if not sep:
            raise FieldError("versions", item, "library=version, e.g. transformers=4.45")
        pairs.append((lib.strip().lower(), version.strip()))
    versions = tuple(sorted(pairs))
    check(versions)
    return tuple(p for p in versions if p[1] != DEFAULTS[p[0]])


def text(versions: Tuple[Tuple[str, str], ...]) -> str:
    """The flag's and the link's form: only what differs from the defaults ('' for none)."""
    return ",".join(f"{lib}={v}" for lib, v in versions)


def assumed(versions: Tuple[Tuple[str, str], ...]) -> Dict[str, str]:
    """Every library's version the plan assumes: the given ones over the defaults."""
    return {**DEFAULTS, **dict(versions)}


def applies(versions: Tuple[Tuple[str, str], ...], key: str, family: Optional[str] = None) -> bool:
    """Whether the row `key` holds for these releases and, for a row of some families only, this plan's vision
    family (model/vision.py PROJECTORS; None: a language model)."""
    row = next(r for r in ROWS if r.key == key)
    if row.families and family not in row.families:
        return False
    return older(assumed(versions)[row.library], row.below)


def family_of(arch) -> Optional[str]:
    """The vision family the family rows are keyed by: the tower's projector (None for a language model)."""
    return arch.vision.projector if getattr(arch, "vision", None) is not None else None


def rows_in_effect(versions: Tuple[Tuple[str, str], ...], family: Optional[str] = None) -> Tuple[VersionRow, ...]:
    return tuple(r for r in ROWS if applies(versions, r.key, family))


def describe(versions: Tuple[Tuple[str, str], ...]) -> str:
    """One line for the report: the versions assumed, the ones set by the plan marked."""
    given = dict(versions)
    return ", ".join(f"{lib} {v}" + ("" if lib in given else " (default)") for lib, v in assumed(versions).items())


def versions_dict(versions: Tuple[Tuple[str, str], ...], family: Optional[str] = None) -> dict:
    """The report's "versions": every library's release assumed, the ones the plan set, and the older-release rows
    in effect for this plan's family with their sources (modelled False: named, not counted)."""
    return {"assumed": assumed(versions), "given": dict(versions),
            "rows": [{"library": r.library, "below": r.below, "row": r.key, "change": r.change, "source": r.source,
                      "checked": r.checked, "modelled": r.modelled, "switch": r.switch}
                     for r in rows_in_effect(versions, family)]}


# One release in each range the rows tell apart, newest first: the page's choices (a link carries the release).
PAGE_RELEASES = {"transformers": ("5.24.0", "5.16.1", "5.15.1", "4.57.1", "4.53.3", "4.51.3", "4.48.3", "4.45.2"),
                 "bitsandbytes": ("0.50.2", "0.43.1")}
