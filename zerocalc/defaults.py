"""The defaults policy: what a plan's given fields imply for the fields it leaves unset, as data. The CLI, the page
(its callbacks and a link's missing fields) and the importers apply these same rows, so a plan typed anywhere is
the same job (issue 33: `--pp 2` alone ran one micro-batch in the CLI while the page filled the pipeline).

Fields are the plan's flat names (the link's and the CLI's dests): pp, micro_batches, finetune, kbit_prepare,
recompute. A rule fires only for a target the user did not set, and when its condition holds.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, NamedTuple, Tuple

from .layout import LAYOUT_LIMITS


class Rule(NamedTuple):
    target: str                     # the field it sets
    triggers: Tuple[str, ...]       # the fields whose change (on the page) asks for it
    applies: Callable[[dict], bool]
    value: Callable[[dict], object]
    why: str


def _pipeline_idle(f: dict) -> bool:
    return f.get("pp", 1) > 1 and f.get("micro_batches", 1) < f["pp"]


RULES = (
    Rule("micro_batches", ("pp",), _pipeline_idle,
         lambda f: min(4 * f["pp"], LAYOUT_LIMITS["micro_batches"][1]),
         "a pipeline fills: 4 x pp micro-batches per step (a bubble under a fifth of the step), as Megatron and "
         "torchtitan runs keep a multiple of pp"),
    Rule("recompute", ("finetune", "kbit_prepare"),
         lambda f: f.get("finetune") == "qlora" and f.get("kbit_prepare", True) and f.get("recompute", "none") == "none",
         lambda f: "full",
         "QLoRA with peft's prepare_model_for_kbit_training checkpoints every block (use_gradient_checkpointing=True "
         "by default, peft 0.21.2 other.py)"),
)


def implied(fields: dict, unset: Iterable[str], trigger: str = None) -> Dict[str, object]:
    """target -> value for each rule whose target is unset and whose condition holds on `fields` (the plan with
    its defaults filled in); with `trigger`, only the rules that field's change asks for."""
    free = set(unset)
    out = {}
    for rule in RULES:
        if rule.target in free and (trigger is None or trigger in rule.triggers) and rule.applies({**fields, **out}):
            out[rule.target] = rule.value({**fields, **out})
    return out


def reasons(changes: dict) -> Dict[str, str]:
    """target -> why, for the changes implied() returned (said in the CLI's notes and the page's help)."""
    by_target = {r.target: r.why for r in RULES}
    return {k: by_target[k] for k in changes}


TARGETS = tuple(dict.fromkeys(r.target for r in RULES))


def link_defaults(state: dict, default: dict) -> dict:
    """target -> the value a link that leaves it out reads back (its plain default, or what a rule implies from
    the other fields): a link carries a target only where the state differs from this (micro_batches 1 under
    pp 2 is written, 8 is not)."""
    return {t: implied({**state, t: default[t]}, [t]).get(t, default[t]) for t in TARGETS if t in default}
