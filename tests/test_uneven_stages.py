"""Uneven and interleaved pipeline stages (issue 20): the layer counts per stage as an input (Layout.stage_layers),
the named splits (even, torchtitan's default, Megatron's first / last stage layers and its accounting of the ends),
each rank's layers, model states and in-flight activations, and the inputs that carry them: the CLI, a link, a
torchtitan TOML. The CPU measurements are in tests/test_uneven_stages_validation.py."""

import json
from dataclasses import replace
import subprocess
import sys
from pathlib import Path

import pytest

from zerocalc import Scenario
from zerocalc.frameworks import export_torchtitan, import_torchtitan
from zerocalc.layout import (MAX_STAGE_LIST_CHARS, Layout, in_flight_chunks, megatron_split, parse_stage_layers,
                             stage_sizes, torchtitan_split)
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
L405 = MODEL_PRESETS["llama-3.1-405b"][0]
L8 = MODEL_PRESETS["llama-3-8b"][0]


def report(arch=L405, dp=8, **layout):
    scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=dp)
    return layout_report(scenario, Workload(arch, micro_batch=1, seq_len=4096, layout=Layout(**layout)))


# --- the rules, from the frameworks' code ---------------------------------------------------------------------

def test_torchtitans_default_split_of_llama_405b():
    # pipeline_parallel.py generate_llm_fqn_per_model_part at 238fa99 (input_weight = output_weight = 1):
    # 126 layers + 2 = 128 effective layers, 16 (8) per stage, the ends' stages one layer short.
    assert torchtitan_split(126, 8) == (15,) + (16,) * 6 + (15,)
    assert torchtitan_split(126, 16) == (7,) + (8,) * 14 + (7,)
    assert torchtitan_split(126, 1) == (126,)
    assert torchtitan_split(10, 4) == (2, 3, 3, 2)            # 12 effective: 3 each
    assert torchtitan_split(10, 5) == (2, 3, 2, 2, 1)         # 12 over 5: the first two stages one more
    assert torchtitan_split(10, 4, 0, 0) == (3, 3, 2, 2)      # weights 0: as even as they go (array_split)
    assert torchtitan_split(4, 4) == (1, 2, 1, 0)             # the last stage holds the head alone


def test_torchtitans_refusals_name_the_field():
    with pytest.raises(FieldError) as e:
        torchtitan_split(4, 7)                                  # more stages than effective layers
    assert e.value.field == "stage_split"
    with pytest.raises(FieldError) as e:
        torchtitan_split(4, 6, input_weight=2)                 # a weight above the fewest layers per stage
    assert e.value.field == "embedding_weight"


def test_megatrons_first_and_last_stage_layers():
    # get_num_layers_to_build / get_transformer_layer_offset at d98e8a6: the middle ranks share the rest evenly;
    # under interleaving each rank's layers split over its vpp chunks (chunk v of rank r is stage v x pp + r).
    assert megatron_split(126, 8, 1, 15, 15) == torchtitan_split(126, 8)
    assert megatron_split(30, 4, 2, 6, 4) == (3, 5, 5, 2, 3, 5, 5, 2)
    assert megatron_split(10, 2, 1, None, 4) == (6, 4)
    assert megatron_split(8, 2, 2) == (2, 2, 2, 2)
    # --account-for-embedding/loss-in-pipeline-split: (layers + 2) / pp per rank, the ends' chunks one short
    assert megatron_split(6, 2, 2, embedding=1, loss=1) == (1, 2, 2, 1)
    for args, field in (((126, 8, 1, 14, 14), "first_stage_layers"), ((30, 4, 2, 5, 4), "first_stage_layers"),
                        ((126, 8, 1), "stage_split"), ((4, 2, 1, 0), "first_stage_layers")):
        with pytest.raises(FieldError) as e:
            megatron_split(*args)
        assert e.value.field == field


def test_layout_checks_name_the_field_and_the_range():
    bad = [(dict(pp=2, stage_layers=(1, 2, 3)), "stage_layers"), (dict(pp=2, stage_layers=(1, -1)), "stage_layers"),
           (dict(pp=2, stage_layers=(1, True)), "stage_layers"), (dict(pp=2, stage_layers="1,2"), "stage_layers"),
           (dict(pp=2, stage_layers=(1, 10_001)), "stage_layers"), (dict(pp=2, stage_split="zigzag"), "stage_split"),
           (dict(pp=2, first_stage_layers=3), "first_stage_layers"), (dict(pp=2, head_weight=0), "head_weight"),
           (dict(pp=2, stage_split="megatron", embedding_weight=2), "embedding_weight"),
           (dict(pp=2, stage_split="megatron", first_stage_layers=3, head_weight=1), "head_weight"),
           (dict(pp=2, stage_layers=(1, 1), stage_split="torchtitan"), "stage_split")]
    for kwargs, field in bad:
        with pytest.raises(FieldError) as e:
            Layout(**kwargs)
        assert e.value.field == field, kwargs
    assert Layout(pp=2, stage_layers=[16, 16]).stage_layers == (16, 16)      # a list is kept as a tuple
    with pytest.raises(FieldError) as e:
        Workload(L8, layout=Layout(pp=2, stage_layers=(16, 15)))              # 31 of the 32 layers
    assert e.value.field == "stage_layers" and "32" in e.value.allowed


def test_parse_stage_layers_bounds_its_text():
    assert parse_stage_layers("15, 16,16") == (15, 16, 16)
    for text in ("", "1,,2", "1e3", "-1", "\uff11\uff12", "99999", "0x10", "1;2", "a" * (MAX_STAGE_LIST_CHARS + 1),
                 "1," * 20_000 + "1", None, 7):
        with pytest.raises(FieldError) as e:
            parse_stage_layers(text)
        assert e.value.field == "stage_layers" and len(str(e.value)) < 600


# --- each rank follows its layers -----------------------------------------------------------------------------

def test_llama_405b_on_8_stages_by_torchtitans_split():
    r = report(pp=8, tp=8, stage_split="torchtitan", micro_batches=8)
    classes = [(v.rank.name, v.rank.layers, v.rank.count) for v in r.ranks]
    assert classes == [("pipeline stage 0 (first)", 15, 64), ("pipeline stages 1-6", 16, 384),
                       ("pipeline stage 7 (last)", 15, 64)]
    assert sum(v.rank.layers * len(v.rank.pp_ranks) for v in r.ranks) == 126
    # the busiest rank is the peak, named
    for s in range(4):
        assert r.peaks[s].peak_bytes == max(v.peaks[s].peak_bytes for v in r.ranks)


def test_interleaved_ranks_hold_chunks_r_r_plus_pp():
    r = report(pp=4, vpp=2, schedule="interleaved", stage_split="megatron", first_stage_layers=6,
               last_stage_layers=2, micro_batches=8, arch=L8)        # 32 layers: (3, 6, 6, 1) per chunk
    spans = {v.rank.pp_ranks: v.rank.spans for v in r.ranks}
    assert spans[(0,)] == (range(0, 3), range(16, 19))
    assert spans[(1, 2)] == (range(3, 9), range(19, 25))
    assert spans[(3,)] == (range(15, 16), range(31, 32))
    assert stage_sizes(r.workload.layout, 32) == (3, 6, 6, 1, 3, 6, 6, 1)


def test_the_layout_search_keeps_the_split():
    from zerocalc.parallel.search import search_layouts
    flat = dict(fragmentation_percent=5)    # every plan the search finds (the model re-checks the cheapest few)
    r = report(pp=8, tp=8, dp=2, micro_batches=8, stage_layers=torchtitan_split(126, 8))
    plans = search_layouts(r.scenario, replace(r.workload, **flat))
    assert any(p.pp == 8 for p in plans)                     # 8 does not divide 126: kept by the given counts
    r = report(pp=8, tp=8, dp=2, micro_batches=8, stage_split="torchtitan")
    assert {16, 8} <= {p.pp for p in search_layouts(r.scenario, replace(r.workload, **flat))}


def test_given_even_counts_equal_the_even_split():
    even = report(arch=L8, pp=4, micro_batches=8)
    given = report(arch=L8, pp=4, micro_batches=8, stage_layers=(8, 8, 8, 8))
    assert [p.peak_bytes for p in even.peaks] == [p.peak_bytes for p in given.peaks]
    moved = report(arch=L8, pp=4, micro_batches=8, stage_layers=(5, 9, 9, 9))
    assert moved.ranks[0].rank.layers == 5 and moved.ranks[0].shape.params < even.ranks[0].shape.params


def test_uneven_interleaved_chunks_weigh_their_own_layers():
    # rank 0 of pp 2, vpp 2, 4 micro-batches passes (3, 2) and (4, 1) chunk-micro-batches alive: which one peaks
    # depends on what each chunk saves (measured the same way: tests/test_uneven_stages_validation.py)
    assert in_flight_chunks("interleaved", 2, 2, 4, 0, 0, 0, (10, 30))[0] == (3, 2)
    assert in_flight_chunks("interleaved", 2, 2, 4, 0, 0, 0, (30, 10))[0] == (4, 1)
    r = report(arch=L8, pp=2, vpp=2, schedule="interleaved", micro_batches=4, stage_layers=(2, 10, 10, 10))
    first = r.ranks[0]
    per_block = first.shape.act.blocks(1, 0)
    stage_terms = sum(first.shape.act.stage.values())
    embed = sum(first.shape.act.embed.values()) + first.shape.act.first_block_delta
    chunk_0, chunk_1 = 2 * per_block + stage_terms, 10 * per_block + stage_terms
    assert first.shape.activation_bytes == 3 * (chunk_0 + embed) + 2 * chunk_1       # (3, 2) alive


# --- the inputs that carry it -----------------------------------------------------------------------------------

def cli(*args):
    return subprocess.run([sys.executable, "-m", "zerocalc", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_cli_flags():
    done = cli("--model", "llama-3-8b", "--workers", "2", "--pp", "2", "--vpp", "2", "--stage-layers", "7,9,9,7",
               "--micro-batches", "4", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["layout"]["stage_layers"] == [7, 9, 9, 7] and out["layout"]["stage_split"] == "given"
    done = cli("--model", "llama-3.1-405b", "--workers", "1", "--tp", "8", "--pp", "8", "--stage-split", "torchtitan",
               "--micro-batches", "8", "--json")
    assert json.loads(done.stdout)["layout"]["stage_layers"] == [15] + [16] * 6 + [15]
    for bad in (("--stage-layers", "7,x"), ("--stage-layers", "1,2,3"), ("--first-stage-layers", "3")):
        done = cli("--model", "llama-3-8b", "--pp", "2", *bad)
        assert done.returncode == 2 and "Traceback" not in done.stderr and "stage" in done.stderr, done.stderr


def test_link_keys_and_hostile_values():
    pytest.importorskip("streamlit")
    from ui.state.convert import from_query, resolve, to_query

    state, warnings = from_query({"model": "llama-3-8b", "pp": "2", "vpp": "2", "schedule": "interleaved",
                                  "micro_batches": "4", "stage_layers": "7,9,9,7"})
    assert not warnings and state["stage_layers"] == (7, 9, 9, 7)
    resolved = resolve(state)
    assert not resolved.warnings and resolved.workload.layout.stage_layers == (7, 9, 9, 7)
    assert to_query(resolved.state)["stage_layers"] == "7,9,9,7"
    for value in ("9" * 70_000, "1," * 40_000, "<script>alert(1)</script>", "-1,33", "\uff11,\uff12", "1e3,1",
                  "[Verify](https://evil.example.com)", "\u202e1,2"):
        state, warnings = from_query({"model": "llama-3-8b", "pp": "2", "stage_layers": value})
        assert state["stage_layers"] == () and any("stage_layers" in w for w in warnings)
        assert all(len(w) < 700 for w in warnings)
    # counts the layout refuses (wrong length, wrong sum) are reset with a warning naming them; the rest is kept
    for value in ("16,16,0", "16,15"):
        state, _ = from_query({"model": "llama-3-8b", "pp": "2", "workers": "4", "stage_layers": value})
        resolved = resolve(state)
        assert resolved.state["stage_layers"] == () and resolved.state["pp"] == 2
        assert any("stage_layers" in w for w in resolved.warnings)
    state, _ = from_query({"model": "llama-3.1-405b", "pp": "8", "stage_split": "megatron",
                           "first_stage_layers": "14", "last_stage_layers": "14"})
    resolved = resolve(state)
    assert resolved.state["pp"] == 8 and any("first_stage_layers" in w for w in resolved.warnings)


PP = "[parallelism]\npipeline_parallel_degree = 8\npipeline_parallel_microbatch_size = 1\n"


def test_torchtitan_import_reads_the_split():
    assert import_torchtitan(PP).layout["stage_split"] == "torchtitan"        # its default rule
    weights = import_torchtitan(PP + "pipeline_parallel_first_stage_less_layers = 2\n").layout
    assert weights["stage_split"] == "torchtitan" and weights["embedding_weight"] == 2 and "head_weight" not in weights
    even = import_torchtitan(PP + "pipeline_parallel_first_stage_less_layers = 0\n"
                                  "pipeline_parallel_last_stage_less_layers = 0\n").layout
    assert "stage_split" not in even                                           # weights 0: the even split
    fqns = "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 1\n" \
           'pipeline_parallel_schedule = "Interleaved1F1B"\nmodule_fqns_per_model_part = [["tok_embeddings", ' \
           '"layers.0"], ["layers.1", "layers.2"], ["layers.3"], ["norm", "output"]]\n'
    got = import_torchtitan(fqns).layout
    assert got["stage_layers"] == (1, 2, 1, 0) and got["vpp"] == 2
    with pytest.raises(FieldError):
        import_torchtitan(fqns.replace('["layers.3"]', '"layers.3"'))


def test_torchtitan_export_writes_the_even_split_as_weights_zero():
    text = export_torchtitan({}, {}, {"pp": 2, "micro_batches": 2}, 3)
    assert "pipeline_parallel_first_stage_less_layers = 0" in text
    assert "pipeline_parallel_last_stage_less_layers = 0" in text
    back = import_torchtitan(text)
    assert "stage_split" not in back.layout
    assert "less_layers" not in export_torchtitan({}, {}, {"pp": 2, "stage_split": "torchtitan"}, 3)
