"""The batch as it really is (issue 37, zerocalc/step/batches.py): padded and packed micro-batches, a length
distribution, the typical and the worst step, the verdict on the worst, and solvers whose answers, applied, give
the verdict they promised.

Sources: transformers 5.24.0 data/data_collator.py (DataCollatorWithPadding padding="longest",
DataCollatorWithFlattening: packed rows with position_ids restarting per sample); verl 0.9.1
utils/seqlen_balancing.py (the RL planner's rows, tests/test_rl_batching.py)."""

import json
import random
from dataclasses import replace

import pytest

from zerocalc import Scenario
from zerocalc.answers.solve import max_seq_len, seq_len_step
from zerocalc.cli.main import run
from zerocalc.cli.types import UsageError
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.output.report import peak_dict
from zerocalc.parallel.ranks import layout_report
from zerocalc.rl import batching as rl_batching
from zerocalc.scenario import FieldError
from zerocalc.step import batches
from zerocalc.step.batches import median_longest, parse_points, points_from_csv, quantile, steps
from zerocalc.step.workload import Workload

ARCH = MODEL_PRESETS["qwen3-0.6b"][0]
LENGTHS = "p50=512,p90=2048,p99=6000,max=8192"


def workload(**kw):
    base = dict(micro_batch=4, seq_len=8192, batch_mode="padded", batch_lengths=parse_points(LENGTHS),
                gpu="L4-24GB")
    return Workload(ARCH, **{**base, **kw})


def model_scenario():
    from zerocalc.model.inventory import param_count
    return Scenario(params=param_count(ARCH), workers=1)


def test_percentile_points_and_their_errors():
    assert parse_points(LENGTHS) == ((50, 512), (90, 2048), (99, 6000), (100, 8192))
    assert parse_points("median=100,max=300") == ((50, 100), (100, 300))
    for bad, says in (("p50=512", "percentile 100"), ("p90=10,p50=20,max=30", "rising"),
                      ("p50=abc,max=3", "whole tokens"), ("p50=900,max=800", "not falling"),
                      ("p0=1,max=2", "from 1 to 100")):
        with pytest.raises(FieldError) as exc:
            parse_points(bad)
        assert exc.value.field.startswith("batch_lengths") and says in exc.value.allowed


def test_csv_of_lengths_reads_into_percentiles_with_typed_errors():
    points = points_from_csv("length\n" + "\n".join(str(i) for i in range(1, 1001)))
    assert dict(points) == {1: 10, 10: 100, 25: 250, 50: 500, 75: 750, 90: 900, 95: 950, 99: 990, 100: 1000}
    for text, says in (("length\n12\nabc\n", "line 3"), ("", "no lengths"), ("5\n0\n", "line 2")):
        with pytest.raises(FieldError) as exc:
            points_from_csv(text)
        assert exc.value.field == "lengths_csv" and says in str(exc.value.value)


def test_median_longest_of_b_samples_matches_drawing_them():
    """The padded typical step: the median of the longest of b samples, against 4,001 draws of b samples each
    from the lengths the points were read from (uniform 1..1000)."""
    lengths = list(range(1, 1001))
    points = points_from_csv("\n".join(map(str, lengths)))
    rng = random.Random(0)
    for b in (1, 2, 8, 32):
        drawn = sorted(max(rng.choice(lengths) for _ in range(b)) for _ in range(4001))
        assert abs(median_longest(points, b) - drawn[2000]) <= 0.02 * 1000, b
    assert quantile(points, 0.5) == 10 and quantile(points, 100) == 1000


def test_steps_padded_packed_fixed():
    typical, worst = steps(workload())
    assert (worst.micro_batch, worst.seq_len) == (4, 8192)
    # 100 x 0.5^(1/4) = 84.09: between p50=512 and p90=2048
    assert (typical.micro_batch, typical.seq_len) == (4, 512 + -(-(2048 - 512) * 34090 // 40000))
    packed = workload(micro_batch=1, seq_len=16384, batch_mode="packed")
    assert steps(packed)[0] == steps(packed)[1] and steps(packed)[1].tokens == 16384
    fixed = Workload(ARCH)
    assert steps(fixed)[0] == steps(fixed)[1] and steps(fixed)[1].tokens == 2048


def test_the_rl_planner_shares_the_one_batching_rule():
    assert rl_batching.micro_batch_shape is batches.micro_batch_shape
    assert rl_batching.Batching is batches.Batching


def test_workload_refuses_what_it_cannot_mean():
    with pytest.raises(FieldError) as exc:
        Workload(ARCH, batch_lengths=parse_points(LENGTHS))           # lengths with a fixed batch
    assert exc.value.field == "batch_lengths"
    with pytest.raises(FieldError) as exc:
        workload(batch_mode="packed", attention="eager")              # packing needs varlen attention
    assert exc.value.field == "batch_mode"
    with pytest.raises(FieldError) as exc:
        workload(batch_mode="ragged")
    assert exc.value.field == "batch_mode"


def test_default_report_has_no_batch_section_and_its_verdict_words_are_unchanged():
    out = peak_dict(layout_report(model_scenario(), Workload(ARCH)), answers=False)
    assert "batch" not in out
    assert all(" at the " not in v["deciding"] for v in out["verdicts"])


def test_padded_report_gives_typical_and_worst_and_the_verdict_names_the_worst():
    s, w = model_scenario(), workload()
    report = layout_report(s, w)
    out = peak_dict(report, answers=False)
    section = out["batch"]
    assert section["worst"]["peak_bytes"] == [p.peak_bytes for p in report.peaks]
    typical_seq = section["typical"]["seq_len"]
    assert typical_seq < 8192
    # the typical step's peaks are those of the same plan with every sample that long
    fixed = layout_report(s, replace(w, seq_len=typical_seq, batch_mode="fixed", batch_lengths=()))
    assert section["typical"]["peak_bytes"] == [p.peak_bytes for p in fixed.peaks]
    assert all(t < x for t, x in zip(section["typical"]["peak_bytes"], section["worst"]["peak_bytes"]))
    gpu_terms = [v["deciding"] for v in out["verdicts"] if v["deciding"].startswith("GPU memory")]
    assert gpu_terms and all(f"at {section['decides']}" in d for d in gpu_terms)
    assert section["decides"].startswith("the worst step: 4 x 8,192 tokens")


@pytest.mark.parametrize("mode, micro_batch", [("padded", 4), ("packed", 1)])
def test_solvers_answers_applied_give_the_promised_verdict(mode, micro_batch):
    """The longest sample a padded micro-batch may hold, the largest token budget of a packed row: applied, the
    stage fits; one step more, it does not."""
    s = model_scenario()
    w = workload(micro_batch=micro_batch, batch_mode=mode)
    answer = max_seq_len(s, w)[3]
    assert answer > 0
    step = seq_len_step(w)
    fits = layout_report(s, replace(w, seq_len=answer)).peaks[3]
    over = layout_report(s, replace(w, seq_len=answer + step)).peaks[3]
    assert fits.fits and not over.fits


def test_cli_flags_reach_the_report(tmp_path):
    out = json.loads(run(["--model", "qwen3-0.6b", "--gpu", "L4-24GB", "--micro-batch", "4",
                          "--lengths", LENGTHS, "--json"]))
    assert out["workload"]["batch_mode"] == "padded" and out["workload"]["seq_len"] == 8192   # max, not given
    section = out["batch"]
    assert set(section["solve"]) == {"max_longest_sample"}
    assert section["solve"]["max_longest_sample"]["3"] == out["solve"]["max_seq_len"]["3"]
    csv = tmp_path / "lengths.csv"
    csv.write_text("tokens\n" + "\n".join(str(n) for n in (100, 200, 300, 4000)))
    out = json.loads(run(["--model", "qwen3-0.6b", "--token-budget", "4096", "--lengths-csv", str(csv), "--json"]))
    assert (out["workload"]["batch_mode"], out["workload"]["seq_len"]) == ("packed", 4096)
    assert "max_token_budget" in out["batch"]["solve"]
    text = run(["--model", "qwen3-0.6b", "--token-budget", "4096"])
    assert "Batch (packed): the verdict judges the worst step: 1 x 4,096 tokens" in text


@pytest.mark.parametrize("args, says", [
    (["--lengths", "p50=5"], "--lengths"),
    (["--token-budget", "4096", "--seq-len", "2048"], "--seq-len"),
    (["--batch-mode", "packed", "--attention", "eager"], "--batch-mode"),
    (["--lengths-csv", "/nonexistent/lengths.csv"], "--lengths-csv"),
])
def test_cli_refusals_name_the_flag(args, says):
    with pytest.raises(UsageError) as exc:
        run(["--model", "qwen3-0.6b", *args])
    assert str(exc.value).startswith(says)


def test_link_fields_reach_the_workload():
    """ui/state/step.py: batch_mode and router_loss travel in a link; packing under eager attention and the router
    loss of a dense model fall back as the core would refuse them."""
    from ui.state.convert import from_query, resolve

    state, warnings = from_query({"model": "mixtral-8x7b", "batch_mode": "padded", "router_loss": "true"})
    work = resolve(state).workload
    assert not warnings and (work.batch_mode, work.router_loss) == ("padded", True)
    state, _ = from_query({"model": "llama-3-8b", "batch_mode": "packed", "attention": "eager",
                           "router_loss": "true"})
    work = resolve(state).workload
    assert (work.batch_mode, work.router_loss) == ("fixed", False)
