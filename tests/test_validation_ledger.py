"""The validation ledger (issue 20): the committed docs/validation.md and docs/validation.json are what
tools/validation_ledger.py computes from validation/cases.json and zerocalc today, and the cases hold what a
ledger row needs. No torch: zerocalc runs in-process (about 20 ms a case)."""

import importlib.util
import json
import statistics
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from zerocalc.step.losses import CACHED_MOMENT

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("validation_ledger", ROOT / "tools" / "validation_ledger.py")
vl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vl)

CASES = vl.load_cases()
EXPRESSIBLE = [c for c in CASES if "argv" in c]
UNITS = {"bytes": 1, "GiB": 2**30, "GB": 10**9, "MiB": 2**20}


@pytest.fixture(scope="module")
def fresh():
    return vl.documents(CASES)


def test_the_committed_ledger_is_reproduced(fresh):
    diffs = vl.check(fresh)
    assert not diffs, ("docs/validation.* are stale: run `python tools/validation_ledger.py --write`\n"
                       + "\n\n".join(diffs))


def test_enough_cases_from_enough_sources():
    assert len(CASES) >= 40
    assert len({c["source_name"] for c in CASES}) >= 4
    assert len({c["id"] for c in CASES}) == len(CASES)


def test_every_case_names_its_source_at_a_commit_or_url():
    for c in CASES:
        s = c["source"]
        if s.get("url"):
            assert s["url"].startswith("https://"), c["id"]
        else:
            assert s["repo"].count("/") == 1 and s["path"], c["id"]
            assert len(s["commit"]) == 40 and int(s["commit"], 16) >= 0, c["id"]
        assert c["quoted"].strip(), c["id"]


def test_each_figure_converts_to_its_bytes_exactly():
    for c in CASES:
        f = c["figure"]
        assert f["unit"] in UNITS and c["kind"] in vl.KINDS, c["id"]
        assert c["measured_bytes"] == round(Fraction(Decimal(f["value"])) * UNITS[f["unit"]]), c["id"]
        assert isinstance(c["measured_bytes"], int) and c["measured_bytes"] > 0, c["id"]
        if f["unit"] != f["printed_unit"]:
            assert f["note"], c["id"]           # a unit read differently from how it is printed says why


def test_each_case_is_expressed_or_names_what_is_missing():
    for c in CASES:
        assert ("argv" in c) != ("missing" in c), c["id"]
        if "missing" in c:
            assert c["missing"] and all(isinstance(m, str) and len(m.strip()) > 8 for m in c["missing"]), c["id"]
        else:
            assert c["stage"] in (0, 1, 2, 3) and c["read_rank"] in ("last", "busiest"), c["id"]
            assert c["assumptions"], c["id"]


@pytest.mark.parametrize("case", EXPRESSIBLE, ids=[c["id"] for c in EXPRESSIBLE])
def test_every_expressible_command_runs(case):
    from zerocalc.cli.main import run
    assert "--json" not in case["argv"]
    _scenario, _workload, report = vl.zerocalc_report(case["argv"])
    assert report["ranks"] and report["peak"][case["stage"]]["peak_bytes"] > 0
    result = vl.evaluate(case)
    assert result["expressed"] and result["zerocalc_bytes"] > 0
    # the same arguments through the CLI's own run (text report), as a user would type them
    assert run(vl._resolve(case["argv"]))


def test_like_with_like():
    parts = {"model states": 10, "activations": 5, vl.RESERVE: 2, vl.CONTEXT: 7}
    f = vl.phase_figures(parts)
    assert f == {"max_memory_allocated": 15, "max_memory_reserved": 17, "device": 24}
    assert vl.band_error(90, 110, 100) == 0.0
    assert vl.band_error(120, 130, 100) == pytest.approx(0.2)
    assert vl.band_error(50, 80, 100) == pytest.approx(-0.2)


def test_the_summary_agrees_with_the_rows():
    """Issue 31: the headline (median, worst, within 10%) is the point error, what a user sees; the band's error
    sits beside it."""
    doc = json.loads((ROOT / "docs" / "validation.json").read_text(encoding="utf-8"))
    rows, s = doc["cases"], doc["summary"]
    assert {"cases", "expressed", "median_error", "worst_error", "worst_case", "within_10_percent",
            "median_band_error", "within_10_percent_band", "under", "over", "sources"} <= set(s)
    done = [r for r in rows if r["result"]["expressed"]]
    errors = [r["result"]["point_error"] for r in done]
    assert all(r["result"]["error"] == r["result"]["point_error"] for r in done)
    bands = [r["result"].get("band_error", r["result"]["point_error"]) for r in done]
    assert s["median_band_error"] == pytest.approx(statistics.median(bands))
    assert s["within_10_percent_band"] == pytest.approx(sum(abs(e) <= 0.10 for e in bands) / len(bands))
    assert s["cases"] == len(rows) == len(CASES) and s["expressed"] == len(done) == len(EXPRESSIBLE)
    assert s["median_error"] == pytest.approx(statistics.median(errors))
    assert abs(s["worst_error"]) == pytest.approx(max(abs(e) for e in errors))
    assert next(r for r in rows if r["id"] == s["worst_case"])["result"]["point_error"] == s["worst_error"]
    assert s["within_10_percent"] == pytest.approx(sum(abs(e) <= 0.10 for e in errors) / len(errors))
    for r in done:
        res = r["result"]
        assert res["point_error"] == pytest.approx(res["zerocalc_bytes"] / r["measured_bytes"] - 1)
        assert isinstance(res["zerocalc_bytes"], int)
    assert sum(t["cases"] for t in s["sources"].values()) == s["cases"]
    assert sum(t["expressed"] for t in s["sources"].values()) == s["expressed"]
    md = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    assert f"{s['expressed']} of {s['cases']} cases expressed" in md
    for r in rows:
        assert f"| {r['id']} |" in md
    assert f"median {vl.pct(s['median_error'])}" in md.split("## How to read it")[0]     # the point error leads


def test_every_row_says_under_or_over_and_the_summary_lists_every_under_prediction():
    """Issue 31: under (zerocalc below the measurement) is the unsafe side; every row is marked and every under-
    prediction is listed, worst first, in the summary and per source."""
    doc = json.loads((ROOT / "docs" / "validation.json").read_text(encoding="utf-8"))
    rows, s = doc["cases"], doc["summary"]
    done = [r for r in rows if r["result"]["expressed"]]
    for r in done:
        e = r["result"]["point_error"]
        assert r["result"]["side"] == ("under" if e < 0 else "over" if e > 0 else "exact"), r["id"]
    under = sorted((r["result"]["point_error"], r["id"]) for r in done if r["result"]["point_error"] < 0)
    assert [(e, i) for i, e in s["under"]] == under
    assert s["over"] == sum(r["result"]["point_error"] > 0 for r in done)
    for name, t in s["sources"].items():
        assert [i for i, _ in t["under"]] == [i for e, i in under if next(r for r in done if r["id"] == i)
                                               ["source_name"] == name], name
    md = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    head = md.split("## How to read it")[0]
    for case, err in s["under"]:
        assert f"{case} {vl.pct(err)}" in head, case
    # AA-03: inside the reserve band (0%) yet 6% low at the point (the allocator model's reserve with FSDP1's
    # wrapping residue, issue 32; 16% without the residue, 28% with the flat 5%): it reads under, and the headline
    # shows it
    aa03 = next(r for r in done if r["id"] == "AA-03")["result"]
    assert aa03["band_error"] == 0.0 and aa03["point_error"] < -0.03 and aa03["side"] == "under"
    assert s["worst_case"] == "AA-03" or abs(s["worst_error"]) >= abs(aa03["point_error"])


def test_the_side_of_a_row():
    assert vl.side(-0.01) == "under" and vl.side(0.02) == "over" and vl.side(0.0) == "exact"
    rows = [{"id": i, "source_name": "x", "result": vl._headline({"expressed": True, "point_error": e})}
            for i, e in (("a", -0.3), ("b", 0.05), ("c", -0.02))]
    rows[0]["result"]["band_error"] = 0.0
    t = vl.summarise(rows)
    assert t["median_error"] == -0.02 and t["worst_case"] == "a" and t["under"] == [["a", -0.3], ["c", -0.02]]
    assert t["within_10_percent"] == pytest.approx(2 / 3) and t["within_10_percent_band"] == 1.0
    assert t["over"] == 1 and t["median_band_error"] == 0.0


@pytest.mark.parametrize("kind", ["max_memory_reserved", "device"])
def test_reserved_and_device_figures_add_what_they_count(kind):
    """The same case read as each kind adds the reserve (with its band) and then what lies outside the allocator
    (the CUDA context and NCCL's buffers) to the allocated figure."""
    case = next(c for c in EXPRESSIBLE if c["read_rank"] == "busiest")
    allocated = vl.evaluate({**case, "kind": "max_memory_allocated"})
    other = vl.evaluate({**case, "kind": kind})
    parts = other["parts"]
    assert other["phase"] == allocated["phase"] and parts == allocated["parts"]
    # the reserve, the smaller backward moment under full recompute (reserved, not allocated), then context + NCCL
    extra = parts[vl.RESERVE] + parts.get(CACHED_MOMENT, 0) + (vl._outside(parts) if kind == "device" else 0)
    assert other["zerocalc_bytes"] == allocated["zerocalc_bytes"] + extra
    assert other["error"] == other["point_error"]                    # the headline is the point error
    if kind == "max_memory_reserved" and "band_bytes" in other:     # the band, where ranges gives one, beside it
        low, high = other["band_bytes"]
        assert low <= other["zerocalc_bytes"] <= high
        assert other["band_error"] == vl.band_error(low, high, case["measured_bytes"])
    else:
        assert "band_bytes" not in other and "band_error" not in other
    if kind == "max_memory_reserved":
        from zerocalc.answers.ranges import ASSUMPTIONS
        assert ("band_bytes" in other) == ("allocator_reserve" in ASSUMPTIONS)


def test_steady_state_split_and_config_files():
    doc = json.loads((ROOT / "docs" / "validation.json").read_text(encoding="utf-8"))
    split = [r for r in doc["cases"] if "steady_error" in r["result"]]
    assert split                                        # Megatron logs what stays allocated between steps
    for r in split:
        res = r["result"]
        # what persists between steps: the model states and the library workspaces (taken once, kept)
        states = res["parts"]["model states"] + res["parts"].get(vl.WORKSPACES, 0)
        assert res["steady_bytes"] == states
        assert res["steady_error"] == pytest.approx(states / r["steady_bytes"] - 1)
        if r["kind"] == "max_memory_allocated":
            assert res["transient_error"] == pytest.approx(
                (res["zerocalc_bytes"] - states) / (r["measured_bytes"] - r["steady_bytes"]) - 1)
    for c in EXPRESSIBLE:
        for flag, value in zip(c["argv"], c["argv"][1:]):
            if flag == "--config":
                assert (ROOT / value).is_file(), (c["id"], value)


def test_megatron_workspaces_follow_the_rows_and_the_env():
    """A Megatron case that passes --workspace-bytes runs under CUBLAS_WORKSPACE_CONFIG=:4096:8 (its
    model_config.yaml, cited in an assumption): PyTorch's 2 x 4096 KiB x 8, plus Transformer Engine's one workspace
    from zerocalc/step/workspaces.py's row for the card unless the test runs --transformer-impl local. The others
    keep zerocalc's default and say why."""
    from zerocalc.gpus import GPU_CATALOG
    from zerocalc.step.workspaces import WORKSPACES, row_bytes
    te = next(r for r in WORKSPACES if r.library == "Transformer Engine")
    cublas = 2 * 4096 * 8 * 1024
    for c in EXPRESSIBLE:
        if c["source_name"] != "megatron-lm":
            continue
        argv = c["argv"]
        notes = [a for a in c["assumptions"] if "CUBLAS_WORKSPACE_CONFIG" in a]
        assert len(notes) == 1, c["id"]
        if "--workspace-bytes" not in argv:
            assert "sets no CUBLAS_WORKSPACE_CONFIG" in notes[0], c["id"]
            continue
        assert ": :4096:8 in ENV_VARS" in notes[0] and "model_config.yaml @ d98e8a64" in notes[0], c["id"]
        value = int(argv[argv.index("--workspace-bytes") + 1])
        local = "--transformer-impl local" in notes[0]
        cc = GPU_CATALOG[argv[argv.index("--gpu") + 1]].compute_capability
        assert value == cublas + (0 if local else row_bytes(te, cc)), c["id"]


@pytest.mark.parametrize("kind", list(vl.KINDS))
def test_an_rl_case_reads_the_training_gpus_phases_like_with_like(kind):
    """An RL run (`rl_argv`, `python -m zerocalc rl`) is read on the training processes' GPU class: the worst phase's
    trainer_allocated_bytes (no engine, no CUDA context, no reserve), + the trainers' reserve, or the whole phase."""
    from zerocalc.cli.main import _inputs, build_parser
    from zerocalc.cli.rl import plan_of
    from zerocalc.rl.report import rl_report
    argv = ["--verl-config", "tests/fixtures/rl/verl_run_qwen2-7b.sh", "--model", "qwen2.5-0.5b",
            "--gpu", "H100-SXM-80GB"]
    case = {"rl_argv": argv, "kind": kind, "measured_bytes": 10 * 2**30, "rl_phase": "worst"}
    result = vl.evaluate(case)
    plan, _, _ = plan_of([str(ROOT / argv[1]) if a == argv[1] else a for a in argv],
                         lambda rest: _inputs(build_parser().parse_args(rest)))
    phases = rl_report(plan, answers=False)["phases"]
    figures = [vl.rl_figures(p)[kind] for p in phases]
    assert result["zerocalc_bytes"] == max(figures) and result["rank"] == "every GPU"
    phase = next(p for p in phases if p["name"] == result["phase"])
    reserve = sum(v for k, v in phase["parts"].items() if k.endswith("allocator reserve"))
    expected = {"max_memory_allocated": phase["trainer_allocated_bytes"],
                "max_memory_reserved": phase["trainer_allocated_bytes"] + reserve,
                "device": phase["total_bytes"]}[kind]
    assert result["zerocalc_bytes"] == expected
    assert result["error"] == pytest.approx(expected / (10 * 2**30) - 1)
    named = vl.evaluate({**case, "rl_phase": "reference log-probs"})
    assert named["phase"] == "reference log-probs"
