"""Exports that round-trip (issue 35), on the real framework files of tests/fixtures/frameworks: the export of an
imported file goes over that file (zerocalc/frameworks/passthrough.py), loads with the format's own parser, keeps
every key of the file or names it as dropped, keeps "auto" where the plan did not move it, and imports back to the
same plan."""

import contextlib
import io
import json
import tomllib
from pathlib import Path

import pytest
import yaml

from zerocalc.cli.main import run
from zerocalc.frameworks.passthrough import _leaves

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"
FLAGS = {".json": ("--ds-config", "deepspeed"), ".yaml": ("--accelerate-config", "accelerate"),
         ".toml": ("--torchtitan-config", "torchtitan")}
LOADERS = {"deepspeed": json.loads, "accelerate": yaml.safe_load, "torchtitan": tomllib.loads}
FILES = sorted(p for p in FIXTURES.iterdir() if p.suffix in FLAGS and "alst" not in p.name
               and p.name != "transformers_ds_config_zero3.json")      # both refused by DeepSpeed's own models too
PLAN_KEYS = ("scenario", "workload", "layout", "selected_stage", "check_stage")


def cli(argv):
    notes = io.StringIO()
    with contextlib.redirect_stderr(notes):
        return run(argv), notes.getvalue()


def plan(flag, path):
    report = json.loads(cli(["--model", "llama-3-8b", "--gpus", "16", flag, str(path), "--json"])[0])
    return {k: report.get(k) for k in PLAN_KEYS}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_an_imported_file_exports_over_itself_and_imports_back_to_the_same_plan(path, tmp_path):
    flag, fmt = FLAGS[path.suffix]
    try:
        before = plan(flag, path)
    except Exception as exc:                                     # noqa: BLE001 - a file the CLI refuses
        pytest.skip(f"not importable as a plan on its own: {exc}")
    text, notes = cli(["--model", "llama-3-8b", "--gpus", "16", flag, str(path), "--export", fmt])
    exported = LOADERS[fmt](text)
    original = LOADERS[fmt](path.read_text())
    for key, value in _leaves(original):                         # nothing vanishes without being named
        dotted = ".".join(key)
        if not any(dotted in line for line in notes.splitlines() if "dropped" in line):
            here = exported
            for part in key:
                assert isinstance(here, dict) and part in here, (dotted, path.name)
                here = here[part]
            if value == "auto":
                assert here == "auto" or f"auto" not in notes or dotted not in notes, dotted
    again = tmp_path / path.name
    again.write_text(text)
    assert plan(flag, again) == before


def test_the_issue_file_keeps_its_unmodelled_keys_and_its_auto_batches():
    path = FIXTURES / "llamafactory_ds_z3_config.json"
    text, notes = cli(["--model", "llama-3-8b", "--gpus", "8", "--ds-config", str(path), "--export", "deepspeed"])
    out = json.loads(text)
    assert out["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert out["gradient_clipping"] == "auto" and out["zero_allow_untested_optimizer"] is True
    assert out["fp16"]["loss_scale_window"] == 1000
    assert out["train_micro_batch_size_per_gpu"] == "auto" and out["train_batch_size"] == "auto"
    assert "passed through from the imported file unchanged" in notes and "stage3_gather_16bit" in notes
    changed = json.loads(cli(["--model", "llama-3-8b", "--gpus", "8", "--ds-config", str(path), "--export",
                              "deepspeed", "--export-stage", "2"])[0])
    assert changed["zero_optimization"]["stage"] == 2                  # what the plan sets, it writes
