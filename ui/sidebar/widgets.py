"""Sidebar controls. Each widget's key is its state field's name; the first run seeds the state from the URL, and
choosing a model or a convention resets the fields that follow from it.

The sidebar is light: the few controls every plan sets are always drawn; the rest live in sections (opened from a
row of pills) whose widgets are drawn only while the section is open. Every field's value lives in one session dict
(VALUES), drawn or not: a widget's key exists only while it is drawn (Streamlit drops an undrawn widget's state,
and each selectbox, radio and number input walks every session key), and read_state copies the live widgets'
values into the dict. So a closed section still counts and still reaches the link.
"""

from __future__ import annotations

import functools

import streamlit as st

from zerocalc.defaults import implied
from zerocalc.model.inventory import counts
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.units import capacity_text

from . import rl
from .labels import HELP, LABELS
from ..state.optimizer import OPTIMIZER_OPTIONS
from ..state.step import lengths_text
from ..state.vision import VISION_FIELDS
from ..state.fields import (ARCH_FIELDS, BASIC_ARCH_FIELDS, CUSTOM, DENSE_IDS, DISPLAY_FIELDS, FIELD,
                    FINETUNE_MODE_FIELDS, PARAMS_ONLY, PRECISION_FIELDS, VARIANT_ARCH_FIELDS, base_architecture,
                    default_for)

CHOICE_BUTTONS = {"units", "attention", "breakdown", "recompute"}     # a few short choices: one segmented control
SLIDERS = {"attn_dropout", "resid_dropout", "embd_dropout"}
# The fields of each lazy section (drawn only while it is open; values kept in the state). The fine-tuning section
# draws the training mode and then only the fields that mode reads (state.FINETUNE_MODE_FIELDS).
CLUSTER_FIELDS = ("shard_group", "gpus_per_node", "offload_optimizer", "offload_params", "host_ram_gb",
                  "model_loading", "comm_buffers", "fsdp_wrap", "fsdp_version", "fsdp_use_orig_params",
                  "fsdp_backward_prefetch",
                  "reshard_after_forward", "reduce_dtype")
STEP_FIELDS = ("micro_batches", "attention", "repeat_kv", "activation_dtype", "implementation", "grad_lifetime")
ASSUMPTION_FIELDS = ("cuda_context_bytes", "nccl_buffsize", "nccl_nvls", "nccl_percent", "workspace_bytes", "fragmentation_percent", "measured_extra_bytes",
                     "allocator", "allocator_units",
                     "reduce_bucket_size",
                     "allgather_bucket_size", "prefetch_bucket_size", "max_live_parameters", "param_persistence_threshold", "overlap_comm",
                     "moe_imbalance_percent", "moe_capacity_percent", "buffer_factor")
VALUES = "_values"          # session key: every field's value, the app state
PARAMS_TEXT = "params_text"  # the parameter count as typed (params-only): kept in VALUES beside the fields
GPU_MEMORY_TEXT = "gpu_memory_text"  # a custom capacity as typed, with its unit ("48 GB"): kept beside them too
STAGE_LAYERS_TEXT = "stage_layers_text"  # the layers per pipeline stage as typed ("15,16,16,...")
LENGTHS_TEXT = "batch_lengths_text"      # the samples' lengths as typed ("p50=512,p90=2048,max=8192")
TEXTS = (PARAMS_TEXT, GPU_MEMORY_TEXT, STAGE_LAYERS_TEXT, LENGTHS_TEXT)


def seed(state: dict) -> None:
    """Store a state as the session's values on its first run. A widget that already holds a value is the user's
    own input, sent before that first run finished (typing during the page load): it wins."""
    live = st.session_state.to_dict()
    st.session_state[VALUES] = {name: live.get(name, value) for name, value in state.items()}


def current(name: str):
    """A field's value (or the parameter text's) now: its widget's while the widget is live (a callback, the run
    that draws it), else the stored one."""
    try:                                 # one lookup, not a membership test and then the lookup
        return st.session_state[name]
    except KeyError:
        return st.session_state[VALUES][name]


def set_fields(values: dict) -> None:
    """Set field values from a callback (imports, fixes, compare) or the script; a live widget takes the value
    too, an undrawn one reads it from the store when it is next drawn."""
    store = st.session_state[VALUES]
    if values.get("gpu_memory") is not None:   # the capacity's text box shows what was set, with its unit
        values = {**values, GPU_MEMORY_TEXT: capacity_text(values["gpu_memory"])}
    if "stage_layers" in values:                # the stage counts' text box shows what was set
        values = {**values, STAGE_LAYERS_TEXT: ",".join(str(c) for c in values["stage_layers"])}
    if "batch_lengths" in values:               # and the lengths' box
        values = {**values, LENGTHS_TEXT: lengths_text(values["batch_lengths"])}
    for name, value in values.items():
        store[name] = value
        if name in st.session_state:
            st.session_state[name] = value


def _live_key(name: str) -> None:
    """Seat a widget's value before it is drawn: its own while it is live, else the stored one (a section just
    opened). Set on every run, as every field was before the store: no drawn widget's value rests on what the
    browser last sent alone (one load-test session once came back with every selectbox at its first option).
    The value goes in as the widget holds it: a link's tuple as a list, a preset's whole-number factor as a float."""
    value, kind = current(name), FIELD[name].kind
    if kind == "multi" and not isinstance(value, list):
        value = list(value)
    elif kind == "factor" and isinstance(value, int):
        value = float(value)
    st.session_state[name] = value


def _on_model_change():
    model = st.session_state["model"]
    st.session_state.pop(DENSE_IDS, None)
    st.session_state.pop("import_message", None)
    if model not in (CUSTOM, PARAMS_ONLY):
        chosen = {"model": model}
        set_fields({name: default_for(name, chosen) for name in ARCH_FIELDS})


def _on_schedule_change():     # virtual stages exist only in the interleaved schedule (Megatron needs 2 or more)
    interleaved = st.session_state["schedule"] == "interleaved"
    set_fields({"vpp": max(2, current("vpp")) if interleaved else 1})


def _on_convention_change():
    chosen = {"convention": st.session_state["convention"]}
    set_fields({name: default_for(name, chosen) for name in PRECISION_FIELDS})


def _on_seq_len_change():
    """The + / - buttons (one step of 1) move to the next / previous power of two; a typed value is kept. The
    store still holds the value before the change (read_state copies the live one in after the callbacks)."""
    new, old = st.session_state["seq_len"], st.session_state[VALUES].get("seq_len")
    f = FIELD["seq_len"]
    if old is not None and new == old + 1:
        power = 1
        while power <= old:
            power *= 2
        new = min(power, int(f.hi))
    elif old is not None and new == old - 1 and old > 1:
        power = 1
        while power * 2 < old:
            power *= 2
        new = max(power, int(f.lo))
    set_fields({"seq_len": new})


def _on_targets_change():
    """all-linear stands alone: choosing it replaces the named modules, naming a module replaces it."""
    chosen = list(st.session_state["lora_targets"])
    if "all-linear" in chosen and len(chosen) > 1:
        added_all = chosen[-1] == "all-linear"
        set_fields({"lora_targets": ["all-linear"] if added_all else [t for t in chosen if t != "all-linear"]})


def _implied(trigger: str, targets) -> None:
    """The core's defaults policy (zerocalc/defaults.py), as the CLI applies it: the changed field's rules."""
    fields = {name: current(name) for name in ("pp", "micro_batches", "finetune", "kbit_prepare", "recompute")}
    set_fields(implied(fields, targets, trigger))


def _on_pp_change():
    """A pipeline fills with micro-batches: raising pp above the micro-batches per step sets them to 4 x pp."""
    _implied("pp", ["micro_batches"])


def _on_workers_change():
    """One GPU has nothing to shard: moving to one worker checks ZeRO-0 (ZeRO-3 there reads worse, not better)."""
    if st.session_state["workers"] == 1 and current("stage") == 3 and current("tp") * current("pp") == 1:
        set_fields({"stage": 0})


def _on_finetune_change():
    """QLoRA with peft's kbit preparation checkpoints every block, as prepare_model_for_kbit_training does."""
    _implied("finetune", ["recompute"])


TOTAL_GPUS = "total_gpus"   # session key: dp x tp x pp x cp, shown beside dp; typing a total sets dp from it
TOTAL_NOTE = "total_gpus_note"
JS_SAFE_INTEGER = 2**53 - 1        # Streamlit's number_input refuses bounds beyond JavaScript's exact integers


def _model_parallel() -> int:
    return current("tp") * current("pp") * current("cp")


def _on_total_gpus_change():
    """A total that tp x pp x cp divides sets dp = total / (tp x pp x cp); any other is refused, named."""
    total, mp = st.session_state[TOTAL_GPUS], _model_parallel()
    if total % mp:
        st.session_state[TOTAL_NOTE] = (f"{total:,} GPUs do not split into workers of tp x pp x cp = {mp:,} GPUs: "
                                        f"dp stays {current('workers'):,}. Allowed: a multiple of {mp:,}.")
        return
    set_fields({"workers": total // mp})
    _on_workers_change()


def total_gpus(container) -> None:
    """The world size as an input of its own (64 with tp 8 and pp 2 is dp 4), kept equal to dp x tp x pp x cp."""
    mp = _model_parallel()
    world, top = current("workers") * mp, min(int(FIELD["workers"].hi) * mp, JS_SAFE_INTEGER)
    if world > top:                          # a browser's number box holds integers up to 2^53 - 1 only
        container.caption(f"Total GPUs: {world:,} = dp x tp x pp x cp (too many for the box to edit).")
        return
    st.session_state[TOTAL_GPUS] = world
    container.number_input("Total GPUs (sets dp)", 1, top, step=mp, key=TOTAL_GPUS,
                           on_change=_on_total_gpus_change,
                           help=f"dp x tp x pp x cp. With tp x pp x cp = {mp:,}, a multiple of {mp:,}: typing one "
                                "sets the data-parallel workers.")
    note = st.session_state.pop(TOTAL_NOTE, None)
    if note:
        container.caption(note)


CALLBACKS = {"model": _on_model_change, "schedule": _on_schedule_change, "convention": _on_convention_change,
             "seq_len": _on_seq_len_change, "lora_targets": _on_targets_change, "pp": _on_pp_change,
             "workers": _on_workers_change, "finetune": _on_finetune_change}


def _billions(n: int) -> str:
    return f"{n / 1e9:,.2f}B" if n >= 10**9 else f"{n / 1e6:,.0f}M"


_PRESET_COUNTS: dict = {}


def preset_counts(model: str) -> dict:
    """The core's parameter counts of a preset (computed once per process)."""
    if model not in _PRESET_COUNTS:
        _PRESET_COUNTS[model] = counts(MODEL_PRESETS[model][0])
    return _PRESET_COUNTS[model]


@functools.lru_cache(maxsize=None)     # the picker formats every preset on every run: once per process is enough
def model_label(model: str) -> str:
    if model == CUSTOM:
        return "custom (edit the architecture or load a config)"
    if model == PARAMS_ONLY:
        return "params-only (a parameter count)"
    c = preset_counts(model)
    if c["expert_params"]:
        return f"{model} · {_billions(c['params'])} total, {_billions(c['active_params'])} active"
    return f"{model} · {_billions(c['params'])}"


def widget(name: str, container=st, **extra):
    f = FIELD[name]
    label, help_text = LABELS[name], HELP.get(name)
    _live_key(name)
    if name in CALLBACKS and "on_change" not in extra:
        extra["on_change"] = CALLBACKS[name]
    if name == "stage":
        return container.segmented_control(label, range(4), key=name, required=True, format_func=str,
                                           help=help_text, **extra)   # "ZeRO-0"... would wrap in the sidebar
    if name == "model":
        return container.selectbox(label, f.choices, key=name, help=help_text, format_func=model_label, **extra)
    if f.kind == "choice":
        if name in CHOICE_BUTTONS:
            return container.segmented_control(label, f.choices, key=name, required=True, help=help_text, **extra)
        return container.selectbox(label, f.choices, key=name, help=help_text, **extra)
    if f.kind == "bool":
        return container.checkbox(label, key=name, help=help_text, **extra)
    if f.kind == "multi":
        return container.multiselect(label, f.choices, key=name, help=help_text, **extra)
    if f.kind == "prob":
        return container.slider(label, float(f.lo), float(f.hi), step=0.01, key=name, help=help_text, **extra)
    if f.kind == "factor":
        return container.number_input(label, float(f.lo), float(f.hi), step=0.1, key=name, help=help_text, **extra)
    if name in SLIDERS:
        return container.slider(label, int(f.lo), int(f.hi), step=1, key=name, help=help_text, **extra)
    return container.number_input(label, int(f.lo), int(f.hi), step=1, key=name, help=help_text, **extra)


def _architecture(box) -> None:
    for name in BASIC_ARCH_FIELDS:
        widget(name, box)
    if box.toggle("More: attention variants, latent attention, experts", key="edit_variants"):
        for name in VARIANT_ARCH_FIELDS:
            widget(name, box)
    ids = st.session_state.get(DENSE_IDS)
    if ids:
        box.caption(f"Dense-MLP layers from the loaded config (mlp_only_layers): {', '.join(map(str, ids))}. "
                    "Kept in this session; a link does not carry them.")


def _parallel(box) -> None:
    if _model_parallel() == 1:
        total_gpus(box)
    widget("tp", box)
    widget("sequence_parallel", box)
    widget("pp", box)
    widget("schedule", box)
    if current("schedule") == "interleaved":
        widget("vpp", box)
    if current("pp") > 1:
        widget("stage_split", box)
        if current("stage_split") == "even":
            st.session_state[STAGE_LAYERS_TEXT] = current(STAGE_LAYERS_TEXT)
            box.text_input(LABELS["stage_layers"], key=STAGE_LAYERS_TEXT, help=HELP["stage_layers"])
        if current("stage_split") == "megatron":
            widget("first_stage_layers", box)
            widget("last_stage_layers", box)
    for name in ("cp", "loss_parallel", "vocab_divisor"):
        widget(name, box)
    if current("experts"):
        for name in ("ep", "etp", "moe_dispatcher"):
            widget(name, box)
    else:
        box.caption("Expert parallelism (ep, etp) applies to mixture-of-experts models.")


def _finetune(box) -> None:
    widget("finetune", box)
    names = FINETUNE_MODE_FIELDS[current("finetune")]
    for name in names:
        if name in ("quant_block_size", "double_quant") and current("quant_type") == "int8":
            continue                                   # LLM.int8 keeps a scale per row: no blocks to quantize
        widget(name, box)                              # the LoRA rank a number box: r = 16 is one entry
    if current("finetune") == "full":
        box.caption("Every parameter trains: the ledger applies to all of them.")


def _fields(names):
    def draw(box):
        for name in names:
            widget(name, box)
    return draw


def _precision(box) -> None:
    _fields(("convention",) + PRECISION_FIELDS)(box)
    for name in OPTIMIZER_OPTIONS.get(current("optimizer"), ()):      # what the chosen optimizer reads
        widget(name, box)


def _recipe(box) -> None:
    box.caption("The checkpointing policy is the sidebar's Activation recompute (op: torchtitan's op-level; "
                "selective and full: Megatron's modules and method here).")
    if current("recompute") == "op":
        widget("op_policy", box)
        if current("op_policy") == "own":
            widget("op_saves", box)              # torch's policy function: MUST_SAVE for the ticked ops
    if current("recompute") == "selective":
        widget("recompute_modules", box)         # Megatron's --recompute-modules
    if current("recompute") == "full" and current("recompute_every") == 1:
        widget("recompute_method", box)          # Megatron's --recompute-method / --recompute-num-layers
        widget("recompute_num_layers", box)
    widget("mtp_layers", box)                    # multi-token prediction (an architecture field)
    declared = base_architecture(current("model")).mtp_declared if current("model") in MODEL_PRESETS else 0
    if declared:
        box.caption(f"The model's config declares {declared} MTP module{'s' if declared > 1 else ''} "
                    "(num_nextn_predict_layers): trained by Megatron with --mtp-num-layers, never by Hugging Face.")
    widget("compile", box)
    if current("compile") and current("tp") > 1 and current("sequence_parallel"):
        widget("async_tp", box)                  # torchtitan: Inductor's micro-pipeline TP, compiled blocks only
    if current("recompute") == "full" and current("recompute_every") == 1 and current("recompute_method") == \
            "uniform" and current("recompute_num_layers") == 1:
        widget("activation_offload", box)       # torchtune offloads only with every layer checkpointed
    widget("float8", box)
    if current("float8") == "tensorwise":
        widget("float8_all_gather", box)         # torchao: the float8 all-gather needs tensorwise scaling
    if current("micro_batches") == 1:
        widget("optimizer_in_backward", box)     # torchtune refuses it with gradient accumulation
    else:
        box.caption("The optimizer step in backward needs one micro-batch per step (torchtune refuses "
                    "gradient accumulation with it).")
    widget("transformers_version", box)          # older releases keep other bytes (zerocalc/versions.py)
    if current("finetune") == "qlora":
        widget("bitsandbytes_version", box)
    if current("implementation") == "huggingface":
        widget("loss", box)
        if current("loss") in ("chunked", "torchtitan-chunked"):
            widget("loss_chunks", box)
    else:
        box.caption("The loss is Megatron's own (its fused cross entropy: Step details).")


def _step(box) -> None:
    _fields(STEP_FIELDS)(box)
    widget("batch_mode", box)                   # issue 37: the typical and the worst step
    if current("batch_mode") == "padded":       # the samples' lengths decide the typical step (share.TYPED parses)
        st.session_state[LENGTHS_TEXT] = current(LENGTHS_TEXT)
        box.text_input(LABELS["batch_lengths"], key=LENGTHS_TEXT, help=HELP["batch_lengths"])
    hf = current("implementation") == "huggingface"  # its router loss (MoE) and a loop's held output; Megatron's fusion
    for name in ("router_loss", "holds_output")[:1 + (current("loss") == "auto")] if hf else ("loss_fusion",):
        widget(name, box)
    widget("holds_graph", box)                  # a loop that keeps the last step's loss (LitGPT's)
    if current("recompute") == "full":
        widget("recompute_every", box)


# The lazy sidebar sections, in order: key, its pill, its heading, what draws it (the loaders' drawer is given to
# sidebar()), needs a model with a shape.
SECTIONS = (
    ("sec_load", "Load a config", "Load a config.json, a Hub model or a training config", None, False),
    ("sec_arch", "Architecture", "Architecture", _architecture, True),
    ("sec_precision", "Precision", "Convention, precision and optimizer", _precision, False),
    ("sec_cluster", "Sharding", "Sharding, nodes and offload", _fields(CLUSTER_FIELDS), False),
    ("sec_parallel", "Parallelism", "Model parallelism (tp, pp, cp, ep)", _parallel, True),
    ("sec_recipe", "Recipe", "Recipe: compile, float8, offload, optimizer in backward, loss", _recipe, True),
    ("sec_step", "Step details", "Step details (accumulation, kernels, dtype)", _step, True),
    ("sec_finetune", "Fine-tuning", "Fine-tuning (freeze, LoRA, DoRA, QLoRA)", _finetune, True),
    ("sec_vision", "Vision", "Vision-language: images, resolution, pixel budget, tower", _fields(VISION_FIELDS), True),
    ("sec_assumptions", "Assumptions", "Working-set assumptions", _fields(ASSUMPTION_FIELDS), False),
    ("sec_display", "Display", "Display: units and bars (no byte changes)", _fields(DISPLAY_FIELDS), False),
    ("sec_rl", "RL", "RL post-training: algorithm, models, rollout engine (the RL view)", rl.section, True),
)
SECTION_PILLS = {key: pill for key, pill, *_ in SECTIONS}
OPEN_SECTIONS = "sections"      # session key: the keys of the open sections


def sidebar(loaders=None, rl_loader=None) -> None:
    """The common controls, then the sections. `loaders(container)` draws the config / Hub / framework loaders,
    `rl_loader(container)` the RL config's uploader atop the RL section (drawers the page hands in:
    ui/imports/configs.py and ui/imports/rl.py set this module's fields, so it cannot import them).

    The sections open from one row of pills (several at once), not from an expander each: one widget instead of
    eight, and only the open ones draw anything (a section costs the page nothing while it is closed)."""
    sb = st.sidebar
    model = current("model")
    widget("model", sb)
    if model == PARAMS_ONLY:                # a preset's exact counts and source are in the page's header line
        st.session_state[PARAMS_TEXT] = current(PARAMS_TEXT)      # the text as typed, kept in the store
        sb.text_input(LABELS["params"], key=PARAMS_TEXT, help=HELP["params"])
    widget("gpu", sb)
    if current("gpu") == CUSTOM:
        st.session_state[GPU_MEMORY_TEXT] = current(GPU_MEMORY_TEXT)
        sb.text_input(LABELS["gpu_memory"], key=GPU_MEMORY_TEXT, help=HELP["gpu_memory"])
    widget("workers", sb)
    if _model_parallel() > 1:            # beside dp when they differ; else in the Parallelism section (a rerun's
        total_gpus(sb)                   # cost grows with every widget drawn, and there it would repeat dp)
    widget("stage", sb)
    for name in ("micro_batch", "seq_len", "recompute"):
        widget(name, sb)
    chosen = sb.pills("More settings", list(SECTION_PILLS), format_func=SECTION_PILLS.__getitem__,
                      selection_mode="multi", key=OPEN_SECTIONS,
                      help="Open any of these sections (several at once); a closed section keeps its values.") or ()
    for key, _, heading, draw, with_shape in SECTIONS:
        if key not in chosen:
            continue
        box = sb.container(border=True, key=f"box_{key}")
        box.markdown(f"**{heading}**")
        draw = draw or loaders
        if with_shape and model == PARAMS_ONLY:
            box.caption("A bare parameter count has no shape to edit or split: pick a model or load a config.")
        elif draw is not None:
            if key == "sec_rl" and rl_loader is not None:
                rl_loader(box)
            draw(box)


def read_state() -> dict:
    """The state as the widgets hold it now: the live widgets' values copied into the store, then the store's
    fields (params typed as text is parsed by the caller)."""
    store = st.session_state[VALUES]
    live = st.session_state.to_dict()
    for name in live.keys() & store.keys():
        store[name] = live[name]
    state = {name: (tuple(value) if FIELD[name].kind == "multi" else value)
             for name, value in store.items() if name not in TEXTS}
    if DENSE_IDS in live:
        state[DENSE_IDS] = live[DENSE_IDS]
    return state
