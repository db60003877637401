"""Untrusted input, everywhere it enters: link parameters, uploaded config.json files, CLI arguments.

Expected for every input: no exception escapes, a bad value gets a message naming the field and what is allowed,
the rest of the state is kept, and the numbers shown are those of the validated state. The number of examples is
bounded for CI; ZEROCALC_FUZZ_EXAMPLES raises it, e.g. the 10,000-case link run:
    ZEROCALC_FUZZ_EXAMPLES=10000 python -m pytest tests/test_fuzz_inputs.py -k link -p no:cacheprovider
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from tests.app_helpers import subtotals, warnings_shown
from ui.drawing.plain import clean
from ui.state.fields import FIELD, FIELDS
from ui.state.convert import canonical, from_query, resolve, to_query
from zerocalc.cli.main import main as cli_main
from zerocalc.model.hf_config import ConfigError, architecture_from_config
from zerocalc.output.report import full_report
from zerocalc.scenario import FieldError
from zerocalc.states.zero import model_states
from zerocalc.units import format_bytes

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("ZEROCALC_FUZZ_EXAMPLES", "0")) or None
FUZZ = settings(max_examples=EXAMPLES or 150, deadline=None, suppress_health_check=list(HealthCheck))
FUZZ_SLOW = settings(max_examples=EXAMPLES or 25, deadline=None, suppress_health_check=list(HealthCheck))

NASTY = st.sampled_from([
    "", " ", "-1", "0", "-0", "+5", "NaN", "nan", "inf", "-inf", "Infinity", "1e400", "1e-400", "9" * 5000,
    "0x10", "1_000", " 7B ", "7b", "1.5", "\x00", "\u2603", "\u202e", "<script>alert(1)</script>", "../../etc/passwd",
    "true", "none", "None", "null", "[]", "{}", "%00", "'; DROP TABLE x; --", "🙂" * 50,
])


def valid_value(f):
    if f.kind == "choice":
        return st.sampled_from(f.choices)
    if f.kind == "bool":
        return st.sampled_from(["true", "false", "1", "0"])
    if f.kind in ("prob", "factor"):
        return st.floats(f.lo, f.hi).map(repr)
    if f.kind == "ints":
        return st.lists(st.integers(0, 10_000), max_size=20).map(lambda v: ",".join(map(str, v)))
    return st.integers(int(f.lo), int(f.hi)).map(str)


values = st.one_of(
    NASTY,
    st.text(max_size=24),
    st.text(min_size=200, max_size=3000),
    st.integers(-10**30, 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(FIELDS).flatmap(valid_value),
)
keys = st.one_of(st.sampled_from([f.name for f in FIELDS]), st.text(max_size=30))
queries = st.dictionaries(keys, st.lists(values, min_size=1, max_size=3), max_size=12)


def check_link(query):
    state, warnings = from_query(query)
    resolved = resolve(state)
    messages = " ".join(warnings + resolved.warnings)
    for key, given_values in query.items():
        if key not in FIELD:
            assert repr(str(key)[:40]) in messages or str(key)[:40] in messages
            continue
        f = FIELD[key]
        try:
            from ui.state.text import parse_value
            parsed = parse_value(f, given_values[-1])
        except (ValueError, ArithmeticError):
            assert key in messages, (key, given_values)          # a refused value is named
            continue
        if resolved.state[key] != parsed:
            assert key in messages or resolved.state[key] == canonical(resolved.state)[key]
    # the state shown is valid and reproducible from its own link
    restored, again = from_query(to_query(resolved.state))
    assert again == [] and restored == canonical(resolved.state)
    return resolved


@FUZZ
@given(queries)
def test_link_parameters_never_escape_and_bad_ones_are_named(query):
    resolved = check_link(query)
    report = full_report(resolved.scenario, resolved.workload)
    w = resolved.workload
    if w is None or (w.layout.is_trivial and w.vocab_rows == w.arch.vocab):   # pure data parallelism: every worker
        assert report["stages"][0]["per_worker_total_bytes"] == model_states(resolved.scenario).stage(0).per_worker_total
    else:                                                                  # a layout: the worst rank's, named
        worst = next(r for r in report["ranks"] if r["name"] == report["stages"][0]["worst_rank"])
        assert report["stages"][0]["per_worker_total_bytes"] == worst["stages"][0]["per_worker_total_bytes"]


@FUZZ_SLOW
@given(queries)
def test_link_parameters_through_the_app(query):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    for key, given_values in query.items():
        at.query_params[key] = given_values
    at.run()
    assert not at.exception, at.exception
    resolved = check_link(query)
    report = full_report(resolved.scenario, resolved.workload)
    unit = resolved.state["units"]
    shown = subtotals(at)
    assert shown == [format_bytes(s["per_worker_total_bytes"], unit) for s in report["stages"]]
    bad = [k for k in query if k not in FIELD]
    shown = warnings_shown(at)
    for key in bad:   # named, and shown literally (as text: ui/drawing/plain.py, never as markdown)
        assert clean(repr(str(key)[:40])) in shown


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
config_keys = st.sampled_from(["model_type", "n_layer", "n_embd", "n_head", "n_inner", "vocab_size", "n_positions",
                               "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                               "intermediate_size", "max_position_embeddings", "head_dim", "hidden_act",
                               "activation_function", "attn_pdrop", "attention_dropout", "tie_word_embeddings",
                               "num_local_experts"])
model_types = st.sampled_from(["gpt2", "llama", "mistral", "qwen2", "phi3", "bert", "mixtral", ""])
configs = st.one_of(
    st.dictionaries(config_keys, st.one_of(json_values, st.integers(0, 5000)), max_size=12).flatmap(
        lambda d: model_types.map(lambda t: {**d, "model_type": t})),
    json_values,
)


@FUZZ
@given(configs)
def test_config_json_is_refused_by_name_or_counted(config):
    text = json.dumps(config)
    for source in (text, text.encode()):
        try:
            arch = architecture_from_config(source)
        except ConfigError as exc:
            assert exc.field and exc.allowed and str(exc).startswith(f"{exc.field}: got ")
        else:
            from zerocalc.model.inventory import param_count
            assert param_count(arch) >= 1


@FUZZ
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(lambda t: "{" + t),
                 st.integers(1, 50).map(lambda n: "[" * 10_000 * n)))
def test_malformed_config_bytes_are_refused(data):
    try:
        architecture_from_config(data if isinstance(data, bytes) else data)
    except FieldError as exc:
        assert exc.field


flags = st.sampled_from(["--params", "--workers", "--shard-group", "--param-dtype", "--grad-dtype", "--master-dtype",
                         "--optimizer", "--optimizer-dtype", "--convention", "--offload-optimizer", "--offload-params",
                         "--gpus-per-node", "--units", "--model", "--micro-batch", "--seq-len", "--attention",
                         "--recompute", "--gpu", "--gpu-memory", "--dropout", "--layers", "--hidden", "--heads",
                         "--ffn", "--vocab", "--largest-layer-params", "--nodes", "--buffer-factor", "--bogus"])
argvs = st.lists(st.tuples(flags, st.one_of(NASTY, st.text(max_size=12), st.integers(-10, 10**20).map(str))),
                 max_size=6).map(lambda pairs: [x for pair in pairs for x in pair])


@FUZZ
@given(argvs, st.booleans())
@example(["--bogus", "\r0"], False)            # a carriage return echoed in the message once broke the line
@example(["--model", "\x1b[2J"], False)
def test_cli_arguments_exit_0_or_2_with_one_line(argv, as_json):
    import contextlib
    import io

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = cli_main(argv + (["--json"] if as_json else []))
        except SystemExit as exc:   # argparse's own exits (--help) only
            code = exc.code
    assert code in (0, 2), (argv, err.getvalue())
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("zerocalc: error: ")
    elif as_json and out.getvalue().strip():
        json.loads(out.getvalue())


@settings(max_examples=EXAMPLES or 8, deadline=None, suppress_health_check=list(HealthCheck))
@given(argvs)
def test_cli_as_a_subprocess_never_prints_a_traceback(argv):
    argv = [a.replace("\x00", "") for a in argv]   # an OS argument cannot hold a NUL byte
    done = subprocess.run([sys.executable, "-m", "zerocalc", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr
