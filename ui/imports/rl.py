"""Loading an RL framework's config into the page (the RL section's uploader): verl's YAML or run script, TRL's
GRPOConfig as YAML or JSON, OpenRLHF's flags. The file is read as data by zerocalc/rl/configs (never executed), as
the CLI's --verl-config / --trl-config / --openrlhf-args read it; its plan settings become the RL fields and its
policy flags the page's own fields (model, micro-batch, recompute, convention, GPUs...). A refusal names the file's
key and leaves the view as it was; every ignored key is listed. Text from the file reaches the page through
ui/drawing/plain.py only (imports._say)."""

from __future__ import annotations

import streamlit as st

from zerocalc.frameworks.common import FrameworkConfigError
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.scenario import FieldError

from ..drawing import plain
from ..server import worker
from ..server.tasks import read_rl
from .configs import _say, clear_upload, refusal, shown_model, upload_key
from ..state.rl import RL_FIELD, RL_VALUES, defaults, values_from_settings
from ..state.fields import ARCH_FIELDS, FIELD, PRECISION_FIELDS, default_for
from ..state.text import parse_value
from ..state.convert import resolve
from ..sidebar.widgets import read_state, set_fields

RL_UPLOAD = "rl_upload"
FORMAT_KEY = "rl_upload_format"
FORMATS = {"guess": "guess from the file", "verl": "verl (YAML or run script)",
           "trl": "TRL GRPOConfig (YAML or JSON)", "openrlhf": "OpenRLHF flags (script or list)"}
# The policy's flags the readers give (today's CLI) -> the page's fields of the same meaning.
POLICY_FIELDS = {"--model": "model", "--micro-batch": "micro_batch", "--micro-batches": "micro_batches",
                 "--recompute": "recompute", "--convention": "convention", "--offload-optimizer": "offload_optimizer",
                 "--finetune": "finetune", "--lora-rank": "lora_rank", "--lora-targets": "lora_targets"}


def _number(text: str):
    """A refused count as the file wrote it: a number when it reads as one (so the message says "a decimal")."""
    try:
        return float(text) if len(text) < 30 else text
    except ValueError:
        return text


def page_values(imported, state: dict) -> tuple:
    """(the page fields the policy's flags set, the flags with no page field). A preset brings its architecture,
    a convention its dtypes, as choosing them in the sidebar does; --gpus sets dp over the page's tp x pp x cp."""
    out, unused = {}, []
    for flag, text in imported.policy.items():
        if flag in POLICY_FIELDS:
            name = POLICY_FIELDS[flag]
            try:
                out[name] = parse_value(FIELD[name], text)
            except ValueError as exc:
                raise FrameworkConfigError(flag.lstrip("-"), text, str(exc)) from None
        elif flag != "--gpus":
            unused.append(flag)
    if "model" in out and out["model"] in MODEL_PRESETS:
        out.update({name: default_for(name, {"model": out["model"]}) for name in ARCH_FIELDS})
    if "convention" in out:
        out.update({name: default_for(name, {"convention": out["convention"]}) for name in PRECISION_FIELDS
                    if name != "convention"})
    gpus = imported.policy.get("--gpus")
    if gpus is not None:
        mp = state["tp"] * state["pp"] * state["cp"]
        text = str(gpus).strip()
        if not text.isascii() or not text.isdigit() or len(text) > 9 or int(text) < 1:   # "8.5" drew an internal error
            raise FrameworkConfigError("GPUs", _number(text), "a whole number of GPUs from 1 to 999,999,999")
        if int(text) % mp:
            raise FrameworkConfigError("GPUs", int(text), f"a multiple of the page's tp x pp x cp ({mp:,})")
        out["workers"], out["shard_group"] = int(text) // mp, 0
    if "policy_stage" in imported.settings:
        stage = imported.settings["policy_stage"]
        if type(stage) is not int or not 0 <= stage <= 3:        # 2.0 from a flag drew no page (issue 38)
            raise FrameworkConfigError("ZeRO stage", stage, "0, 1, 2 or 3 (a whole number)")
        out["stage"] = stage
    return out, unused


def on_rl_upload() -> None:
    upload = st.session_state.get(upload_key(RL_UPLOAD))
    if upload is None:
        return
    name, data = plain.file_name(upload.name), upload.getvalue()
    chosen = st.session_state.get(FORMAT_KEY, "guess")
    fmt = None if chosen == "guess" else chosen
    try:
        before = resolve(read_state())
        gpus = before.scenario.workers * (before.workload.layout.model_parallel if before.workload else 1)
        fmt, imported = worker.call("import", read_rl, fmt, data, gpus)
        rl, unread = values_from_settings(imported.settings)
        page, flags = page_values(imported, before.state)
        after = resolve({**before.state, **page})
        if after.warnings:
            raise FrameworkConfigError("policy", page.get("model", before.state["model"]), after.warnings[0])
    except (FrameworkConfigError, FieldError) as exc:
        fmt = fmt or getattr(exc, "format", None)
        _say("error", f"{name} refused ({FORMATS.get(fmt, 'RL config')}): {refusal(exc)}. The view is unchanged: "
                      f"still showing {shown_model()}.")
        clear_upload(RL_UPLOAD)
        return
    except Exception as exc:  # noqa: BLE001 - anything else: a message here, the trace in the server's log
        _say("error", f"{worker.failure_text(exc, name, 'verl / TRL / OpenRLHF config')} The view is unchanged: "
                      f"still showing {shown_model()}.")
        clear_upload(RL_UPLOAD)
        return
    set_fields(page)
    store = st.session_state.setdefault(RL_VALUES, defaults())
    for field, value in rl.items():
        store[field] = value
        st.session_state[f"rl_{field}"] = value          # the section's live widget, drawn next
    set_rl = ", ".join(f"{RL_FIELD[k].label} = {v}" for k, v in rl.items())
    # the fields the file named (a preset's architecture and a convention's dtypes come with them, unlisted)
    named = {k: v for k, v in page.items() if k not in ARCH_FIELDS and k not in PRECISION_FIELDS or k == "convention"}
    set_page = ", ".join(f"{k} = {v}" for k, v in named.items())
    details = [f"RL settings: {set_rl or 'none'}.", f"The policy (this page's plan): {set_page or 'unchanged'}."]
    details += [f"Not on the page (the CLI reads it): {k}" for k in unread + flags]
    details += [f"Ignored {i['key']}: {i['reason']}" for i in imported.ignored[:50]]
    if len(imported.ignored) > 50:
        details.append(f"... and {len(imported.ignored) - 50:,} more keys ignored.")
    details += list(imported.notes)
    _say("success", f"Imported {name} ({FORMATS[fmt]}): {len(rl)} RL setting(s) and {len(named)} of the policy's "
                    f"field(s) set, {len(imported.ignored):,} key(s) ignored. Open the RL view to see the plan.",
         details)


def loader(box) -> None:
    """The uploader, at the top of the RL section."""
    box.selectbox("RL config format", tuple(FORMATS), key=FORMAT_KEY, format_func=FORMATS.get,
                  help="The framework whose file this is; guess reads verl's actor_rollout_ref keys, OpenRLHF's "
                       "--flags, otherwise a TRL GRPOConfig.")
    box.file_uploader("verl / TRL / OpenRLHF config", type=["yaml", "yml", "json", "sh", "txt"],
                      key=upload_key(RL_UPLOAD), on_change=on_rl_upload,
                      help="Read as data, never executed (1 MB at most): sets the RL plan's settings and the "
                           "policy's model, micro-batch, recompute, precision and GPUs the file states; explicit "
                           "changes afterwards win. Every key it does not read is listed.")
