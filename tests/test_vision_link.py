"""The page's link carries the vision fields (ui/state/vision.py): a link's images, resolution, budget and tower mode
give the plan the CLI's flags give, byte for byte, and a bad value is refused naming the page's field."""

from __future__ import annotations

import json

import pytest

from ui.state.convert import from_query, resolve, to_query
from zerocalc.cli.main import run
from zerocalc.parallel.ranks import layout_report


def test_a_link_plans_what_the_cli_plans():
    query = {"model": "qwen3-vl-8b", "workers": "8", "seq_len": "1024", "images_per_sample": "3",
             "image_width": "1920", "image_height": "1080", "vision_training": "frozen"}
    state, warnings = from_query(query)
    assert not warnings
    r = resolve(state)
    assert not r.warnings and r.workload.arch.vision.training == "frozen"
    cli = json.loads(run(["--model", "qwen3-vl-8b", "--workers", "8", "--seq-len", "1024", "--images-per-sample",
                          "3", "--image-size", "1920x1080", "--vision-training", "frozen", "--json"]))
    assert r.workload.seq_len == cli["vision"]["seq_len"] == cli["workload"]["seq_len"]
    page = layout_report(r.scenario, r.workload)
    assert [p.peak_bytes for p in page.peaks] == [p["peak_bytes"] for p in cli["peak"]]
    assert r.scenario.params == cli["params"]
    link = to_query(state)                      # the link keeps exactly the fields that differ from defaults
    assert {k: link[k] for k in ("images_per_sample", "image_width", "image_height", "vision_training")} == \
        {"images_per_sample": "3", "image_width": "1920", "image_height": "1080", "vision_training": "frozen"}


def test_no_vision_field_keeps_the_language_model_alone():
    state, _ = from_query({"model": "qwen3-vl-8b"})
    assert resolve(state).workload.arch.vision is None


def test_bad_vision_values_are_reset_naming_the_field():
    state, _ = from_query({"model": "llama-3.1-8b", "images_per_sample": "2"})
    r = resolve(state)
    assert r.state["images_per_sample"] == 0 and any("images_per_sample" in w for w in r.warnings)
    state, _ = from_query({"model": "gemma-3-4b", "images_per_sample": "1", "pixel_budget": "1000000"})
    r = resolve(state)
    assert r.state["pixel_budget"] == 0 and any("pixel_budget" in w for w in r.warnings)
    assert r.workload.arch.vision is not None and r.workload.images.images == 1


def test_the_page_opens_a_vision_plan_with_its_section():
    from tests.app_helpers import run_app
    at = run_app({"model": "internvl3-8b", "images_per_sample": "2", "image_width": "1344", "image_height": "896",
                  "seq_len": "1024"}, sections=("sec_vision",))
    assert not at.exception
    widgets = {w.key: w.value for w in at.number_input}
    assert widgets.get("images_per_sample") == 2 and widgets.get("image_width") == 1344


def test_the_page_answers_how_many_images_and_pixels_fit():
    from tests.app_helpers import run_app, text_of
    at = run_app({"model": "qwen2.5-vl-7b", "images_per_sample": "2", "image_width": "1344", "image_height": "896",
                  "seq_len": "1024", "gpu": "L40S-48GB", "recompute": "full"}, tab="Peak and step")
    text = text_of(at)
    cli = json.loads(run(["--model", "qwen2.5-vl-7b", "--workers", "8", "--seq-len", "1024", "--images-per-sample",
                          "2", "--image-size", "1344x896", "--gpu", "L40S-48GB", "--recompute", "full", "--json"]))
    n = cli["vision"]["max_images_per_sample"]["3"]
    assert n and f"most images per sample that fit: {n:,}" in text


@pytest.mark.parametrize("query", [
    {"model": "llama-3.2-11b-vision", "images_per_sample": "2", "seq_len": "512", "gpu": "L40S-48GB",
     "vision_training": "frozen"},
    {"model": "qwen3-vl-8b", "images_per_sample": "1", "video_frames": "16", "image_width": "1280",
     "image_height": "720", "seq_len": "1024", "vision_training": "lora", "finetune": "lora"}])
def test_every_view_and_button_of_a_vision_plan(query):
    """A vision plan through every view and every button the page draws (as tests/test_app_every_click.py does for
    random states): no run raises."""
    from tests.app_helpers import run_app
    from tests.test_app_every_click import PASTE, press_everything
    from ui.page import TABS
    at = run_app(query)
    at.session_state["show_layouts"] = True
    at.run()
    assert not at.exception, at.exception
    for tab in TABS:
        if tab == "Calibrate":
            at.session_state["calib_text"] = PASTE
        at.session_state["tab"] = tab
        at.run()
        assert not at.exception, (tab, at.exception)
        press_everything(at)
