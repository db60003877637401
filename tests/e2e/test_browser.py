"""The app in a real browser: loads clean, reacts to input, reproduces a shared link, downloads the report."""

import json
import re
from pathlib import Path

from playwright.sync_api import expect

from tests.e2e.conftest import screenshot, wait_ready
from ui.state import from_query, resolve
from zerocalc.report import full_report
from zerocalc.units import format_bytes


def core_report(query):
    resolved = resolve(from_query(query)[0])
    return full_report(resolved.scenario, resolved.workload, resolved.state["buffer_factor"])


def metrics(page):
    return page.locator("[data-testid=stMetricValue]").all_inner_texts()


def open_app(page, server, query=""):
    page.goto(f"{server}/{query}")
    wait_ready(page)
    page.locator("[data-testid=stPlotlyChart]").first.wait_for()


def test_page_loads_without_console_errors_and_draws_every_chart(page, server):
    open_app(page, server)
    expect(page.locator("[data-testid=stPlotlyChart]")).to_have_count(5, timeout=30_000)  # drawn one by one
    report = core_report({})
    assert metrics(page)[:4] == [format_bytes(s["per_worker_total_bytes"], "GB") for s in report["stages"]]
    screenshot(page, "default-view", height=1000)
    screenshot(page, "default-view-full", height=4600)
    assert page.console_errors == []


def test_changing_inputs_updates_numbers_charts_verdict_and_the_link(page, server):
    open_app(page, server)
    before = metrics(page)
    workers = page.get_by_label("Data-parallel workers (dp)", exact=True)
    workers.fill("64")
    workers.press("Enter")
    expect(page).to_have_url(re.compile(r"workers=64"))
    wait_ready(page)
    after = metrics(page)
    report = core_report({"workers": "64"})
    assert after[:4] == [format_bytes(s["per_worker_total_bytes"], "GB") for s in report["stages"]]
    assert after[3] != before[3]

    slider = page.get_by_role("slider", name="Micro-batch")
    for value in (2, 3, 4):   # one key press per rerun: a press during a rerun may be merged into it
        slider.focus()
        slider.press("ArrowRight")
        expect(page).to_have_url(re.compile(rf"micro_batch={value}\b"), timeout=30_000)
        wait_ready(page)
    report = core_report({"workers": "64", "micro_batch": "4"})
    verdicts = [f"{100 * p['utilisation']:.0f}% used" for p in report["peak"]]
    for text in verdicts:
        expect(page.get_by_text(text, exact=True).first).to_be_visible()
    screenshot(page, "after-input-change")
    assert page.console_errors == []


def test_a_shared_link_shows_the_same_numbers(page, server):
    query = "?model=llama-3-8b&workers=64&param_dtype=bf16&grad_dtype=bf16&gpu=H200-141GB&units=GiB"
    open_app(page, server, query)
    report = core_report(dict(kv.split("=") for kv in query[1:].split("&")))
    assert metrics(page)[:4] == [format_bytes(s["per_worker_total_bytes"], "GiB") for s in report["stages"]]
    expect(page.get_by_text("ZeRO-3: fits" if report["peak"][3]["fits"] else "ZeRO-3: does not fit")).to_be_visible()
    assert "workers=64" in page.url and "gpu=H200-141GB" in page.url
    assert page.console_errors == []


def test_json_download_is_the_core_report(page, server, tmp_path):
    open_app(page, server, "?convention=deepspeed&workers=16")
    with page.expect_download() as info:
        page.get_by_role("button", name="JSON: full report").click()
    download = info.value
    assert download.suggested_filename.startswith("zerocalc-") and "deepspeed" in download.suggested_filename
    path = tmp_path / "report.json"
    download.save_as(path)
    data = json.loads(path.read_text())
    expected = core_report({"convention": "deepspeed", "workers": "16"})
    assert data["stages"] == expected["stages"] and data["peak"] == expected["peak"]
    assert data["zerocalc_version"] and data["convention"] == "deepspeed"


def test_uploading_a_config_json_sets_the_architecture(page, server, tmp_path):
    open_app(page, server)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
                                  "vocab_size": 50257, "n_positions": 1024}))
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(str(config))
    expect(page).to_have_url(re.compile(r"model=custom"))
    wait_ready(page)
    expect(page.get_by_text("124,439,808 parameters", exact=False)).to_be_visible()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(str(bad))
    wait_ready(page)
    expect(page.get_by_text("config.json refused", exact=False)).to_be_visible()
    assert page.console_errors == []


def test_invalid_link_parameters_are_named_on_the_page(page, server):
    open_app(page, server, "?workers=lots&gpu=%3Cscript%3E")
    expect(page.get_by_text("Link parameter workers='lots' is not allowed", exact=False)).to_be_visible()
    expect(page.get_by_text("Link parameter gpu='<script>' is not allowed", exact=False)).to_be_visible()
    assert Path(__file__).exists()


def test_a_narrow_screen_has_no_horizontal_overflow(page, server):
    page.set_viewport_size({"width": 400, "height": 1400})
    open_app(page, server)
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    screenshot(page, "narrow", height=1400)


def test_a_layout_link_draws_each_rank_class_against_the_gpu(page, server):
    query = "?model=llama-3-70b&workers=4&tp=8&pp=2&sequence_parallel=true&micro_batches=8&seq_len=4096"
    open_app(page, server, query)
    expect(page.locator("[data-testid=stPlotlyChart]")).to_have_count(6, timeout=30_000)   # + the per-rank chart
    expect(page.get_by_text("Per rank class (pipeline stages)")).to_be_visible()
    report = core_report(dict(kv.split("=") for kv in query[1:].split("&")))
    worst = report["peak"][3]["rank"]
    expect(page.locator("[data-testid=stPlotlyChart] text", has_text="(worst)").first).to_be_attached()
    expect(page.get_by_text(worst).first).to_be_attached()
    expect(page.get_by_text("world 64 GPUs = dp 4 x tp 8 x pp 2 x cp 1", exact=False)).to_be_visible()
    page.get_by_text("Search every tp x pp x cp x dp layout", exact=False).click()
    wait_ready(page)
    expect(page.get_by_role("button", name="CSV: layouts")).to_be_visible(timeout=30_000)
    assert "tp=8" in page.url and "pp=2" in page.url
    screenshot(page, "layout-view", height=2400)
    assert page.console_errors == []
