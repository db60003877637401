"""`python -m zerocalc mcp` driven by the MCP Python SDK's own client (mcp 2.3.0, `mcp.Client`): in-process, over
stdio as a coding agent starts it, and over streamable HTTP. Every answer must equal the CLI's JSON for the same
flags (one plan, one verdict), on real config files from the frameworks' repositories (tests/fixtures/)."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP SDK (requirements-dev.txt pins it)")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from tests.e2e.server import free_port, status  # noqa: E402
from zerocalc.cli.agent.server import build_server  # noqa: E402
from zerocalc.cli.agent.commands import TOOLS, schema_of  # noqa: E402
from zerocalc.cli.main import build_parser, run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
PLAN = {"model": "llama-3-8b", "workers": 8, "gpu": "A100-40GB", "micro-batch": 4, "seq-len": 4096}


def cli_json(argv):
    return json.loads(run(argv + ["--json"]))


def session(coroutine_fn, server=None):
    """One client session, on a thread of its own: a fresh event loop whatever the process already runs (the
    browser tests' Playwright keeps one in the main thread for the whole session)."""
    async def go():
        async with Client(server or build_server()) as client:
            return await coroutine_fn(client)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result(timeout=120)


def test_every_cli_flag_is_a_field_of_check_plan_with_its_choices():
    """The schema is read off the CLI's parser: nothing is listed by hand, so a new flag is a new field."""
    fields = schema_of(TOOLS[0])["properties"]
    skipped = {"help", "version", "json", "units", "list-models", "list-gpus", "export", "export-stage",
               "deepspeed-estimate", "sweep"}
    for action in build_parser()._actions:
        name = max(action.option_strings, key=len).lstrip("-") if action.option_strings else None
        if name and name not in skipped:
            assert name in fields, name
            if action.choices is not None:
                assert [str(c) for c in action.choices] == [str(c) for c in fields[name]["enum"]], name
    assert fields["workers"]["type"] == ["integer", "string"]          # 8 or "8" or "1K"
    assert fields["ds-config"]["type"] == "string" and "text" in fields["ds-config"]["description"]


def test_the_tools_are_listed_with_object_schemas():
    listed = session(lambda c: c.list_tools())
    names = [t.name for t in listed.tools]
    assert names == ["check_plan", "solve", "rl_plan", "export_config", "list_models", "list_gpus"]
    for tool in listed.tools:
        assert tool.input_schema["type"] == "object" and tool.description


def test_check_plan_gives_the_cli_verdict_and_peaks():
    result = session(lambda c: c.call_tool("check_plan", PLAN))
    assert not result.is_error
    answer = result.structured_content
    cli = cli_json(["--model", "llama-3-8b", "--workers", "8", "--gpu", "A100-40GB", "--micro-batch", "4",
                    "--seq-len", "4096"])
    assert answer["check_stage"] == cli["check_stage"]
    assert [(s["stage"], s["fits"], s["peak_bytes"], s["peak_phase"]) for s in answer["stages"]] == \
        [(p["stage"], p["fits"], p["peak_bytes"], p["peak_phase"]) for p in cli["peak"]]
    assert answer["fixes"] and [f["flags"] for f in answer["fixes"]] == [f["flags"] for f in cli["fixes"]]
    assert answer["verdict"]["stage"] == cli["check_stage"] and "report" not in answer


@pytest.mark.parametrize("field, name", [("ds-config", "frameworks/llamafactory_ds_z3_offload_config.json"
                                          if (FIXTURES / "frameworks/llamafactory_ds_z3_offload_config.json")
                                          .exists() else "frameworks/llamafactory_ds_z3_config.json"),
                                         ("ds-config", "frameworks/transformers_ds_config_zero2.json"),
                                         ("accelerate-config", "frameworks/llamafactory_fsdp_config.yaml"),
                                         ("torchtitan-config", "frameworks/torchtitan_llama3_8b.toml")])
def test_a_real_config_as_text_gives_the_cli_answer_for_the_file(field, name):
    path = FIXTURES / name
    result = session(lambda c: c.call_tool("check_plan", {"model": "llama-3-8b", field: path.read_text()}))
    assert not result.is_error, result.content[0].text
    cli = cli_json(["--model", "llama-3-8b", f"--{field}", str(path)])
    assert [(s["stage"], s["peak_bytes"], s["fits"]) for s in result.structured_content["stages"]] == \
        [(p["stage"], p["peak_bytes"], p["fits"]) for p in cli["peak"]]
    assert result.structured_content["check_stage"] == cli["check_stage"]


def test_refusals_are_tool_errors_naming_the_field():
    async def calls(c):
        return [await c.call_tool("check_plan", {"modle": "llama-3-8b"}),
                await c.call_tool("check_plan", {"model": "llama-3-8b", "gpu": "H100-80GB"}),
                await c.call_tool("check_plan", {"model": "llama-3-8b", "micro-batch": 0}),
                await c.call_tool("check_plan", {"model": "llama-3-8b", "workers": [8]}),
                await c.call_tool("export_config", {"model": "llama-3-8b", "format": "megatron"})]
    results = session(calls)
    assert all(r.is_error for r in results)
    texts = [r.content[0].text for r in results]
    assert texts[0].startswith("modle:") and "model" in texts[0]
    assert "--gpu" in texts[1] and "H100-SXM-80GB" in texts[1]
    assert "micro-batch" in texts[2]
    assert texts[3].startswith("workers:")
    assert "format" in texts[4]


def test_solve_rl_export_and_listings_equal_the_cli():
    async def calls(c):
        return (await c.call_tool("solve", {"model": "llama-3-8b", "gpu": "L4-24GB", "workers": 4}),
                await c.call_tool("rl_plan", {"model": "qwen2.5-7b", "gpus": 8}),
                await c.call_tool("export_config", {"model": "llama-3-8b", "workers": 16, "format": "torchtitan"}),
                await c.call_tool("list_gpus", {}))
    solve, rl, export, gpus = session(calls)
    assert solve.structured_content["solve"] == cli_json(["--model", "llama-3-8b", "--gpu", "L4-24GB",
                                                          "--workers", "4"])["solve"]
    from zerocalc.cli.main import _inputs
    from zerocalc.cli.rl import run as rl_run
    rl_cli = json.loads(rl_run(["--model", "qwen2.5-7b", "--gpus", "8", "--json"],
                               lambda rest: _inputs(build_parser().parse_args(rest))))
    assert rl.structured_content["verdict"] == rl_cli["verdict"]
    assert export.structured_content["text"] == run(["--model", "llama-3-8b", "--workers", "16", "--export",
                                                     "torchtitan"])
    assert gpus.structured_content["gpus"] == json.loads(run(["--list-gpus", "--json"]))


def test_the_ledger_summary_is_a_resource():
    async def read(c):
        listed = await c.list_resources()
        return listed, await c.read_resource("zerocalc://validation/summary")
    listed, summary = session(read)
    uris = {str(r.uri) for r in listed.resources}
    assert "zerocalc://validation/summary" in uris and "zerocalc://docs/peak-memory.md" in uris
    assert json.loads(summary.contents[0].text) == json.loads((ROOT / "docs" / "validation.json").read_text())[
        "summary"]


def test_over_stdio_as_a_coding_agent_starts_it():
    params = StdioServerParameters(command=sys.executable, args=["-m", "zerocalc", "mcp"], cwd=str(ROOT))
    result = session(lambda c: c.call_tool("check_plan", PLAN), server=params)
    assert not result.is_error and result.structured_content["stages"]


def test_over_streamable_http():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "zerocalc", "mcp", "--transport", "http", "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not status(f"http://127.0.0.1:{port}/mcp"):
            time.sleep(0.2)
        result = session(lambda c: c.call_tool("check_plan", PLAN), server=f"http://127.0.0.1:{port}/mcp")
        assert not result.is_error and result.structured_content["check_stage"] is not None
    finally:
        proc.terminate()
        proc.wait(timeout=10)
