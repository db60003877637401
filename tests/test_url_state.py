"""The link format: any valid state -> URL -> state is the identity; bad links fall back field by field."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ui.state.fields import ARCH_FIELDS, FIELD, FIELDS, PARAMS_ONLY, defaults, default_for
from ui.state.convert import canonical, from_query, resolve, to_query
from ui.state.text import format_value


def value_for(f):
    if f.kind == "choice":
        return st.sampled_from(f.choices)
    if f.kind == "bool":
        return st.booleans()
    if f.kind == "multi":
        return st.lists(st.sampled_from(f.choices), unique=True).map(tuple)
    if f.kind == "ints":                       # a pipeline's layers per stage (ui/state/stages.py)
        return st.lists(st.integers(0, 10_000), max_size=20).map(tuple)
    if f.kind == "points":                     # the samples' lengths (zerocalc/step/batches.py): rising points
        return st.lists(st.integers(1, 10_000), min_size=1, max_size=6).map(_points)
    if f.kind in ("prob", "factor"):
        return st.floats(f.lo, f.hi, allow_nan=False)
    return st.integers(int(f.lo), int(f.hi))


def _points(lengths) -> tuple:
    """Percentile points 1..100 (the last at 100) over sorted lengths, as the core checks them."""
    lengths = sorted(lengths)
    n = len(lengths)
    return tuple((100 * (i + 1) // n, t) for i, t in enumerate(lengths) if i == n - 1 or
                 100 * (i + 1) // n < 100 * (i + 2) // n)


@st.composite
def states(draw):
    state = {}
    for f in FIELDS:  # model and convention are drawn before the fields whose defaults follow them
        state[f.name] = draw(st.one_of(st.just(default_for(f.name, state)), value_for(f)))
    return state


@settings(max_examples=300, deadline=None)
@given(states())
def test_state_to_url_to_state_is_the_identity(state):
    query = to_query(state)
    assert all(isinstance(v, str) for v in query.values())
    restored, warnings = from_query(query)
    assert warnings == []
    assert restored == canonical(state)


@settings(max_examples=100, deadline=None)
@given(states())
def test_resolved_states_round_trip_too(state):
    used = resolve(state).state            # what the app actually shows
    restored, warnings = from_query(to_query(used))
    assert warnings == [] and restored == canonical(used)
    assert resolve(restored).warnings == []


def test_default_view_has_an_empty_link_and_links_are_readable():
    assert to_query(defaults()) == {}
    state, _ = from_query({"model": "llama-3-8b", "workers": "64", "param_dtype": "bf16"})
    state["stage"] = 2
    assert to_query(state) == {"model": "llama-3-8b", "param_dtype": "bf16", "workers": "64", "stage": "2"}


def test_dtype_defaults_follow_the_convention_and_arch_defaults_the_model():
    state, _ = from_query({"convention": "megatron", "model": "gpt2"})
    assert (state["param_dtype"], state["grad_dtype"]) == ("bf16", "fp32")
    assert (state["layers"], state["hidden"], state["norm"]) == (12, 768, "layernorm")


def test_bad_values_fall_back_with_a_warning_naming_them_and_keep_the_rest():
    state, warnings = from_query({"workers": "-3", "micro_batch": "NaN", "gpu": "<script>", "units": "GiB",
                                  "attn_dropout": "1e400", "params": "9" * 100, "zzz": "1"})
    assert state["workers"] == 8 and state["micro_batch"] == 1 and state["gpu"] == FIELD["gpu"].default
    assert state["units"] == "GiB"                             # the valid one is kept
    text = " ".join(warnings)
    for name in ("workers", "micro_batch", "gpu", "attn_dropout", "params", "zzz"):
        assert name in text
    assert "an integer from 1 to 1,048,576" in text


def test_cross_field_conflicts_reset_only_the_offending_field():
    state, _ = from_query({"workers": "12", "shard_group": "5", "model": "gpt2", "heads": "7", "units": "GiB"})
    resolved = resolve(state)
    assert resolved.state["shard_group"] == 0 and resolved.state["heads"] == 12
    assert resolved.state["workers"] == 12 and resolved.state["units"] == "GiB"
    assert any("shard_group" in w for w in resolved.warnings) and any("heads" in w for w in resolved.warnings)


def test_params_only_links_carry_params_and_no_architecture():
    state = defaults()
    state.update(model=PARAMS_ONLY, params=10**9, layers=3)
    query = to_query(state)
    assert query == {"model": PARAMS_ONLY, "params": "1000000000"}
    assert not set(query) & set(ARCH_FIELDS)
    assert format_value(FIELD["attn_dropout"], 0.1) == "0.1"
