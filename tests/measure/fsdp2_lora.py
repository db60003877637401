"""Per-rank bytes of FSDP2 (torch.distributed.fsdp.fully_shard) with a frozen base and LoRA adapters, on CPU.

`fsdp2_lora(world=2, ...)` starts `world` gloo processes on 127.0.0.1; each builds the same random Llama model,
wraps it with peft LoRA, applies fully_shard to every decoder layer and then to the root, runs one forward +
backward and one AdamW step over the trainable parameters, and reports, per rank and split frozen / trainable:
- parameters: the local shard of every DTensor parameter, as elements (`numel`, what to_local() shows) and as the
  bytes of the storage behind it (`storage_bytes`: FSDP2 pads dim 0 to ceil(dim0 / world) rows on every rank, and
  the unpadded local tensor is a view into that padded storage);
- gradients after backward (same two views), optimizer state after the step (exp_avg, exp_avg_sq, step);
- per-tensor rows for one decoder layer and the root-level parameters.
Returns plain JSON-able data (list of per-rank dicts). Needs torch, transformers and peft.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _row(name, t, world):
    loc = _local(t)
    full = list(t.shape)
    return dict(name=name, full_shape=full, local_shape=list(loc.shape), dtype=str(loc.dtype).removeprefix("torch."),
                numel=loc.numel(), bytes=loc.numel() * loc.element_size(),
                storage_bytes=loc.untyped_storage().nbytes(),
                padded_rows=-(-full[0] // world) if full else None)


def _sum(rows, key):
    seen, total = set(), 0
    for r in rows:
        if key == "storage_bytes":
            if r["ptr"] in seen:
                continue
            seen.add(r["ptr"])
        total += r[key]
    return total


def _worker(rank, world, port, outdir, case):
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from tests.measure.peft_lora import DTYPES, llama_config, wrap
    from tests.measure.saved_tensors import build_from_config

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        config = case.get("config") or llama_config()
        model = build_from_config({**config, "attn_implementation": "sdpa"}, DTYPES[case.get("dtype", "bf16")])
        model = wrap(model, rank=case.get("rank", 8), target=case.get("target", "q,v"),
                     autocast_adapter_dtype=case.get("autocast_adapter_dtype", True))
        kw = {}
        if case.get("param_dtype"):
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=DTYPES[case["param_dtype"]],
                                                   reduce_dtype=DTYPES[case.get("reduce_dtype", "fp32")])
        layers = model.get_base_model().model.layers
        for layer in layers:
            fully_shard(layer, **kw)
        fully_shard(model, **kw)

        def rows(kind):
            out = []
            for name, p in model.named_parameters():
                t = p if kind == "param" else p.grad
                if t is None:
                    continue
                r = _row(name.removeprefix("base_model.model."), t, world)
                r.update(trainable=p.requires_grad, ptr=_local(t).untyped_storage().data_ptr())
                out.append(r)
            return out

        def totals(rs):
            res = {}
            for kind in ("frozen", "trainable"):
                sub = [r for r in rs if r["trainable"] == (kind == "trainable")]
                res[kind] = dict(tensors=len(sub), numel=_sum(sub, "numel"), bytes=_sum(sub, "bytes"),
                                 storage_bytes=_sum(sub, "storage_bytes"))
            return res

        params = rows("param")
        torch.manual_seed(1)
        ids = torch.randint(0, model.config.vocab_size, (case.get("batch", 2), case.get("seq", 128)))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        grads = rows("grad")
        params_after = rows("param")
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        opt.step()
        state_rows, seen = [], set()
        for p, st in opt.state.items():
            for k, v in st.items():
                if torch.is_tensor(v):
                    loc = _local(v)
                    state_rows.append(dict(key=k, local_shape=list(loc.shape), dtype=str(loc.dtype),
                                           numel=loc.numel(), bytes=loc.numel() * loc.element_size(),
                                           storage_bytes=loc.untyped_storage().nbytes(),
                                           ptr=loc.untyped_storage().data_ptr()))
        opt_tot = {}
        for key in ("exp_avg", "exp_avg_sq", "step"):
            sub = [r for r in state_rows if r["key"] == key]
            opt_tot[key] = dict(tensors=len(sub), bytes=_sum(sub, "bytes"), storage_bytes=_sum(sub, "storage_bytes"))
        keep = lambda rs: [{k: v for k, v in r.items() if k != "ptr"} for r in rs  # noqa: E731
                           if ".layers.0." in r["name"] or ".layers." not in r["name"]]
        groups = {}
        for i, layer in enumerate(layers):
            for n, _ in layer.named_parameters():
                groups[f"model.layers.{i}.{n}"] = f"layers.{i}"
        shapes = [dict(name=r["name"], full_shape=r["full_shape"], dtype=r["dtype"], trainable=r["trainable"],
                       group=groups.get(r["name"].removeprefix("base_model.model."), "root")) for r in params]
        result = dict(rank=rank, world=world, case={k: v for k, v in case.items() if k != "config"}, shapes=shapes,
                      params=totals(params), params_after_step=totals(params_after), grads=totals(grads),
                      optimizer=opt_tot, param_rows=keep(params), grad_rows=keep(grads),
                      loss=float(loss), dtensor=all(hasattr(p, "to_local") for p in model.parameters()))
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


def fsdp2_lora(world: int = 2, timeout: float = 120, **case) -> list:
    """Run the FSDP2 + LoRA measurement on `world` CPU processes; returns one dict per rank (see docstring)."""
    return run_workers("tests.measure.fsdp2_lora", world, case, timeout)


def run_cases(rank, world, port, outdir, case, measure, **dump) -> None:
    """A worker's body for the harnesses whose case lists runs: join the gloo group, `measure` each run and write
    outdir/rank{r}.json (`dump`: json.dump's options)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = [measure({**case, **run}) for run in case["runs"]]
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump({"rank": rank, "world": world, "results": results}, f, **dump)
    finally:
        dist.destroy_process_group()


TEARDOWN_ABORT = "terminate called without an active exception"


def run_workers(module: str, world: int, case: dict, timeout: float) -> list:
    """Run `module`'s `_worker(rank, world, port, outdir, case)` on `world` CPU processes and return each rank's
    outdir/rank{r}.json. Workers are plain subprocesses (`python -c`), so this works from pytest, scripts and
    notebooks alike; shared by the FSDP2 harnesses."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory() as outdir:
        with open(os.path.join(outdir, "case.json"), "w") as f:
            json.dump(case, f)
        port = _free_port()
        code = (f"import json, sys; from {module} import _worker; "
                "_worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], "
                "json.load(open(sys.argv[4] + '/case.json')))")
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, "-c", code, str(r), str(world), str(port), outdir], cwd=root,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(world)]
        logs = []
        try:
            for p in procs:
                logs.append(p.communicate(timeout=timeout)[0])
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        written = all(os.path.exists(os.path.join(outdir, f"rank{r}.json")) for r in range(world))
        # A gloo thread still running when the interpreter exits aborts the process ("terminate called without
        # an active exception") after the rank has written its result: the measurement is whole, so only that
        # teardown abort is let through, and only with every rank's file written.
        teardown = all(p.returncode == 0 or log.strip().endswith(TEARDOWN_ABORT) for p, log in zip(procs, logs))
        if any(p.returncode for p in procs) and not (written and teardown):
            raise RuntimeError("FSDP2 worker failed:\n" + "\n".join(log[-3000:] for log in logs))
        out = []
        for rank in range(world):
            with open(os.path.join(outdir, f"rank{rank}.json")) as f:
                out.append(json.load(f))
    return out


ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


def predicted(shapes: list, world: int, rank: int) -> dict:
    """The closed form for one rank: FSDP2 shards dim 0 with torch.chunk semantics (c = ceil(dim0 / world) rows,
    rank r holds clamp(dim0 - r * c, 0, c) rows) and pads every rank's storage to c rows
    (torch/distributed/fsdp/_fully_shard/_fsdp_param.py, FSDPParam._init_sharded_param: chunks[0].size() is the
    padded size). Gradients after backward are views into one flat reduce-scatter output per FSDP group holding
    the padded shards of its trainable parameters, cast to the parameter's dtype (_fsdp_collectives.foreach_reduce).
    AdamW's exp_avg / exp_avg_sq are zeros_like(param): unpadded local rows; `step` is a 4-byte fp32 tensor each."""
    out = {k: dict(numel=0, bytes=0, storage_bytes=0) for k in ("frozen", "trainable")}
    grads = dict(numel=0, bytes=0, storage_bytes=0)
    opt = dict(exp_avg=0, exp_avg_sq=0, step=0)
    for t in shapes:
        dim0 = t["full_shape"][0]
        rest = 1
        for d in t["full_shape"][1:]:
            rest *= d
        c = -(-dim0 // world)
        rows = min(max(dim0 - rank * c, 0), c)
        size = ITEMSIZE[t["dtype"]]
        kind = "trainable" if t["trainable"] else "frozen"
        out[kind]["numel"] += rows * rest
        out[kind]["bytes"] += rows * rest * size
        out[kind]["storage_bytes"] += c * rest * size
        if t["trainable"]:
            grads["numel"] += rows * rest
            grads["bytes"] += rows * rest * size
            grads["storage_bytes"] += c * rest * size
            opt["exp_avg"] += rows * rest * size
            opt["exp_avg_sq"] += rows * rest * size
            opt["step"] += 4
    return dict(params=out, grads=grads, optimizer=opt)
