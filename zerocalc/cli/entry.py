"""The `zerocalc` command: `mcp` starts the agent tools' server (cli/agent/, which reads the CLI's own parsers, so
it sits above them); everything else is the CLI (cli/main.py, `rl` included)."""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mcp"]:
        from .agent.server import main as mcp_main
        return mcp_main(argv[1:])
    from .main import main as cli_main
    return cli_main(argv)
