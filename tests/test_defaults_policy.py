"""One defaults policy (zerocalc/defaults.py) for the CLI and the page (issue 33): `--pp 2` without
`--micro-batches` fills the pipeline as the page's pp field does (4 x pp), QLoRA with peft's k-bit preparation
checkpoints every block (peft 0.21.2 prepare_model_for_kbit_training, use_gradient_checkpointing=True), an explicit
value always wins, and a link carries a value the policy would not give back."""

import json

import pytest

from ui.state.convert import from_query, resolve, to_query
from zerocalc.cli.main import run
from zerocalc.defaults import implied


def cli(*flags):
    return json.loads(run(["--model", "llama-3-8b", *flags, "--json"]))


def page(query):
    state, warnings = from_query(query)
    assert not warnings
    return state, resolve(state)


def test_the_rules_fire_only_for_unset_targets():
    assert implied({"pp": 2, "micro_batches": 1}, ["micro_batches"]) == {"micro_batches": 8}
    assert implied({"pp": 2, "micro_batches": 1}, []) == {}
    assert implied({"pp": 2, "micro_batches": 4}, ["micro_batches"]) == {}          # already fills it
    assert implied({"finetune": "qlora", "kbit_prepare": True, "recompute": "none"}, ["recompute"]) == \
        {"recompute": "full"}
    assert implied({"finetune": "qlora", "kbit_prepare": False, "recompute": "none"}, ["recompute"]) == {}
    assert implied({"finetune": "lora", "recompute": "none"}, ["recompute"]) == {}


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_a_pipeline_fills_in_the_cli_and_on_the_page_alike(pp):
    report = cli("--workers", "2", "--pp", str(pp))
    _, resolved = page({"model": "llama-3-8b", "workers": "2", "pp": str(pp)})
    assert report["layout"]["micro_batches"] == resolved.workload.layout.micro_batches == 4 * pp
    assert report["layout"]["pipeline_idle_share"] < 0.2


def test_an_explicit_micro_batch_count_wins_and_survives_the_link():
    assert cli("--pp", "2", "--micro-batches", "1")["layout"]["micro_batches"] == 1
    state, _ = page({"model": "llama-3-8b", "pp": "2", "micro_batches": "1"})
    assert state["micro_batches"] == 1
    query = to_query(state)
    assert query["micro_batches"] == "1"                      # left out, the link would read back 8
    assert from_query(query)[0]["micro_batches"] == 1


def test_qlora_checkpoints_in_the_cli_and_on_the_page_alike():
    report = cli("--finetune", "qlora", "--gpu", "T4-16GB")
    state, resolved = page({"model": "llama-3-8b", "finetune": "qlora", "gpu": "T4-16GB"})
    assert report["workload"]["recompute"] == state["recompute"] == resolved.workload.recompute == "full"
    assert cli("--finetune", "qlora", "--recompute", "none")["workload"]["recompute"] == "none"
    assert cli("--finetune", "qlora", "--kbit-prepare", "no")["workload"]["recompute"] == "none"
