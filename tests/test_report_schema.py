"""The published JSON Schemas of the reports (docs/schema/, written by tools/report_schema.py from a corpus of real
reports) are current, and reports of plans outside that corpus validate against them (jsonschema 4.26,
Draft 2020-12): a removed key, a changed type or an unexpected key in a record fails here before a client sees it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

from zerocalc.cli.main import _inputs, build_parser, run  # noqa: E402
from zerocalc.cli.rl import run as rl_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schema"
HELD_OUT = (                      # none of these is in tools/report_schema.py's corpus
    ["--model", "qwen3-30b-a3b", "--workers", "16", "--ep", "4", "--gpu", "H100-SXM-80GB"],
    ["--model", "phi-4", "--finetune", "lora", "--lora-rank", "64", "--recompute", "selective"],
    ["--model", "gpt-oss-20b", "--workers", "4", "--micro-batch", "2"],
    ["--model", "llama-3.2-1b", "--finetune", "qlora", "--gpu", "T4-16GB", "--sweep", "micro_batch"],
    ["--params", "1.5T", "--workers", "1024", "--convention", "megatron"],
    ["--model", "deepseek-v2-lite", "--ds-config", str(ROOT / "tests/fixtures/frameworks/llamafactory_ds_z3_config.json")],
)
RL_HELD_OUT = (["--model", "llama-3-8b", "--gpus", "8", "--framework", "trl", "--algorithm", "dpo"],
               ["--model", "qwen3-4b", "--gpus", "4", "--group-size", "16", "--response-length", "4096"])


def validator(name):
    schema = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_schemas_are_current():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "report_schema.py"), "--check"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("argv", HELD_OUT, ids=lambda a: " ".join(a)[:60])
def test_reports_outside_the_corpus_validate(argv):
    errors = list(validator("report.schema.json").iter_errors(json.loads(run(argv + ["--json"]))))
    assert not errors, [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:5]]


@pytest.mark.parametrize("argv", RL_HELD_OUT, ids=lambda a: " ".join(a)[:60])
def test_rl_reports_outside_the_corpus_validate(argv):
    report = json.loads(rl_run(argv + ["--json"], lambda rest: _inputs(build_parser().parse_args(rest))))
    errors = list(validator("rl-report.schema.json").iter_errors(report))
    assert not errors, [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:5]]


def test_the_schema_fails_a_report_that_drifted():
    report = json.loads(run(["--model", "llama-3-8b", "--json"]))
    v = validator("report.schema.json")
    assert v.is_valid(report)
    broken = dict(report, peak=[dict(report["peak"][0], peak_bytes="1 GB")])       # a type change
    assert not v.is_valid(broken)
    assert not v.is_valid({k: x for k, x in report.items() if k != "params"})     # a removed key
    assert not v.is_valid(dict(report, gpu=dict(report["gpu"], surprise=1)))     # an unknown key in a record
