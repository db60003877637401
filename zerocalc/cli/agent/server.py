"""`python -m zerocalc mcp`: the agent tools (cli/agent/commands.py) as an MCP server, on the official MCP Python SDK's
low-level server (the schemas are ours, generated from the CLI's parser, so the SDK's signature-to-schema layer is
not wanted). Over stdio for a coding agent that starts it, or streamable HTTP for a shared one.

The SDK is an optional extra (`pip install "zerocalc[mcp]"`), imported here only: `import zerocalc` stays standard
library. Resources: the validation ledger's summary and the docs, when the package runs from a checkout that has
them (a wheel carries the code only).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ... import __version__
from ...scenario import FieldError
from .commands import TOOLS, call, schema_of

DOCS = Path(__file__).resolve().parents[3] / "docs"
LEDGER_URI = "zerocalc://validation/summary"
LOG = logging.getLogger("zerocalc.agent")


def resources() -> dict:
    """uri -> (name, mime type, a function returning the text)."""
    found = {}
    ledger = DOCS / "validation.json"
    if ledger.is_file():
        found[LEDGER_URI] = ("validation ledger summary", "application/json",
                             lambda: json.dumps(json.loads(ledger.read_text())["summary"], indent=2))
    for schema in sorted((DOCS / "schema").glob("*.json")) if DOCS.is_dir() else ():
        found[f"zerocalc://schema/{schema.name}"] = (f"JSON Schema: {schema.name}", "application/schema+json",
                                                     lambda schema=schema: schema.read_text())
    for page in sorted(DOCS.glob("*.md")) if DOCS.is_dir() else ():
        found[f"zerocalc://docs/{page.name}"] = (f"docs/{page.name}", "text/markdown",
                                                 lambda page=page: page.read_text())
    return found


def build_server():
    import mcp_types as types
    from mcp.server import Server

    schemas = {t.name: schema_of(t) for t in TOOLS}
    listed = resources()

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(name=t.name, description=t.description,
                                                       input_schema=schemas[t.name]) for t in TOOLS])

    async def call_tool(ctx, params):
        try:
            answer = call(params.name, params.arguments or {})
        except FieldError as exc:           # a tool error the agent can act on: it names the field
            text = getattr(exc, "message", None) or str(exc)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                        is_error=True)
        except Exception:                   # noqa: BLE001 - logged here, a plain message there
            LOG.exception("tool %s failed", params.name)
            return types.CallToolResult(content=[types.TextContent(type="text", text="internal error (logged)")],
                                        is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(answer))],
                                    structured_content=answer)

    async def list_resources(ctx, params):
        return types.ListResourcesResult(resources=[types.Resource(uri=uri, name=name, mime_type=mime)
                                                    for uri, (name, mime, _) in listed.items()])

    async def read_resource(ctx, params):
        uri = str(params.uri)
        if uri not in listed:
            raise ValueError(f"unknown resource {uri[:200]!r}; listed: {', '.join(listed)}")
        _, mime, text = listed[uri]
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text())])

    return Server("zerocalc", version=__version__, instructions="Exact training-memory answers: call check_plan "
                  "with python -m zerocalc's flags as fields; bytes are integers (GB = 10^9, GiB = 2^30).",
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_read_resource=read_resource)


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765) -> None:
    import anyio

    server = build_server()
    if transport == "http":
        import uvicorn
        uvicorn.run(server.streamable_http_app(host=host), host=host, port=port, log_level="warning")
        return
    from mcp.server.stdio import stdio_server

    async def run_stdio():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    anyio.run(run_stdio)


def main(argv) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m zerocalc mcp", description="zerocalc's tools for coding agents "
                                "over the Model Context Protocol (needs: pip install 'zerocalc[mcp]').")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (an agent starts this command; default) or streamable HTTP at /mcp")
    p.add_argument("--host", default="127.0.0.1", help="HTTP only (default 127.0.0.1: this machine alone)")
    p.add_argument("--port", type=int, default=8765, help="HTTP only (default 8765)")
    args = p.parse_args(argv)
    try:
        import mcp  # noqa: F401
    except ImportError:
        print("zerocalc mcp: error: the MCP SDK is not installed: pip install 'zerocalc[mcp]'", file=__import__("sys")
              .stderr)
        return 2
    serve(args.transport, args.host, args.port)
    return 0
