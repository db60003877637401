"""URL <-> app state: read the link once per session, write it back after every change, show a copyable link.

The link holds the current view's non-default fields as plain parameters (?model=llama-3-8b&workers=64) and, in
compare mode, the pinned plan A's with an "a." prefix (?a.model=llama-3-8b&a.workers=8&workers=16): one URL
carries both plans. Plan A's parameters go through the same field-by-field parsing as the view's.
"""

from __future__ import annotations

import html
import json
from urllib.parse import urlencode, urlsplit, urlunsplit

import streamlit as st

from zerocalc.units import capacity_text, parse_capacity, parse_count

from . import history
from .sidebar.labels import LABELS
from .sidebar.rl import seed as rl_seed, values as rl_values
from .state.rl import RL_PREFIX, from_query as rl_from_query, to_query as rl_to_query
from .state.fields import CUSTOM, FIELD, FIELDS, PARAMS_ONLY
from .state.convert import canonical, from_query, resolve, to_query, unknown_keys_warnings
from .state.stages import LIST_HINT, layers_from_text, layers_text
from .state.step import LENGTHS_HINT, lengths_from_text, lengths_text
from .sidebar.widgets import GPU_MEMORY_TEXT, LENGTHS_TEXT, PARAMS_TEXT, STAGE_LAYERS_TEXT, VALUES, seed, set_fields

PLAN_A = "plan_a"            # session key: the pinned plan's state dict (compare mode)
A_PREFIX = "a."
TABS = ("Overview", "Model states", "Peak and step", "Layouts and ranks", "Compare", "Calibrate",
        "Framework configs", "RL", "How to read it")
VIEW = "view"                # the link's parameter for the open view (?view=compare), and the session key "tab"
VIEW_SLUGS = {name.lower().replace(" ", "-"): name for name in TABS}


def _query() -> dict:
    return {key: st.query_params.get_all(key) for key in st.query_params}


def split_query(query: dict):
    """(the view's parameters, plan A's parameters without their prefix or None, warnings for plan A's keys that
    are not fields)."""
    view, plan, unknown = {}, {}, []
    for key, values in query.items():
        if str(key).startswith(RL_PREFIX):               # the RL plan's settings: parsed by rl_state
            continue
        if str(key).startswith(A_PREFIX):
            name = str(key)[len(A_PREFIX):]
            if name in FIELD:
                plan[name] = values
            else:
                unknown.append(key)
        else:
            view[key] = values
    return view, (plan or None), unknown_keys_warnings(unknown)


def plan_from_query(plan: dict):
    """(plan A's resolved state, warnings prefixed "Plan A: ")."""
    state, warnings = from_query(plan)
    resolved = resolve(state)
    return resolved.state, [f"Plan A: {w}" for w in warnings + resolved.warnings]


def start_session() -> list:
    """On a session's first run, seed every widget (and plan A) from the link; return the link's warnings (once).
    Later runs keep the session's own state, except a run the browser marks as Back or Forward (ui/history.py):
    then the page follows the address bar, as a fresh page reads it."""
    if VALUES in st.session_state:                       # seeded: not the session's first run
        return _follow_link() if history.navigated() else []
    tab, values, plan_a, rl_values_, warnings = _read_link()
    if tab != TABS[0]:
        st.session_state["tab"] = tab
    seed(values)
    if plan_a is not None:
        st.session_state[PLAN_A] = plan_a
    rl_seed(rl_values_)
    return warnings


def _follow_link() -> list:
    """Back or Forward: every field, the open view, plan A and the RL settings as the entry's link says (each live
    widget too), and what the session held beside that link when it wrote it; return the link's warnings."""
    tab, values, plan_a, rl_values_, warnings = _read_link()
    set_fields(values)
    st.session_state["tab"] = tab
    st.session_state[PLAN_A] = plan_a
    rl_seed(rl_values_)
    for name, value in rl_values_.items():               # the RL section's live widgets too
        if f"rl_{name}" in st.session_state:
            st.session_state[f"rl_{name}"] = value
    history.restore(_query())
    return warnings


def _read_link():
    """(the open view, every field's value with the text boxes' text, plan A's state or None, the RL settings,
    the link's warnings) from the address bar, as a fresh page reads it."""
    view, plan, warnings = split_query(_query())
    opened, tab = view.pop(VIEW, None), TABS[0]
    if opened:                                           # the view the link was shared from
        if opened[-1] in VIEW_SLUGS:
            tab = VIEW_SLUGS[opened[-1]]
        else:
            warnings.append(f"Link parameter view={opened[-1][:40]!r} is not a view; allowed: "
                            + ", ".join(VIEW_SLUGS) + ". Opened the overview.")
    state, view_warnings = from_query(view)
    resolved = resolve(state)
    values = {**resolved.state, PARAMS_TEXT: str(resolved.state["params"]),
              GPU_MEMORY_TEXT: capacity_text(resolved.state["gpu_memory"]),
              STAGE_LAYERS_TEXT: layers_text(resolved.state["stage_layers"]),
              LENGTHS_TEXT: lengths_text(resolved.state["batch_lengths"])}
    plan_a = None
    if plan is not None:
        plan_a, plan_warnings = plan_from_query(plan)
        warnings += plan_warnings
    rl_values_, rl_warnings = rl_from_query({str(k)[len(RL_PREFIX):]: v for k, v in _query().items()
                                             if str(k).startswith(RL_PREFIX)})
    return tab, values, plan_a, rl_values_, view_warnings + resolved.warnings + warnings + rl_warnings


# The fields typed as text: (field, its text box, when the box is drawn, how it parses, allowed, the value shown).
TYPED = (
    ("params", PARAMS_TEXT, lambda s: s["model"] == PARAMS_ONLY, parse_count,
     "a count from 1 to 10^18 such as 7B, 1.5T or 124439808", lambda v: f"{v:,}", str),
    ("gpu_memory", GPU_MEMORY_TEXT, lambda s: s["gpu"] == CUSTOM, parse_capacity,
     "a capacity with its unit from 1 GiB to 1 PiB, such as 48 GB, 44.4 GiB or 46068 MiB", capacity_text,
     capacity_text),
    ("stage_layers", STAGE_LAYERS_TEXT, lambda s: s["pp"] > 1 and s["stage_split"] == "even", layers_from_text,
     LIST_HINT + ", or nothing for the even split", layers_text, layers_text),
    ("batch_lengths", LENGTHS_TEXT, lambda s: s["batch_mode"] == "padded", lengths_from_text,
     LENGTHS_HINT + ", or nothing", lengths_text, lengths_text),
)


def texts_into_state(state: dict) -> list:
    """Parse the text boxes (the parameter count, a custom capacity) into the state; for one that does not parse,
    a message naming the field and what is allowed, and the last valid value stays."""
    problems = []
    for name, key, drawn, parse, allowed, shown, as_text in TYPED:
        if not drawn(state):
            continue
        text = st.session_state[VALUES].get(key, as_text(state[name]))
        field = next(f for f in FIELDS if f.name == name)
        try:
            value = parse(text)
            if isinstance(value, int) and not field.lo <= value <= field.hi:
                raise ValueError(f"{value:,} is out of range")
        except ValueError as exc:
            problems.append(f"{LABELS[name]}: {exc}; allowed: {allowed}. Showing the last valid value, "
                            f"{shown(state[name])}.")
            continue
        state[name] = value
        st.session_state[VALUES][name] = value             # the last valid value, kept for a later typo
    return problems


def link_params(state: dict, plan_a: dict = None) -> dict:
    """The link's parameters: the view's non-default fields, then plan A's (a.model always, so that a pinned
    default plan still reads as compare mode)."""
    params = to_query(canonical(state))
    tab = st.session_state.get("tab", TABS[0])
    if tab != TABS[0] and tab in TABS:
        params[VIEW] = next(slug for slug, name in VIEW_SLUGS.items() if name == tab)
    if plan_a is not None:
        a = to_query(canonical(plan_a))
        params[A_PREFIX + "model"] = a.pop("model", plan_a["model"])
        params.update({A_PREFIX + k: v for k, v in a.items()})
    params.update(rl_to_query(rl_values()))              # the RL plan's settings that differ from their defaults
    return params


def sync_url(state: dict) -> dict:
    """Write the state's link parameters to the address bar (only when they changed); return them."""
    params = link_params(state, st.session_state.get(PLAN_A))
    written = {k: [v] for k, v in params.items()}
    if _query() != written:
        st.query_params.from_dict(params)             # a new history entry (ui/history.py): Back returns here
    history.remember(written)
    return params


def share_link(params: dict) -> str:
    try:
        base = st.context.url or ""
    except Exception:  # noqa: BLE001 - outside a browser session (AppTest) there is no page URL
        base = ""
    scheme, netloc, path, _, _ = urlsplit(base)
    query = urlencode(params)
    return urlunsplit((scheme, netloc, path or "/", query, "")) if netloc else f"?{query}"


COPY_BUTTON = """<div class="zc-share"><span class="zc-share-label">Link to this view:</span>
<a class="zc-share-link" id="zc-share-link" href="{href}">{text}</a>
<button class="zc-copy" id="zc-copy" type="button">Copy link</button>
</div>
<script>
(() => {{
  const button = document.getElementById("zc-copy"), link = document.getElementById("zc-share-link");
  if (!button || !link) return;
  // the link shown, not the address bar (which may carry a #fragment or Streamlit's embed parameters)
  button.onclick = () => navigator.clipboard.writeText(link.href).then(() => {{
    button.textContent = "Copied";
    setTimeout(() => {{ button.textContent = "Copy link"; }}, 1500);
  }}, () => {{ button.textContent = "Select the link to copy it"; }});
}})();
</script>
<style>
.zc-share {{ display: flex; flex-wrap: wrap; align-items: center; gap: 0.4rem 0.6rem; font-size: 0.85rem; }}
.zc-share-link {{ overflow-wrap: anywhere; word-break: break-all; min-width: 0; flex: 1 1 16rem; }}
.zc-copy {{ flex: 0 0 auto; padding: 0.25rem 0.8rem; border-radius: 0.4rem; border: 1px solid #8a8a8a;
           background: #f0f2f6; cursor: pointer; font-size: 0.85rem; }}
</style>"""


def link_html(link: str) -> str:
    """The link, wrapped (never cut off or covered), with a visible copy button that copies the link shown; its
    script needs st.html's unsafe_allow_javascript, so this block holds nothing else (the link is escaped: its
    parameters are the state's own canonical values, never a visitor's raw text)."""
    return COPY_BUTTON.format(href=html.escape(link, quote=True), text=html.escape(link))


def plan_json(state: dict) -> str:
    return json.dumps(to_query(canonical(state)), sort_keys=True)
