"""Issue 36: what a view draws at once and what waits for a click. The Peak view draws its one chart, tables and
solver sentences; the sweep, the step timeline, the assumption ranges, the activation terms and the fits-on table
each live in a section drawn (and computed) only while open; so do Model states' scaling chart and DeepSpeed's
estimator (the report's answers asked for only then), the GPU catalogue, the exported configs and the probe. The
fixes are searched in a worker while the view is drawn and land in the place kept for them, above the view
switcher."""

from streamlit.testing.v1 import AppTest

from tests.app_helpers import APP, all_tables, core_report, dataframe_with, has_figure, open_lazy, table
from ui.server import compute
from ui.state.convert import from_query, resolve
from zerocalc.units import format_bytes
from ui.drawing.figures import STAGE_LABELS
from ui.drawing.panels import (CATALOGUE, CLUSTER, DEEPSPEED, LAZY_SECTIONS, PEAK_ACTIVATIONS, PEAK_FITS_ON,
                               PEAK_RANGES, PEAK_SWEEP, PEAK_TIMELINE, EXPORTS, OVERVIEW_CHART, PROBE, SCALING)


def app(query: dict, tab: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    at.session_state["tab"] = tab
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_peak_view_draws_its_secondary_sections_only_when_opened():
    at = app({"model": "llama-3-8b"}, "Peak and step")
    assert has_figure(at, "fig_peak") and len(at.get("plotly_chart")) == 1          # one chart per view
    assert not has_figure(at, "fig_timeline") and not has_figure(at, "fig_sweep")
    assert "GPU" not in {c for df in all_tables(at) for c in df.columns}        # the fits-on table is not drawn
    assert {"Sweep", "Step timeline", "Assumption ranges", "Activation terms", "Fits on"} <= {
        e.label.split(":")[0].split(" saved")[0] for e in at.expander}
    open_lazy(at, (PEAK_SWEEP, PEAK_TIMELINE, PEAK_FITS_ON))
    at.run()
    assert has_figure(at, "fig_sweep") and has_figure(at, "fig_timeline") and len(table(at, "fits_on_table")) > 10
    assert not any(df.columns.tolist()[:1] == ["term"] for df in all_tables(at))   # activations still closed
    open_lazy(at, (PEAK_RANGES, PEAK_ACTIVATIONS))
    at.run()
    assert len(table(at, "activation_table")) > 5
    at.session_state["tab"] = "Overview"
    at.run()
    at.session_state["tab"] = "Peak and step"
    at.run()
    assert not has_figure(at, "fig_timeline") and not has_figure(at, "fig_sweep")   # a view opened again: closed


def test_model_states_asks_for_the_answers_only_with_scaling_or_the_estimator_open():
    query = {"model": "llama-3-8b", "cuda_context_bytes": "1073742849"}       # a state of its own: cold caches
    at = app(query, "Model states")
    key = compute.state_key(resolve(from_query({k: [v] for k, v in query.items()})[0]).state)
    assert not at.get("plotly_chart")                          # no chart until asked: tables and words first
    open_lazy(at, (CLUSTER,))
    at.run()
    assert has_figure(at, "fig_cluster") and not has_figure(at, "fig_scaling")
    assert not any("estimator" in df.columns for df in all_tables(at))
    assert (key, False, False) in compute._report.results and (key, False, True) not in compute._report.results
    open_lazy(at, (SCALING,))
    at.run()
    assert has_figure(at, "fig_scaling") and (key, False, True) in compute._report.results
    open_lazy(at, (DEEPSPEED,))
    at.run()
    assert len(table(at, "deepspeed_table")) == 8


def test_deepspeed_estimator_and_catalogue_wait_for_their_click():
    about = app({}, "How to read it")
    assert not any("nvidia-smi's figure" in df.columns for df in all_tables(about))
    open_lazy(about, (CATALOGUE,))
    about.run()
    assert any("nvidia-smi's figure" in df.columns for df in all_tables(about))
    assert set(LAZY_SECTIONS) >= {CATALOGUE, DEEPSPEED}


def test_fixes_from_the_worker_equal_the_servers_own_and_are_drawn_above_the_view():
    # A plan that does not fit (Gemma-3-27B on 8 x the default GPU at ZeRO-2): fixes_later starts the search in a
    # worker; its answer is the same list fixes_of computes in the server's process.
    query = {"model": ["gemma-3-27b"], "workers": ["8"], "cuda_context_bytes": ["1073742848"]}
    r = resolve(from_query(query)[0])
    report = compute.report_of(r, False, False)
    assert not report["peak"][r.state["stage"]]["fits"]
    searching = len(compute._fixes.running)
    first = compute.fixes_later(r, report)
    assert len(compute._fixes.running) == searching + 1
    again = compute.fixes_later(r, report)                  # a second run meanwhile: the same search, not another
    assert len(compute._fixes.running) == searching + 1
    waited = first()
    assert again() == waited and (compute.state_key(r.state), False) not in compute._fixes.running   # one search, read
    compute._fixes.results.clear()
    assert waited and waited == compute.fixes_of(r, report)
    at = app({k: v[0] for k, v in query.items()}, "Overview")
    texts = [m.value for m in at.markdown]
    assert any(t.startswith("**What would make") or t.startswith("**Nothing zerocalc tries") for t in texts)


def test_the_fixes_search_starts_before_the_report_only_where_the_plan_may_not_fit():
    # fixes_early: a plan whose peak at the 5 % reserve (no replay) reaches SPECULATE_AT of the card has its search
    # started before the report is built, and fixes_later reads that search instead of starting another; a plan
    # far below the card (Llama-3-8B on 8 GPUs, about 40 % of it) starts nothing.
    query = {"model": ["gemma-3-27b"], "workers": ["8"], "cuda_context_bytes": ["1073742976"]}
    r = resolve(from_query(query)[0])
    key = (compute.state_key(r.state), False)
    compute.fixes_early(r)
    early = compute._fixes.running[key]
    report = compute.report_of(r, False, False)
    assert not report["peak"][r.state["stage"]]["fits"]
    wait = compute.fixes_later(r, report)
    assert compute._fixes.running[key] is early                          # the same search, not a second one
    assert wait() and key not in compute._fixes.running
    compute.fixes_early(r)                                           # answered: read from the cache, none started
    assert key not in compute._fixes.running
    fitting = resolve(from_query({"model": ["llama-3-8b"], "workers": ["8"],
                                  "cuda_context_bytes": ["1073742976"]})[0])
    searching = dict(compute._fixes.running)
    compute.fixes_early(fitting)
    assert compute._fixes.running == searching
    assert compute.report_of(fitting, False, False)["peak"][fitting.state["stage"]]["fits"]


def test_the_longest_sequence_is_searched_in_a_worker_beside_the_report_where_no_fixes_search_runs():
    # longest_early: the Peak view's longest-sequence search (zerocalc.answers.solve.max_seq_len) starts in a worker
    # before the report; longest_of reads that task, and its answer is the server's own; the page starts it only
    # where fixes_early started nothing (a plan that fits), since a session's worker tasks run one at a time.
    query = {"model": ["llama-3-8b"], "workers": ["8"], "cuda_context_bytes": ["1073743104"]}
    r = resolve(from_query(query)[0])
    assert not compute.fixes_early(r)
    compute.longest_early(r)
    key = (compute.state_key(r.state),)
    assert compute._longest.started(key) is not None
    found = compute.longest_of(r)
    assert compute._longest.started(key) is None and compute._longest.cached(key)[0]
    compute._longest.results.clear()
    assert found == compute.longest_of(r) and any(found.values())
    at = app({k: v[0] for k, v in query.items()}, "Peak and step")
    assert any("longest sequence that fits" in m.value for m in at.markdown)


def test_the_exported_configs_and_the_probe_are_highlighted_only_when_opened():
    exports = app({"model": "llama-3-8b"}, "Framework configs")
    labels = {b.proto.label for b in exports.get("download_button")}
    assert {"Download ds_config.json", "Download accelerate_fsdp.yaml", "Download torchtitan.toml"} <= labels
    assert len(exports.code) == 0 and len(exports.expander) == 3
    open_lazy(exports, (EXPORTS["deepspeed"],))
    exports.run()
    assert [c.language for c in exports.code] == ["json"]
    calibrate = app({"model": "llama-3-8b"}, "Calibrate")
    assert "Download zerocalc_probe.py" not in {b.proto.label for b in calibrate.get("download_button")}
    open_lazy(calibrate, (PROBE,))
    calibrate.run()
    assert "Download zerocalc_probe.py" in {b.proto.label for b in calibrate.get("download_button")}


def test_the_overview_is_a_table_of_the_peaks_terms_with_its_chart_drawn_when_opened():
    """No Plotly on the first page (its script alone compiles in about 2 s here: docs/benchmarks.md); the table
    shows each stage's peak term by term, every cell one of the core's figures."""
    query = {"model": "deepseek-v3", "workers": "32", "pp": "8", "ep": "32", "stage": "1"}
    at = app(query, "Overview")
    assert not at.get("plotly_chart")
    report = core_report(query)
    terms = dataframe_with(at, "memory term")
    rows = terms["memory term"].tolist()
    for p in report["peak"]:
        column = terms[STAGE_LABELS[p["stage"]] + (" (checked)" if p["stage"] == 1 else "")].tolist()
        top = p["phases"][p["peak_phase"]]
        for term, nbytes in top.items():
            if nbytes:
                assert column[rows.index(term)] == format_bytes(nbytes, "GB"), term
        assert column[rows.index("peak per GPU")] == format_bytes(p["peak_bytes"], "GB")
        assert column[rows.index("PyTorch can use")] == format_bytes(p["capacity_bytes"], "GB")
    states = terms.iloc[rows.index("model states per worker (the ledger)"), 1:].tolist()
    assert states == [format_bytes(s["per_worker_total_bytes"], "GB") for s in report["stages"]]
    open_lazy(at, (OVERVIEW_CHART,))
    at.run()
    assert has_figure(at, "fig_overview") and len(at.get("plotly_chart")) == 1


def test_a_static_table_escapes_its_cells_and_keeps_the_exact_numbers():
    import pandas as pd

    from ui.drawing.static_table import html_table
    body = html_table(pd.DataFrame([{"name <b>": "<img src=x onerror=alert(1)>\u202e", "GB": 16.060121088,
                                     "n": 12_345, "fits": True}]), "t")
    assert "<img" not in body and "<b>" not in body and "\u202e" not in body and "[U+202E]" in body
    assert 'data-v="16.060121088"' in body and ">16.0601<" in body and ">12,345<" in body and ">yes<" in body
