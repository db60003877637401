"""The pipeline's stage split in the app's state (zerocalc.layout: Layout.stage_layers, stage_split and the split
rules' parameters): the fields as a link carries them, and the Layout keywords they give.

A link value is untrusted: the layer counts are read by zerocalc.layout.parse_stage_layers, which bounds the text
before it reads it (at most MAX_STAGE_LIST_CHARS characters, MAX_STAGES counts of at most 5 ASCII digits each).
Where the core has None, the state holds a value a link never needs to carry: no counts (), no first / last stage
layers 0 (Megatron refuses 0 layers there), a weight of -1 (the split rule's own default).
"""

from __future__ import annotations

from zerocalc.layout import MAX_STAGES, STAGE_LAYER_LIMITS, STAGE_SPLITS, parse_stage_layers

STAGE_NAMES = ("stage_split", "stage_layers", "first_stage_layers", "last_stage_layers", "embedding_weight",
               "head_weight")
NONE = {"stage_layers": (), "first_stage_layers": 0, "last_stage_layers": 0, "embedding_weight": -1,
        "head_weight": -1}
LIST_HINT = (f"layer counts from {STAGE_LAYER_LIMITS[0]} to {STAGE_LAYER_LIMITS[1]:,}, one per pipeline stage in "
             f"schedule order (pp x vpp of them, at most {MAX_STAGES:,})")


def stage_fields(field) -> tuple:
    """The fields, built with ui.state.fields's Field (kind "ints": a tuple of counts, written "7,8,8,...")."""
    hi = STAGE_LAYER_LIMITS[1]
    return (field("stage_split", "choice", "even", STAGE_SPLITS), field("stage_layers", "ints", (), (LIST_HINT,)),
            field("first_stage_layers", "int", 0, (), 0, hi), field("last_stage_layers", "int", 0, (), 0, hi),
            field("embedding_weight", "int", -1, (), -1, hi), field("head_weight", "int", -1, (), -1, hi))


def parse_ints(text: str) -> tuple:
    """A link's layer counts; FieldError (a ValueError) for anything else."""
    return parse_stage_layers(text)


def stage_layout(state: dict) -> dict:
    """The Layout keywords of the state's stage split."""
    out = {"stage_split": state["stage_split"]}
    for name, none in NONE.items():
        value = state[name]
        out[name] = None if value == none else (tuple(value) if name == "stage_layers" else value)
    return out


def ui_value(name: str, value):
    """A core value as the state holds it (None -> its sentinel), for imports and fixes."""
    return NONE[name] if value is None and name in NONE else value


def layers_text(counts) -> str:
    """The counts as the text box shows them: "7,8,8,7"; nothing when none are given."""
    return ",".join(str(c) for c in counts)


def layers_from_text(text: str) -> tuple:
    """The text box's counts (nothing: none given, the split rule decides); FieldError for anything else."""
    return () if not str(text).strip() else parse_stage_layers(text)
