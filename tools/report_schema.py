"""The published JSON Schema of `python -m zerocalc --json` and `python -m zerocalc rl --json`
(docs/schema/report.schema.json, docs/schema/rl-report.schema.json), written from real reports.

The reports are built by the core from many tables, so the schema is read off the reports of a corpus of plans
that reaches every branch of the output (dense, MoE, LoRA, QLoRA, offload, 3D layouts, imported configs, sweeps,
RL placements and algorithms), not written by hand beside the code it would drift from:
- an object whose keys are the same names in every report is a record: those properties, the ones always present
  required, nothing else allowed;
- an object whose keys vary with the plan or name terms in words (phase parts, categories, stages as "0".."3") is
  a map of one value type;
- a list's items merge into one schema; integers stay integers (bytes are exact), floats are numbers.
SCHEMA_VERSION rises when a key is removed or changes type (a client may rely on it); adding keys keeps it.

    python tools/report_schema.py --write     # rewrite the schemas
    python tools/report_schema.py --check     # exit 1 when they differ from what the corpus gives now
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "schema"
SCHEMA_VERSION = 2                # 2: workload.fragmentation_percent may be null (the allocator model, issue 32)
FIX = ROOT / "tests" / "fixtures" / "frameworks"

PLANS = (
    ["--params", "7B", "--workers", "8"],
    ["--model", "llama-3-8b", "--workers", "8", "--gpu", "A100-40GB", "--deepspeed-estimate"],
    ["--model", "llama-3-70b", "--workers", "64", "--tp", "8", "--pp", "4", "--micro-batches", "8"],
    ["--model", "deepseek-v3", "--workers", "32", "--ep", "8", "--pp", "8", "--micro-batches", "16", "--gpu",
     "H200-141GB"],
    ["--model", "mixtral-8x7b", "--workers", "8", "--finetune", "qlora", "--gpu", "RTX-4090-24GB"],
    ["--model", "qwen3-8b", "--finetune", "lora", "--sweep", "lora_rank"],
    ["--model", "gemma-3-27b", "--offload-optimizer", "cpu", "--offload-params", "cpu", "--recompute",
     "full"],
    ["--model", "llama-3.1-405b", "--workers", "16", "--tp", "8", "--pp", "8", "--cp", "2", "--seq-len", "131072",
     "--micro-batches", "16", "--sweep", "seq_len"],
    ["--model", "gpt2", "--optimizer", "muon", "--sweep", "workers"],
    ["--model", "gemma-3-4b", "--attention", "eager", "--workers", "2", "--fragmentation-percent", "5"],  # a percent
    ["--model", "llama-3-8b", "--finetune", "lora", "--recompute", "full"],
    ["--model", "qwen3-0.6b", "--micro-batch", "4", "--lengths", "p50=512,p90=2048,p99=6000,max=8192"],
    ["--model", "llama-3-8b", "--ds-config", str(FIX / "transformers_ds_config_zero2.json")],
    ["--model", "llama-3-8b", "--accelerate-config", str(FIX / "llamafactory_fsdp_config.yaml")],
    ["--torchtitan-config", str(FIX / "torchtitan_llama3_8b.toml"), "--model", "llama-3.1-8b"],
    ["--model", "qwen2.5-vl-7b", "--workers", "8", "--images-per-sample", "2", "--image-size", "1344x896"],
)
RL_PLANS = (
    ["--model", "qwen2.5-7b", "--gpus", "8"],
    ["--model", "qwen2.5-7b", "--gpus", "16", "--placement", "split", "--rollout-gpus", "8", "--algorithm", "ppo",
     "--critic", "same", "--reward-model", "same"],
    ["--model", "llama-3-8b", "--gpus", "8", "--framework", "trl", "--algorithm", "dpo"],
    ["--model", "qwen3-8b", "--gpus", "8", "--framework", "openrlhf", "--reward-model", "same"],
    ["--verl-config", str(ROOT / "tests" / "fixtures" / "rl" / "verl_run_qwen2-7b.sh")],
)


def reports(rl: bool):
    from zerocalc.cli.main import _inputs, build_parser, run
    from zerocalc.cli.rl import run as rl_run
    with contextlib.redirect_stderr(io.StringIO()):         # the CLI's notes (defaults it applied): not the shape
        if rl:
            return [json.loads(rl_run(a + ["--json"], lambda rest: _inputs(build_parser().parse_args(rest))))
                    for a in RL_PLANS]
        return [json.loads(run(a + ["--json"])) for a in PLANS]


def _type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def infer(values: list) -> dict:
    """One schema that every value satisfies (see the module's rules)."""
    kinds = sorted({_type(v) for v in values})
    if "number" in kinds and "integer" in kinds:
        kinds.remove("integer")
    parts = []
    for kind in kinds:
        same = [v for v in values if _type(v) == kind or (kind == "number" and _type(v) == "integer")]
        if kind == "object":
            parts.append(_object(same))
        elif kind == "array":
            items = [x for v in same for x in v]
            parts.append({"type": "array", "items": infer(items)} if items else {"type": "array"})
        else:
            parts.append({"type": kind})
    if len(parts) == 1:
        return parts[0]
    if all(set(p) == {"type"} for p in parts):
        return {"type": [p["type"] for p in parts]}
    return {"anyOf": parts}


def _object(objects: list) -> dict:
    keys = [set(o) for o in objects]
    every, some = set.intersection(*keys), set.union(*keys)
    if not some:                                 # always empty in the corpus: nothing to say about its keys
        return {"type": "object"}
    values = [v for o in objects for v in o.values()]
    primitive = {_type(v) for v in values} <= {"integer", "number", "boolean", "null", "string"}
    named = primitive and any(not k.isidentifier() for k in some)     # "model states": a term's name, not a key
    if some and (all(k.isdigit() for k in some) or named or (every != some and primitive and len(some) > 3)):
        return {"type": "object", "additionalProperties": infer(values) if values else {}}
    return {"type": "object", "properties": {k: infer([o[k] for o in objects if k in o]) for k in sorted(some)},
            "required": sorted(every), "additionalProperties": False}


def schema(rl: bool) -> dict:
    what = "zerocalc rl --json" if rl else "zerocalc --json"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"zerocalc/{'rl-report' if rl else 'report'}/v{SCHEMA_VERSION}",
            "title": f"The report of `python -m {what}`, version {SCHEMA_VERSION}",
            "description": "Integers are bytes unless the key says otherwise (params, counts). Written by "
                           "tools/report_schema.py from real reports; do not edit by hand.",
            **infer(reports(rl))}


def paths() -> dict:
    return {OUT / "report.schema.json": False, OUT / "rl-report.schema.json": True}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true")
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    stale = []
    for path, rl in paths().items():
        text = json.dumps(schema(rl), indent=1, sort_keys=True) + "\n"
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(path.name)
    if stale:
        print("stale: " + ", ".join(stale) + " (python tools/report_schema.py --write)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
