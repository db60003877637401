"""Every answer zerocalc gives over a matrix of scenarios, written as one JSON line per case, so a refactor can
prove its results byte-identical: run it before and after, then `diff` the two files (or pass --compare OLD).

The matrix: every model preset under each layout class (pure data parallel, tp x pp with Megatron's kernels,
interleaved pipeline, context parallel, expert parallel for MoE models) and the fine-tuning and offload variants,
each through the app's path (a link's query -> ui.state.convert.resolve -> full report with the layout search, the fixes
for the checked stage, the assumption ranges, the activation formulas) and through the CLI (text and JSON).

    python tools/report_snapshot.py OUT.jsonl [--compare OLD.jsonl] [--quick] [--ignore KEY,KEY]

--ignore drops the named keys wherever they occur in a report or the CLI's JSON before hashing: a change that
only adds fields (a new Workload option at its default) then proves every number it had before unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Query-string variations (the app's link form), applied to every preset; a variation a model cannot take is
# recorded with the warning the app shows.
VARIATIONS = {
    "dp8": {"workers": "8", "stage": "2"},
    "dp1-zero3": {"workers": "1", "stage": "3", "micro_batch": "2", "recompute": "full"},
    "tp2-pp2-megatron": {"workers": "4", "tp": "2", "pp": "2", "micro_batches": "4", "implementation": "megatron",
                         "convention": "megatron", "sequence_parallel": "true", "stage": "1"},
    "pp4-interleaved": {"workers": "2", "pp": "4", "vpp": "2", "schedule": "interleaved", "micro_batches": "8",
                        "recompute": "full", "recompute_every": "2", "stage": "3"},
    "cp2-eager-off": {"workers": "4", "cp": "2", "seq_len": "8192", "stage": "3", "convention": "fsdp2"},
    "ep4": {"workers": "8", "ep": "4", "stage": "3", "moe_imbalance_percent": "150"},
    "lora": {"workers": "2", "finetune": "lora", "lora_rank": "16", "stage": "2"},
    "qlora": {"workers": "1", "finetune": "qlora", "lora_rank": "8", "gpu": "RTX-4090-24GB", "stage": "0"},
    "offload": {"workers": "16", "stage": "3", "offload_optimizer": "cpu", "offload_params": "cpu",
                "convention": "deepspeed", "seq_len": "4096", "micro_batch": "4"},
}
CLI_VARIATIONS = {
    "dp": ["--workers", "8"],
    "layout": ["--gpus", "32", "--tp", "2", "--pp", "2", "--micro-batches", "4", "--convention", "megatron"],
    "lora": ["--finetune", "lora", "--lora-rank", "8", "--workers", "2"],
}


IGNORE = set()


def _without(value):
    if isinstance(value, dict):
        return {k: _without(v) for k, v in value.items() if k not in IGNORE}
    if isinstance(value, (list, tuple)):
        return [_without(v) for v in value]
    return value


def _digest(value) -> str:
    if IGNORE and isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if IGNORE and not isinstance(value, str):
        value = _without(value)
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def app_case(query: dict) -> dict:
    from ui.state.convert import from_query, resolve
    from zerocalc.step.formulas import formulas_for
    from zerocalc.answers.fixes import fixes
    from zerocalc.answers.ranges import ranges, ranges_dict
    from zerocalc.output.report import full_report

    state, warnings = from_query(query)
    r = resolve(state)
    out = {"warnings": warnings + r.warnings}
    if r.workload is None:
        out["report"] = _digest(full_report(r.scenario, None, r.state["buffer_factor"]))
        return out
    report = full_report(r.scenario, r.workload, r.state["buffer_factor"], layouts=True)
    out["report"] = _digest(report)
    out["peaks"] = [p["peak_bytes"] for p in report["peak"]]
    out["fixes"] = _digest([f._asdict() if hasattr(f, "_asdict") else f
                            for f in fixes(r.scenario, r.workload, r.state["stage"], layouts=True)])
    out["ranges"] = _digest(ranges_dict(ranges(r.scenario, r.workload)))
    out["formulas"] = _digest(formulas_for(r.scenario, r.workload))
    return out


def cli_case(args: list) -> dict:
    from zerocalc.cli.main import main
    out = {}
    for mode in ("text", "json"):
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            try:
                code = main(args + (["--json"] if mode == "json" else []))
            except SystemExit as exc:
                code = exc.code
        out[mode] = {"code": code, "stdout": _digest(buf.getvalue()), "stderr": err.getvalue()[-300:]}
    return out


def cases(quick: bool):
    from zerocalc.model.presets import MODEL_PRESETS
    models = list(MODEL_PRESETS)[:: 6 if quick else 1]
    for model in models:
        for name, query in VARIATIONS.items():
            yield f"app {model} {name}", lambda q={"model": model, **query}: app_case(q)
        for name, args in CLI_VARIATIONS.items():
            yield f"cli {model} {name}", lambda a=["--model", model, *args]: cli_case(a)
    yield "app params-only", lambda: app_case({"model": "params-only", "params": "7B", "workers": "8"})


def main(argv) -> int:
    out_path = Path(argv[0])
    quick = "--quick" in argv
    compare = argv[argv.index("--compare") + 1] if "--compare" in argv else None
    if "--ignore" in argv:
        IGNORE.update(argv[argv.index("--ignore") + 1].split(","))
    with out_path.open("w") as f:
        for name, run in cases(quick):
            try:
                result = run()
            except Exception as exc:          # recorded, so a new error shows as a difference
                result = {"error": f"{type(exc).__name__}: {exc}"}
            f.write(json.dumps({"case": name, **result}, sort_keys=True) + "\n")
    if compare:
        old = {json.loads(line)["case"]: line for line in Path(compare).read_text().splitlines()}
        new = {json.loads(line)["case"]: line for line in out_path.read_text().splitlines()}
        differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        print(f"{len(new)} cases, {len(differ)} differ" + "".join(f"\n  {k}" for k in differ[:40]))
        return 1 if differ else 0
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
