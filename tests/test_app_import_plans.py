"""An import yields a whole plan (issue 33): what the file does not say starts at its default, never at the page's
leftovers; a torchtitan flavor selects its preset; the message lists what was kept from the page. Every pair of
imports, in either order, gives the plan of the second on a fresh page, except the fields it says it kept."""

from pathlib import Path

import pytest

from tests.app_helpers import alerts, run_app, text_of
from tests.test_app_imports import upload_framework
from ui.imports.configs import KEPT_BY_IMPORT
from ui.state.fields import ARCH_FIELDS

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"
FILES = ["llamafactory_ds_z3_config.json", "torchtitan_llama3_70b.toml", "llamafactory_fsdp_config.yaml",
         "llamafactory_ds_z2_offload_config.json"]
KEPT = set(KEPT_BY_IMPORT) | set(ARCH_FIELDS)


def plan_after(*names, start=None):
    at = run_app(start or {"model": "llama-2-7b"}, sections=["sec_load"])
    for name in names:
        upload_framework(at, FIXTURES / name)
        assert any(f"Imported {name}" in a for a in alerts(at, "success")), alerts(at, "error")
    return at, {k: v for k, v in dict(at.query_params).items() if k not in KEPT and k != "view"}


def test_the_issue_sequence_deepspeed_then_torchtitan_70b():
    at, after_both = plan_after("llamafactory_ds_z3_config.json", "torchtitan_llama3_70b.toml")
    assert dict(at.query_params)["model"] == "llama-3.1-70b"               # the flavor, applied
    fresh, alone = plan_after("torchtitan_llama3_70b.toml")
    assert after_both == alone                                            # no bucket or stage of the first file
    said = text_of(at)
    assert "llama-3.1-70b, the preset the file's model names" in said and "Kept from the page" in said


@pytest.mark.parametrize("first, second", [(a, b) for a in FILES for b in FILES if a != b][:6])
def test_a_second_import_gives_the_plan_it_gives_on_a_fresh_page(first, second):
    """A fresh page holding only what the import keeps (the model, GPU, its count, the data) gives the same plan:
    "auto" buckets that follow the kept model's hidden size follow it on both."""
    at, _ = plan_after(first)
    kept = {k: v for k, v in dict(at.query_params).items() if k in KEPT}
    upload_framework(at, FIXTURES / second)
    fresh, _ = plan_after(second, start=kept or {"model": "llama-2-7b"})
    assert dict(at.query_params) == dict(fresh.query_params), (first, second)


def test_an_import_after_page_edits_keeps_only_what_it_lists():
    edited = {"model": "llama-2-7b", "recompute": "full", "activation_dtype": "fp32", "reduce_bucket_size": "1000",
              "stage": "0", "seq_len": "4096"}
    at, plan = plan_after("llamafactory_ds_z3_config.json", start=edited)
    _, fresh = plan_after("llamafactory_ds_z3_config.json")
    assert plan == fresh
    assert dict(at.query_params)["seq_len"] == "4096"                     # kept, and said so
    assert "seq_len = 4,096" in text_of(at) or "seq_len = 4096" in text_of(at)
