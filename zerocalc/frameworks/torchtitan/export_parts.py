"""Parts of the torchtitan export (frameworks/export.py): the [model] it names (issue 35: "the torchtitan export
names its model"), the flavor whose shapes are the view's, from the import's own table (fields.FLAVORS), so that
the file imports back to the preset; and the pipeline's layers per stage as torchtitan's keys say them."""

from __future__ import annotations

from ...model.presets import MODEL_PRESETS
from .fields import FLAVORS

# What decides the bytes of a flavor: two architectures equal on these train the same tensors.
SHAPE = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "experts", "experts_per_token",
         "expert_ffn", "kv_lora_rank", "q_lora_rank", "tied_embeddings")


def _shape(arch) -> tuple:
    return tuple(getattr(arch, f, None) for f in SHAPE)


def torchtitan_model(arch) -> tuple:
    """({"name", "flavor"} or None, notes): the flavor of the view's architecture (an exact preset first, else the
    same shapes), or None with a note naming the flavors torchtitan has."""
    if arch is None:
        return None, []                     # a ledger-only view: nothing to name
    exact = [key for key, preset in FLAVORS.items() if MODEL_PRESETS[preset][0] == arch]
    shaped = [key for key, preset in FLAVORS.items() if _shape(MODEL_PRESETS[preset][0]) == _shape(arch)]
    found = (exact or shaped or [None])[0]
    if found is None:
        known = ", ".join(f"{name} {flavor}" for name, flavor in FLAVORS)
        return None, [f"the view's model is none of torchtitan's flavors ({known}): [model] is not written; a new "
                      "model needs its own flavor in torchtitan's models/*/__init__.py."]
    name, flavor = found
    notes = [f"[model] names torchtitan's {name} {flavor}; hf_assets_path (its tokenizer) is not written."]
    if not exact:
        notes.append(f"{name} {flavor} is {FLAVORS[found]}: the same shapes as the view's model, which differs in "
                     "fields that do not change the bytes (context, rotary scaling).")
    return {"name": name, "flavor": flavor}, notes


def torchtitan_split(lay: dict, parallelism: dict, notes: list) -> None:
    """The view's layers per stage as torchtitan splits them (pipeline_parallel.py generate_llm_fqn_per_model_part):
    the even split is its rule with both ends weighed 0 layers; its own rule keeps its weights (default 1)."""
    names = {"embedding_weight": "pipeline_parallel_first_stage_less_layers",
             "head_weight": "pipeline_parallel_last_stage_less_layers"}
    split = lay.get("stage_split", "even")
    if lay.get("stage_layers"):
        notes.append("the view's layers per stage need module_fqns_per_model_part (the model's module names): "
                     "not written.")
    elif split == "even":
        parallelism.update({name: 0 for name in names.values()})
    elif split == "torchtitan":
        parallelism.update({name: lay[f] for f, name in names.items() if lay.get(f) not in (None, 1)})
    else:
        notes.append(f"the view's {split} split of the layers has no torchtitan key: torchtitan splits by its own "
                     "rule (pipeline_parallel_first / last_stage_less_layers).")
