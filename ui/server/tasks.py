"""What the worker processes run for the page (ui/server/worker.py): each function reads a visitor's input with the core
and returns plain data. No Streamlit here: a worker imports this module and the core only."""

from __future__ import annotations

COSTED_FIELDS = 40     # Compare: the differing fields whose effect alone is computed (each is two whole reports)


def read_config(data: bytes):
    """A Hugging Face config.json upload: (its model_type / architectures line, the Architecture)."""
    from zerocalc.model.hf_config import architecture_from_config, parse_config
    cfg = parse_config(data)
    return config_name(cfg), architecture_from_config(cfg)


def config_name(cfg: dict) -> str:
    """A config's model_type / architectures[0], cut short (text from the file: shown through ui/drawing/plain.py)."""
    arch = cfg.get("architectures")
    name = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else None
    return " / ".join([str(cfg.get("model_type", "?"))[:40]] + ([name[:60]] if name else []))


def read_rl(fmt, data: bytes, gpus: int):
    """(the format, an RL framework's config read by zerocalc.rl.configs.READERS); the format guessed from the file
    when None. TRL's reader takes the GPUs the policy runs on."""
    from zerocalc.rl.configs import READERS, guess_format
    fmt = fmt or guess_format(data)
    try:
        return fmt, (READERS[fmt](data, processes=gpus) if fmt == "trl" else READERS[fmt](data))
    except Exception as exc:
        exc.format = fmt                    # a refusal's message names the format it was read as
        raise


def _shown(name: str, query: dict, state: dict) -> str:
    from ..state.fields import FIELD, default_for
    from ..state.text import format_value
    if name in query:
        return query[name]
    return format_value(FIELD[name], default_for(name, state)) + " (default)"


def differences(a: dict, b: dict, costed: int = COSTED_FIELDS) -> list:
    """Compare: each field whose link value differs between plan A and plan B, with what it moves changed alone in
    A (zerocalc.answers.fixes.change_effect) for the first `costed` of them; the rest are listed with costed False."""
    from zerocalc.answers.fixes import change_effect, effect_dict

    from ..sidebar.labels import LABELS
    from ..state.fields import DISPLAY_FIELDS, FIELDS
    from ..state.convert import canonical, from_query, resolve, to_query
    qa, qb = to_query(canonical(a)), to_query(canonical(b))
    ra = resolve(a)
    before = (ra.scenario, ra.workload, ra.state["stage"])
    rows = []
    for f in FIELDS:
        name = f.name
        if name in DISPLAY_FIELDS or qa.get(name) == qb.get(name):
            continue
        row = {"field": LABELS.get(name, name), "name": name, "a": _shown(name, qa, a), "b": _shown(name, qb, b),
               "effect": None, "costed": len(rows) < costed}
        if row["costed"]:
            alone = dict(qa)
            if name in qb:
                alone[name] = qb[name]
            else:
                alone.pop(name, None)
            state, warn = from_query(alone)
            r = resolve(state)
            if not warn and not r.warnings and (r.workload is None) == (ra.workload is None):
                row["effect"] = effect_dict(change_effect(before, (r.scenario, r.workload, r.state["stage"])))
        rows.append(row)
    return rows
