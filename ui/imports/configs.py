"""Loading a model or a job: a Hugging Face config.json upload, a Hub model id, and a framework config (DeepSpeed
ds_config.json, accelerate YAML, torchtitan TOML, and the launchers' LLaMA-Factory, axolotl, torchtune and LitGPT YAML,
ms-swift's arguments and TrainingArguments / TRL config). Each success sets the widgets' values and leaves a line saying
what was loaded; each refusal says why and which model is still shown, keeps the previous view and clears the
uploader (an uploader's file cannot be unset, so its key moves on).

A Hub token typed here lives only in st.session_state["hub_token"]: it is never a state field (so never in the
link or the JSON report), never in a message, a log line or a download.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
from dataclasses import fields as dc_fields

import streamlit as st

from zerocalc.model.inventory import counts, param_count
from zerocalc.model.vision import TOWERS
from zerocalc.model.hf_config import MAX_CONFIG_BYTES, ConfigError, architecture_from_config
from zerocalc.scenario import FieldError
from zerocalc.values import Given

from ..drawing import plain
from ..server import worker
from ..drawing.panels import EXPORTS as EXPORT_SECTIONS, lazy
from ..server.tasks import config_name, read_config
from ..state.fields import ARCH_FIELDS, CUSTOM, DENSE_IDS, FIELD, PARAMS_ONLY, _arch_value
from ..state.text import allowed, format_value, parse_value
from ..state.convert import architecture, resolve
from ..state.stages import NONE as STAGE_NONE
from ..sidebar.widgets import read_state, set_fields

HUB_ENDPOINT_ENV = "ZEROCALC_HUB_ENDPOINT"   # another Hub (a mirror, or the tests' local server); unset: the Hub
HUB_CACHE_ENV = "ZEROCALC_HUB_CACHE"         # where the Hub caches live (one folder per token); unset: a temp folder
# An operator who wants visitors without a token of their own to use the server's HF_TOKEN (or saved login) says
# so by name; otherwise a visitor's request carries their own token or none (README, Hosting).
SERVER_TOKEN_ENV = "ZEROCALC_HUB_SERVER_TOKEN"
_CACHE_SALT = secrets.token_bytes(16)       # per process: a cache folder's name says nothing about its token
MESSAGE = "import_message"                   # (kind, text, details) shown in the main area


def upload_key(name: str) -> str:
    return f"{name}_{st.session_state.get(name + '_n', 0)}"


def clear_upload(name: str) -> None:
    st.session_state[name + "_n"] = st.session_state.get(name + "_n", 0) + 1


def _say(kind: str, text: str, details=()) -> None:
    st.session_state[MESSAGE] = (kind, text, tuple(details))


def describe(value, allowed: str = "") -> str:
    """A refused value, with its type where a number was asked for (so "got '2048'" says it was text)."""
    numeric = any(w in allowed for w in ("integer", "number", "true or false"))
    if not numeric:
        return repr(value)
    if isinstance(value, bool):
        return f"{str(value).lower()} (true/false, not a number)"
    if isinstance(value, str):
        return f"the text {value!r} (a string in quotes: write it without quotes)"
    if isinstance(value, float):
        return f"{value!r} (a decimal number, not a whole number)"
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'JSON object'}"
    return repr(value)


def refusal(exc: FieldError) -> str:
    line = getattr(exc, "line", None)
    where = f" (line {exc.line}, column {exc.column})" if line else ""
    # the importers' own words for what was given (zerocalc/values.py); a Given value is such words already
    given = getattr(exc, "given", None) or (str(exc.value) if isinstance(exc.value, Given) else None)
    return f"{exc.field}{where}: got {given or describe(exc.value, str(exc.allowed))}; allowed: {exc.allowed}"


def shown_model() -> str:
    """What the page shows now, for "still showing ..." after a refusal."""
    state = read_state()
    model = state["model"]
    if model == PARAMS_ONLY:
        return f"params-only, {state['params']:,} parameters"
    try:
        arch = architecture(state)
    except FieldError:
        return model
    name = "the custom architecture" if model == CUSTOM else model
    return f"{name} ({param_count(arch):,} parameters, {arch.layers:,} layers)"


def model_summary(arch) -> str:
    c = counts(arch)
    moe = (f"; {arch.experts} experts, top-{arch.experts_per_token}: {c['active_params']:,} active per token"
           if arch.experts else "")
    return f"{c['params']:,} parameters, {arch.layers:,} layers{moe}"


def set_architecture(arch) -> None:
    """The model becomes custom with every architecture field from `arch` (the config.json upload's path)."""
    values = {"model": CUSTOM, **{name: _arch_value(arch, name) for name in ARCH_FIELDS}}
    set_fields(values)
    if arch.dense_layer_ids:
        st.session_state[DENSE_IDS] = tuple(arch.dense_layer_ids)
    else:
        st.session_state.pop(DENSE_IDS, None)


def on_config_upload() -> None:
    key = upload_key("config_upload")
    upload = st.session_state.get(key)
    if upload is None:
        return
    name = plain.file_name(upload.name)
    try:
        data = upload.getvalue()
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError("config", f"{len(data):,} bytes", f"at most {MAX_CONFIG_BYTES:,} bytes")
        title, arch = worker.call("import", read_config, data)
    except (ConfigError, FieldError) as exc:  # every refusal names the config key and what is allowed
        _say("error", f"{name} refused: {refusal(exc)}. Still showing {shown_model()}.")
        clear_upload("config_upload")
        return
    except Exception as exc:  # noqa: BLE001 - anything else: a message here, the trace in the server's log
        _say("error", f"{worker.failure_text(exc, name, 'Hugging Face config.json')} Still showing "
                      f"{shown_model()}.")
        clear_upload("config_upload")
        return
    set_architecture(arch)
    _say("success", f"Loaded {name}: {title}, {model_summary(arch)}.")


def visitor_token(typed):
    """The token a visitor's fetch sends: the one they typed; else none at all (False), unless the operator opted
    in to the server's own (None: huggingface_hub's HF_TOKEN or saved login)."""
    typed = (typed or "").strip() if isinstance(typed, str) else ""
    if typed:
        return typed
    return None if os.environ.get(SERVER_TOKEN_ENV, "").strip() == "1" else False


def hub_cache(token) -> str:
    """The cache folder for requests made with this token: one per token, one for the server's, one for none. A
    config fetched with a visitor's token (a gated model's) is never served to a request made with another: the
    Hub's cache answers a pinned commit without asking the Hub again."""
    base = os.environ.get(HUB_CACHE_ENV) or os.path.join(tempfile.gettempdir(), "zerocalc-hub")
    if token is False:
        name = "anonymous"
    elif token is None:
        name = "server-token"
    else:
        name = "token-" + hmac.new(_CACHE_SALT, token.encode(), hashlib.sha256).hexdigest()[:24]
    return os.path.join(base, name)


def hub_fetch():
    """zerocalc.model.hub.fetch.fetch_config with the visitor's token (or none), the endpoint from the environment
    and the cache folder of that token."""
    from zerocalc.model.hub.fetch import fetch_config
    token = visitor_token(st.session_state.get("hub_token"))
    return fetch_config(st.session_state.get("hub_id", "").strip(),
                        revision=(st.session_state.get("hub_revision") or "").strip() or None,
                        token=token, timeout_s=10, endpoint=os.environ.get(HUB_ENDPOINT_ENV) or None,
                        cache_dir=hub_cache(token))


def on_hub_fetch() -> None:
    from zerocalc.model.hub.ids import HubError, shown
    try:
        hub = hub_fetch()
        arch = architecture_from_config(hub.config)
    except (HubError, ConfigError, FieldError) as exc:   # hub.py keeps the token out of every message
        _say("error", f"Hub model refused: {refusal(exc)}. Still showing {shown_model()}.")
        return
    except Exception as exc:  # noqa: BLE001 - the log gets the trace (never the token: it is no argument here)
        _say("error", f"{worker.failure_text(exc, 'the Hub model', 'Hub model id')} Still showing {shown_model()}.")
        return
    set_architecture(arch)
    ours = param_count(arch)
    details = []
    if hub.safetensors_total_size is not None:
        details.append(f"Published safetensors: {hub.safetensors_total_size:,} bytes of tensors; ours: "
                       f"{ours:,} parameters.")
    elif hub.safetensors_file_size is not None:
        details.append(f"Published model.safetensors: {hub.safetensors_file_size:,} bytes (header included); "
                       f"ours: {ours:,} parameters.")
    if hub.published_dtype_note:
        details.append(hub.published_dtype_note[:1].upper() + hub.published_dtype_note[1:] + ".")
    details += [str(n) for n in hub.notes]
    commit = f" (commit {hub.commit[:12]})" if hub.commit else ""
    _say("success", f"Fetched {hub.repo_id}@{shown(hub.revision)}{commit}: {config_name(hub.config)}, "
                    f"{model_summary(arch)}.", details)


# --- framework configs --------------------------------------------------------------------------------------

FRAMEWORK_NAMES = {"deepspeed": "DeepSpeed ds_config.json", "accelerate": "accelerate config YAML",
                   "torchtitan": "torchtitan TOML", "llamafactory": "LLaMA-Factory YAML",
                   "hf_trainer": "Hugging Face TrainingArguments / TRL config", "axolotl": "axolotl YAML",
                   "torchtune": "torchtune recipe YAML", "litgpt": "LitGPT YAML",
                   "swift": "ms-swift arguments"}


def _ui_value(name: str, value):
    """A core value as the widget holds it (None dtype -> "none", no shard group -> 0, auto activation dtype)."""
    if value is None:
        return {"shard_group": 0, "activation_dtype": "auto", "vocab_divisor": 0, "reduce_dtype": "auto",
                "workspace_bytes": -1, "fragmentation_percent": -1, **STAGE_NONE}.get(name, "none")
    return value


def _check(name: str, value, source: str):
    """The value if the field's widget can hold it, else a refusal naming the file's key."""
    from zerocalc.frameworks import FrameworkConfigError
    f = FIELD[name]
    try:
        if parse_value(f, format_value(f, value)) == value:
            return value
    except (ValueError, ArithmeticError, TypeError):
        pass
    raise FrameworkConfigError(source, value, f"a value zerocalc's {name} field allows ({allowed(f)})")


def framework_fields(imported, applied, state: dict) -> dict:
    """The widget values an import sets: its scenario, workload and layout fields (world size -> workers)."""
    from zerocalc.frameworks import FrameworkConfigError
    out = {}
    s, w = applied.scenario, applied.workload
    for name in imported.scenario:
        if name in FIELD:
            out[name] = _check(name, _ui_value(name, getattr(s, name)), imported.sources.get(f"scenario.{name}",
                                                                                           name))
    for name in imported.workload:
        if name in FIELD and w is not None:
            out[name] = _check(name, _ui_value(name, getattr(w, name)), imported.sources.get(f"workload.{name}",
                                                                                           name))
        elif name == "gpu_memory" and getattr(w, "gpu_memory", None):
            out["gpu"] = CUSTOM
    for name in imported.finetune:        # FineTune fields: the page's field is the CLI's dest (mode -> finetune)
        page = "finetune" if name == "mode" else name
        if page == "vision_training" and (w is None or w.arch is None or w.arch.vision is None) and \
                {**state, **out}.get("model") not in TOWERS:
            continue                          # a launcher's tower keys: no tower on a language model alone
        if page in FIELD and w is not None:
            out[page] = _check(page, _ui_value(page, getattr(w.finetune, name)),
                               imported.sources.get(f"finetune.{name}", name))
    if "recompute" in out and "recompute_every" not in out:
        out["recompute_every"] = 1            # a file that sets recompute means every block unless it says N
    layout = dict(applied.layout)
    gpus = layout.pop("gpus", None)
    for name, value in layout.items():
        if name in FIELD:
            out[name] = _check(name, _ui_value(name, value), imported.sources.get(f"layout.{name}", name))
    if out.get("schedule") == "interleaved" and "vpp" not in out and state["vpp"] < 2:
        out["vpp"] = 2
    if gpus and "workers" not in imported.scenario:
        merged = {**state, **out}
        mp = merged["tp"] * merged["pp"] * merged["cp"]
        if gpus % mp:
            raise FrameworkConfigError(imported.sources.get("layout.gpus", "gpus"), gpus,
                                       f"a multiple of tp x pp x cp ({mp:,})")
        out["workers"], out["shard_group"] = gpus // mp, 0
    return out


# What an import keeps from the page where the file does not say it (issue 33): the model it is loaded for (unless
# the file names one), the GPU and GPU count it runs on, the data it trains on, and the display. Everything else
# starts at its default, so nothing of an earlier plan or import leaks into the file's job.
KEPT_BY_IMPORT = ("model", "gpu", "gpu_memory", "workers", "seq_len", "micro_batch", "units", "breakdown")


def import_base(state: dict, model: str) -> tuple:
    """(the plan an import starts from, the fields kept from the page): every field at its default for the model
    (the file's preset, else the page's), but KEPT_BY_IMPORT and, for the page's own model, its architecture."""
    from ..state.convert import from_query
    model = model or state["model"]
    base = from_query({"model": model})[0]
    kept = [k for k in KEPT_BY_IMPORT if k != "model" or model == state["model"]]
    kept += list(ARCH_FIELDS) if model == state["model"] else []
    return {**base, **{k: state[k] for k in kept}}, [k for k in kept if k not in ARCH_FIELDS]


def on_framework_upload() -> None:
    from zerocalc.cli.frameworks import apply_import, context_for
    from zerocalc.frameworks import FrameworkConfigError, guess_format, import_config
    from zerocalc.frameworks.base_file import import_with_base

    key = upload_key("framework_upload")
    upload = st.session_state.get(key)
    if upload is None:
        return
    name = plain.file_name(upload.name)         # the stage table and its CSV show it too: marked once, here
    fmt = guess_format(upload.name, upload.getvalue()) or "deepspeed"
    state = read_state()
    try:
        model = worker.call("import", import_config, fmt, upload.getvalue(), None).model   # the file's own model
        base, kept = import_base(state, model)
        before = resolve(base)
        arch = architecture(before.state) if before.state["model"] != PARAMS_ONLY else None
        lay = {f.name: getattr(before.workload.layout, f.name) for f in dc_fields(before.workload.layout)} \
            if before.workload is not None else {}
        lay["gpus"] = before.scenario.workers * (before.workload.layout.model_parallel if before.workload else 1)
        context = context_for(before.scenario, before.workload, arch, lay)
        data = upload.getvalue()
        # the import, and the file as data for the Export tab to write over (as the CLI's --export does)
        imported, over = worker.call("import", import_with_base, fmt, data, context)
        applied = apply_import(imported, before.scenario, before.workload)
        values = framework_fields(imported, applied, before.state)
        if imported.selected_stage is not None:
            values["stage"] = imported.selected_stage
        after = resolve({**before.state, **values})
        if after.warnings:        # a layout the model cannot take: named by the file's key that set it
            bad = next((k for k in values if after.state[k] != values[k]), None)
            source = imported.sources.get(f"layout.{bad}") or imported.sources.get(f"scenario.{bad}") or bad
            raise FrameworkConfigError(source or "config", values.get(bad), after.warnings[0])
    except (FrameworkConfigError, FieldError) as exc:
        _say("error", f"{name} refused ({FRAMEWORK_NAMES[fmt]}): {refusal(exc)}. The view is unchanged: still "
                      f"showing {shown_model()}.")
        clear_upload("framework_upload")
        return
    except Exception as exc:  # noqa: BLE001 - anything else: a message here, the trace in the server's log
        _say("error", f"{worker.failure_text(exc, name, 'Training config')} The view is unchanged: still showing "
                      f"{shown_model()}.")
        clear_upload("framework_upload")
        return
    plan = {**before.state, **values}
    reset = [k for k in plan if k not in values and plan[k] != state.get(k)]
    set_fields({k: v for k, v in plan.items() if v != state.get(k)})
    if plan["model"] != state["model"]:
        st.session_state.pop(DENSE_IDS, None)
    st.session_state["framework_import"] = {"name": name, "format": fmt, "stage": imported.selected_stage,
                                            "over": over}
    stage = "" if imported.selected_stage is None else f" ZeRO-{imported.selected_stage} selected;"
    changed = ", ".join(f"{k} = {v}" for k, v in values.items() if k != "stage")
    details = [f"Set: {changed or 'nothing beyond the stage'}."]
    if model:
        details.append(f"Model: {model}, the preset the file's model names.")
    details.append("Kept from the page (the file does not say them): " + (", ".join(
        f"{k} = {format_value(FIELD[k], before.state[k])}" for k in kept if k not in values) or "nothing") + ".")
    if reset:
        details.append("Back at their defaults (a file describes a whole job; nothing of the page's earlier plan "
                       "or import stays): " + ", ".join(reset[:20]) + (" ..." if len(reset) > 20 else "") + ".")
    details += [f"\"auto\" {a['key']} = {a['value']}: {a['how']}" for a in imported.auto_keys]
    details += [f"Ignored {i['key']}: {i['reason']}" for i in imported.ignored_keys]
    if imported.ignored_more:
        details.append(f"... and {imported.ignored_more:,} more keys ignored.")
    details += list(imported.notes)
    _say("success", f"Imported {name} ({FRAMEWORK_NAMES[fmt]}):{stage} {len(imported.auto_keys)} \"auto\" "
                    f"key(s) resolved, {len(imported.ignored_keys) + imported.ignored_more:,} key(s) ignored.", details)


def loaders(box) -> None:
    """The loaders, drawn inside the sidebar's "Load" section."""
    box.file_uploader("Hugging Face config.json", type=["json"], key=upload_key("config_upload"),
                      on_change=on_config_upload, help="Parsed as JSON, never executed. 1 MB at most. The model "
                                                       "becomes custom with the config's architecture.")
    box.text_input("Hub model id (ORG/NAME)", key="hub_id", placeholder="meta-llama/Llama-3.1-8B",
                   help="Fetches config.json (and the safetensors index for the published size) from the Hugging "
                        "Face Hub: no weights, no remote code.")
    box.text_input("Revision (optional)", key="hub_revision", placeholder="main",
                   help="A branch, tag or 40-hex commit.")
    box.text_input("Access token (optional, gated models)", key="hub_token", type="password",
                   help="Kept in this browser session only: never in the link, the report, a download or a "
                        "message. Empty: no token is sent (the server's own only where its operator allows it).")
    box.button("Fetch from the Hub", key="hub_fetch", on_click=on_hub_fetch)
    box.file_uploader("Training config: ds_config.json, accelerate YAML, torchtitan TOML, LLaMA-Factory, axolotl, "
                      "torchtune or LitGPT YAML, ms-swift config or script, TrainingArguments / TRL config",
                      type=["json", "yaml", "yml", "toml", "sh"], key=upload_key("framework_upload"),
                      on_change=on_framework_upload,
                      help="Read as data, never executed: sets the stage, precision, offload, buckets, batch and "
                           "parallel degrees the file states (\"auto\" resolved as the Hugging Face integration "
                           "does); everything it does not say starts at its default, except the model (unless the "
                           "file names one), the GPU and its count, the sequence and micro-batch. A launcher's "
                           "file (LLaMA-Factory, axolotl, torchtune, LitGPT, ms-swift, the Trainer) also sets the "
                           "model, the method (full / freeze / LoRA / QLoRA) and the lengths; the DeepSpeed file it "
                           "names cannot be reached from an upload (load it too).")


# --- export ---------------------------------------------------------------------------------------------------

EXPORTS = (("deepspeed", "ds_config.json", "application/json", "json"),
           ("accelerate", "accelerate_fsdp.yaml", "application/x-yaml", "yaml"),
           ("torchtitan", "torchtitan.toml", "application/toml", "toml"))


def export_inputs(resolved) -> tuple:
    """(scenario, workload, layout, stage) as the exporters take them (cli_frameworks.export_from_args's dicts)."""
    s = {f.name: getattr(resolved.scenario, f.name) for f in dc_fields(resolved.scenario)}
    w = {} if resolved.workload is None else {f.name: getattr(resolved.workload, f.name)
                                             for f in dc_fields(resolved.workload)}
    lay = {}
    if resolved.workload is not None:
        layout = resolved.workload.layout
        lay = {f.name: getattr(layout, f.name) for f in dc_fields(layout)}
        lay["gpus"] = layout.world(resolved.scenario.workers)
    return s, w, lay, resolved.state["stage"]


def exports_tab(resolved) -> None:
    from zerocalc.frameworks import FrameworkConfigError
    from zerocalc.frameworks.export import export_caveats, export_config

    from ..drawing.figures import STAGE_LABELS

    s, w, lay, stage = export_inputs(resolved)
    imported = st.session_state.get("framework_import")
    if imported:
        plain.caption(f"Imported {imported['name']}; its stage "
                      f"({'none' if imported['stage'] is None else STAGE_LABELS[imported['stage']]}) is marked in "
                      f"the stage table and checked in the verdict.")
    st.markdown(f"The current view ({STAGE_LABELS[stage]}, the stage being checked) as each framework's config. "
                "Importing a download gives back every field the format can express.")
    for fmt, filename, mime, language in EXPORTS:
        # over the uploaded file when it is of this format: the keys it read pass through, its "auto" stays auto
        over = imported.get("over", {}) if imported and imported["format"] == fmt else {}
        if over:
            plain.caption(f"{filename} is written over the imported {imported['name']}: keys zerocalc does not model "
                          "pass through unchanged, its \"auto\" values stay auto; the caveats list both.")
        try:
            text = export_config(fmt, s, w, lay, stage, **over)
            caveats = export_caveats(fmt, s, w, lay, stage, **over)
        except (FrameworkConfigError, FieldError) as exc:
            plain.alert("warning", f"{filename}: this view cannot be written as {FRAMEWORK_NAMES[fmt]}: {exc}")
            continue
        st.download_button(f"Download {filename}", text.encode("utf-8"), file_name=filename, mime=mime,
                           key=f"export_{fmt}", on_click="ignore")
        # drawn when opened: three highlighted code blocks cost the browser more than the rest of the view
        if box := lazy(f"{filename}: contents and what it cannot express ({len(caveats)})", EXPORT_SECTIONS[fmt]):
            with box:
                st.code(text, language=language, wrap_lines=True)
                if caveats:
                    plain.alert("info", "What it cannot express:", caveats)
