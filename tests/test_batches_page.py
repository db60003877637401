"""The page and its link take the samples' lengths as the CLI's --lengths does (issue 37: "A length distribution
the user gives: percentiles"): the padded batch's typical step is the same, byte for byte, and a typo is named."""

import json

from tests.app_helpers import core_report, run_app, text_of
from ui.state.fields import FIELD
from ui.state.text import format_value, parse_value
from zerocalc.cli.main import run

QUERY = {"model": "qwen3-8b", "workers": "8", "micro_batch": "8", "seq_len": "8192", "recompute": "full",
         "batch_mode": "padded", "batch_lengths": "p50=600,p90=2400,max=8192"}
FLAGS = ["--model", "qwen3-8b", "--workers", "8", "--micro-batch", "8", "--seq-len", "8192", "--recompute", "full",
         "--batch-mode", "padded", "--lengths", "p50=600,p90=2400,max=8192", "--json"]


def test_the_field_reads_and_writes_percentile_points():
    f = FIELD["batch_lengths"]
    points = parse_value(f, "p50=600, p90=2400, max=8192")
    assert points == ((50, 600), (90, 2400), (100, 8192))
    assert format_value(f, points) == "p50=600,p90=2400,max=8192"
    assert parse_value(f, "") == ()
    for bad in ("p50=600", "p90=100,p50=200,max=300", "p50=x,max=9", "=" * 300):
        try:
            parse_value(f, bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_a_link_with_lengths_plans_what_the_cli_plans():
    cli = json.loads(run(FLAGS))["batch"]
    page = core_report(QUERY)["batch"]
    assert page == cli and page["typical"]["seq_len"] < page["worst"]["seq_len"] == 8192
    at = run_app(QUERY)
    assert at.query_params["batch_lengths"] == "p50=600,p90=2400,max=8192"      # the link keeps them as typed
    said = text_of(at)
    assert "Judged at the worst step: 8 x 8,192 tokens" in said
    assert f"the typical step: 8 x {cli['typical']['seq_len']:,} tokens" in said


def test_a_typo_in_the_lengths_is_named_and_the_last_valid_value_stays():
    at = run_app(QUERY, sections=["sec_step"])
    at.text_input(key="batch_lengths_text").set_value("p50=600,max=x").run()
    assert not at.exception
    said = text_of(at)
    assert "Sample lengths (percentiles)" in said and "allowed" in said
    assert at.query_params["batch_lengths"] == "p50=600,p90=2400,max=8192"
