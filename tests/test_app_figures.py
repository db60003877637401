"""The figures and tables the app draws: every figure is valid Plotly (the app skips Plotly's validation for speed),
one colour per memory term across charts and views, and the activation formulas shown agree with the core."""

import random

import plotly.graph_objects as go
import pytest

from tests.app_helpers import core_report
from ui.drawing import figures, tables
from ui.drawing.figures import TERM_COLORS
from ui.state.convert import from_query, resolve
from zerocalc.answers.ranges import ranges, ranges_dict

VIEWS = [{}, {"model": "mixtral-8x7b", "workers": "16"}, {"model": "params-only"},
         {"model": "llama-3-70b", "workers": "4", "tp": "8", "pp": "2", "sequence_parallel": "true",
          "micro_batches": "8", "seq_len": "4096"},
         {"model": "deepseek-v3", "workers": "64", "ep": "64"}, {"convention": "pure-bf16", "units": "GiB"}]


def band(query):
    r = resolve(from_query(query)[0])
    return None if r.workload is None else ranges_dict(ranges(r.scenario, r.workload))


def built(query):
    report, unit = core_report(query), from_query(query)[0]["units"]
    out = [figures.per_worker(report, unit, "category", 3), figures.per_worker(report, unit, "entry"),
           figures.cluster(report, unit), figures.scaling(report, unit), figures.compare_states(report, report, unit)]
    if "peak" in report:
        out += [figures.overview(report, unit, "category", 1), figures.overview(report, unit, "entry"),
                figures.peak(report, unit, band(query), 2), figures.timeline(report, 1, unit),
                figures.ranks(report, 3, unit), figures.compare_peak(report, report, unit)]
    return out


@pytest.mark.parametrize("query", VIEWS, ids=str)
def test_every_figure_is_valid_plotly(query):
    for fig in built(query):
        go.Figure(fig.to_dict())            # full validation: raises on any unknown or ill-typed property


def colours_by_term(fig) -> dict:
    out = {}
    for t in fig.to_dict()["data"]:
        if t["type"] == "bar":
            name = t["name"].split(": ", 1)[-1]
            out.setdefault(name, set()).add(t["marker"]["color"])
    return out


def test_each_term_keeps_its_colour_across_charts_and_views():
    seen = {}
    for query in ({}, {"convention": "pure-bf16"}, {"master_dtype": "none", "gpu": "L4-24GB"},
                  {"model": "mixtral-8x7b"}, {"stage": "0", "recompute": "full"}):
        for fig in built(query):
            for term, colours in colours_by_term(fig).items():
                assert len(colours) == 1, (term, colours)
                seen.setdefault(term, set()).update(colours)
    for term, colours in seen.items():
        if term in TERM_COLORS:
            assert colours == {TERM_COLORS[term]}, term
        else:
            assert len(colours) == 1, term
    assert {"parameters", "gradients", "optimizer", "activations", "model states", "CUDA context"} <= set(seen)
    assert len(set(TERM_COLORS.values())) == len(TERM_COLORS)          # no two terms share a colour


def test_activation_sizes_are_never_zero_in_the_chosen_system():
    rng = random.Random(5)
    for _ in range(50):
        n = rng.randrange(1, 10**12)
        for unit in ("GB", "GiB"):
            assert not tables.auto(n, unit).startswith("0.00")


def test_a_stage_far_over_the_capacity_is_clipped_so_the_checked_one_stays_readable():
    # 70B on 64 workers: ZeRO-0's peak is 1.9 TB against 85 GB; the axis ends at 1.25 x the checked stage's scale
    # (the capacity, or the checked stage's top when higher) and each clipped bar says its own height
    from tests.app_helpers import figure, run_app
    query = {"model": "llama-3-70b", "workers": "64"}
    at = run_app(query, tab="Peak and step")
    fig = figure(at, "fig_peak")
    report = core_report(query)
    top = fig["layout"]["yaxis"]["range"][1] * 1e9
    assert report["peak"][3]["peak_bytes"] < top < report["peak"][0]["peak_bytes"]
    clipped = [a for a in fig["layout"]["annotations"] if "(clipped)" in a["text"]]
    assert [a["x"] for a in clipped] == ["ZeRO-0", "ZeRO-1", "ZeRO-2"]
    r = resolve(from_query(query)[0])
    band = ranges_dict(ranges(r.scenario, r.workload))["stages"][0]["high_bytes"]     # the bar's band ends there
    assert clipped[0]["text"] == f"↑ {max(band, report['peak'][0]['peak_bytes']) / 1e9:,.2f} GB (clipped)"
    small = figure(run_app({"model": "llama-3.2-1b"}), "fig_overview")      # every stage near the others
    assert "range" not in small["layout"]["yaxis"]
