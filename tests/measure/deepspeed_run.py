"""Runs a DeepSpeed measurement script (tests/measure/deepspeed_*.py) in its own process, as the tests need: each
initialises torch.distributed on gloo at its own port, which one pytest process can do only once."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_measurement(module: str, *args: str, port: str) -> list:
    """The JSON the script prints last (needs deepspeed 0.19.8: the caller skips without it)."""
    env = dict(os.environ, DS_BUILD_OPS="0", ZEROCALC_DS_PORT=port)
    out = subprocess.run([sys.executable, "-m", f"tests.measure.{module}", *args], capture_output=True, text=True,
                         env=env, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rank(fn, rank: int, world: int, out) -> None:
    found = fn(rank, world)
    if rank == 0:
        out.put(found)


def on_ranks(fn, world: int):
    """fn(rank, world) in `world` spawned processes (a module-level function: spawn pickles it by name), rank 0's
    answer."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(fn, r, world, out)) for r in range(world)]
    for p in procs:
        p.start()
    found = out.get(timeout=600)
    for p in procs:
        p.join()
    return found
