"""The tools zerocalc offers coding agents, as data: each is a CLI command (the same parser, the same report), so an
agent's answer equals `python -m zerocalc ... --json` for the same flags. cli/agent/server.py serves them over MCP;
nothing here imports the MCP SDK.

A call returns a short answer first (the verdict per stage, the deciding phase, the fixes as flag sets) and the
whole report only when asked (`detail: true`): an agent's context is the scarce resource. A refusal is a FieldError
naming the field, as the CLI's one-line error names the flag.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
from typing import Callable, Dict, List, NamedTuple

from ...frameworks import FORMATS
from ...scenario import FieldError
from .schema import input_schema, to_argv, tool_actions

# The CLI's output and listing switches are the tool's own business, never a field.
_OUTPUT = {"json", "units", "list_models", "list_gpus", "export", "export_stage", "deepspeed_estimate"}
_FLAG = re.compile(r"--([a-z][a-z0-9-]{0,60})")
DETAIL = {"detail": {"type": "boolean", "description": "also return the whole report (large); default false"}}


class ToolRefusal(FieldError):
    """The CLI's own one-line refusal, kept whole (FieldError cuts what it quotes), for the field it names."""

    def __init__(self, field: str, message: str):
        super().__init__(field, "", "see the tool's input schema")
        self.message = message


class Tool(NamedTuple):
    name: str
    description: str
    actions: Callable[[], list]          # the parser's flags this tool takes
    extra: Dict[str, dict]               # fields of the tool's own
    answer: Callable[[list, dict], dict]  # (argv, arguments) -> the structured answer


def _plan_actions():
    from ..main import build_parser
    return tool_actions(build_parser(), _OUTPUT | {"sweep"})


def _solve_actions():
    from ..main import build_parser
    return tool_actions(build_parser(), _OUTPUT)


def _rl_actions():
    from ..main import build_parser
    from ..rl import build_parser as rl_parser
    own = tool_actions(rl_parser(), {"json", "units"})
    names = {s for a in own for s in a.option_strings}
    return own + [a for a in _plan_actions() if not names & set(a.option_strings)]


def _run_cli(argv: List[str]) -> dict:
    """The CLI's JSON report for argv; its one-line refusal as a FieldError naming the flag."""
    from ..main import _inputs, build_parser, run
    from ..rl import run as rl_run
    from ..types import UsageError
    try:
        if argv[:1] == ["rl"]:
            text = rl_run(argv[1:] + ["--json"], lambda rest: _inputs(build_parser().parse_args(rest)))
        else:
            text = run(argv + ["--json"])
    except UsageError as exc:
        message = str(exc)
        named = _FLAG.search(message)                 # the CLI's refusal names its flag: the tool's field
        raise ToolRefusal(named.group(1) if named else "flags", message) from None
    return json.loads(text)


def _stage_verdicts(report: dict) -> List[dict]:
    return [{"stage": p["stage"], "fits": p["fits"], "peak_bytes": p["peak_bytes"], "peak_phase": p["peak_phase"],
             "capacity_bytes": p["capacity_bytes"], "headroom_bytes": p["headroom_bytes"], "rank": p["rank"]}
            for p in report.get("peak") or []]


def _fixes(report: dict) -> List[dict]:
    return [{"flags": f["flags"], "fits": f["fits"], "stage": f["stage"], "peak_bytes": f["peak_bytes"],
             "kind": f["kind"], "sentence": f["sentence"]} for f in report.get("fixes") or []]


def _with_detail(answer: dict, report: dict, arguments: dict) -> dict:
    return {**answer, "report": report} if arguments.get("detail") else answer


def check_answer(argv: list, arguments: dict) -> dict:
    report = _run_cli(argv)
    stages = _stage_verdicts(report)
    checked = report.get("check_stage")
    verdict = next((s for s in stages if s["stage"] == checked), None)
    answer = {"gpu": report.get("gpu"), "params": report["params"], "world_size": report.get("world_size"),
              "check_stage": checked, "verdict": verdict, "stages": stages, "fixes": _fixes(report),
              "per_worker_model_state_bytes": {s["stage"]: s["per_worker_bytes"] for s in report["stages"]}}
    if "imported" in report or "sources" in report:
        answer["sources"] = {k: report[k] for k in ("sources", "imported") if k in report}
    if not stages:
        answer["note"] = "model states only: give a model (model, config or hub) for the peak and the verdict"
    return _with_detail(answer, report, arguments)


def solve_answer(argv: list, arguments: dict) -> dict:
    report = _run_cli(argv)
    answer = {"check_stage": report.get("check_stage"), "solve": report.get("solve"),
              "stages": _stage_verdicts(report)}
    if "sweep" in report:
        answer["sweep"] = report["sweep"]
    return _with_detail(answer, report, arguments)


def rl_answer(argv: list, arguments: dict) -> dict:
    report = _run_cli(["rl"] + argv)
    answer = {k: report.get(k) for k in ("algorithm", "framework", "placement", "training_gpus", "rollout_gpus",
                                         "capacity_bytes", "verdict", "solve")}
    answer["phases"] = [{"name": p["name"], "gpu": p["gpu"], "total_bytes": sum(p["parts"].values())}
                        for p in report.get("phases") or []]
    return _with_detail(answer, report, arguments)


def export_answer(argv: list, arguments: dict) -> dict:
    from ..main import run
    from ..types import UsageError
    fmt, notes = arguments.get("format"), io.StringIO()
    if fmt not in FORMATS:
        raise FieldError("format", fmt, ", ".join(FORMATS))
    try:
        with contextlib.redirect_stderr(notes):        # the CLI's "what it cannot express" notes
            text = run(argv + ["--export", str(fmt)])
    except UsageError as exc:
        raise ToolRefusal("format", str(exc)) from None
    return {"format": fmt, "text": text,
            "notes": [line.split("note: ", 1)[-1] for line in notes.getvalue().splitlines() if line.strip()]}


def listing(kind: str) -> dict:
    from ..main import run
    return {kind: json.loads(run([f"--list-{kind}", "--json"]))}


def _no_fields():
    return []


TOOLS = (
    Tool("check_plan", "Does this training job fit? The peak memory per GPU for each ZeRO stage (FSDP: 0/2/3), the "
         "phase that decides it, the verdict against the GPU, and the cheapest fixes as CLI flag sets. Fields are "
         "python -m zerocalc's flags (model, gpu, workers, micro-batch, seq-len, tp, pp, ...); a framework config "
         "(ds-config, accelerate-config, torchtitan-config), a launcher's (llamafactory-config, hf-trainer-config, "
         "axolotl-config, torchtune-config, litgpt-config, swift-config) or a Hugging Face config.json (config) is "
         "given as the file's text. Bytes are exact integers.", _plan_actions, DETAIL, check_answer),
    Tool("solve", "Planning answers for a job: the largest micro-batch, the longest sequence, the fewest workers / "
         "GPUs and the lowest ZeRO stage that fit, per stage, and every tp x pp x cp x dp layout that fits (with "
         "layouts); sweep FIELD gives every stage's peak along one input.", _solve_actions, DETAIL, solve_answer),
    Tool("rl_plan", "An RL post-training plan (GRPO, PPO, DPO, reward model; verl, TRL, OpenRLHF) phase by phase: "
         "rollout, log-probabilities, updates and weight sync, with the verdict per GPU class. The policy's fields "
         "are check_plan's; verl-config, trl-config and openrlhf-args take the file's text.", _rl_actions, DETAIL,
         rl_answer),
    Tool("export_config", "The plan as a framework's config file (deepspeed ds_config.json, accelerate FSDP YAML, "
         "torchtitan TOML), with the plan's fields as check_plan's.", _plan_actions,
         {"format": {"type": "string", "enum": list(FORMATS),
                     "description": "which framework's config"}}, export_answer),
    Tool("list_models", "The model presets (names for the model field) with their parameter counts.", _no_fields, {},
         lambda argv, arguments: listing("models")),
    Tool("list_gpus", "The GPU catalogue (names for the gpu field) with the memory PyTorch can use on each.",
         _no_fields, {}, lambda argv, arguments: listing("gpus")),
)
BY_NAME = {t.name: t for t in TOOLS}


def schema_of(tool: Tool) -> dict:
    schema = input_schema(tool.actions(), tool.extra)
    if tool.name == "export_config":
        schema["required"] = ["format"]
    return schema


def call(name: str, arguments: dict) -> dict:
    """The tool's structured answer; FieldError for a refused field (unknown tool: field "tool")."""
    tool = BY_NAME.get(name)
    if tool is None:
        raise FieldError("tool", name, ", ".join(BY_NAME))
    arguments = dict(arguments or {})
    own = {k: arguments.pop(k) for k in list(arguments) if k in tool.extra}
    with tempfile.TemporaryDirectory(prefix="zerocalc-agent-") as folder:
        def files(field: str, text: str) -> str:
            path = os.path.join(folder, field)
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
            return path
        argv = to_argv(tool.actions(), arguments, files)
        return tool.answer(argv, {**arguments, **own})
