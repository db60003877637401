"""Measure tensor-parallel memory per rank on CPU (test-only; needs torch and transformers).

One launch of `world_size` gloo processes on 127.0.0.1 (torch.multiprocessing spawn, a free port) builds and
measures every configuration in turn, so torch and transformers are imported once per process. For each
configuration and rank it returns plain JSON-able data:

- params: bytes of the local parameter shards, and each parameter's local (and global) shape;
- grads: bytes of the local gradients after one backward;
- adamw: bytes of torch.optim.AdamW's exp_avg + exp_avg_sq after one step, its 'step' tensors apart;
- saved: bytes autograd saves for backward, one count per storage of the local tensor (a DTensor counts its
  local shard; async collective outputs are waited on first), parameters excluded, split by region "embed"
  (before the first decoder layer), "layer" (inside decoder layers) and "head" (final norm, lm_head, loss),
  with the CUDA semantics of tests/measure/saved_tensors.py (its gpu_semantics: SDPA saves q, k, v, out and
  an fp32 logsumexp as the flash kernel does; dropout keeps a 1-byte mask);
- optionally a listing of every saved storage (shape, dtype, bytes, layout, module, autograd nodes).

Plans (Hugging Face Llama-style models, `LlamaForCausalLM`, layers under model.model.layers):
- "none": no plan (world size 1 only: a single process, compare with tests/measure/saved_tensors.measure).
- "A": torchtitan-style TP without sequence parallel: q/k/v, gate/up ColwiseParallel, o/down RowwiseParallel,
  embed_tokens RowwiseParallel(input_layouts=Replicate()) (vocab-sharded), lm_head
  ColwiseParallel(output_layouts=Shard(-1), use_local_output=False) with the loss under loss_parallel().
- "A_rep": as "A" but lm_head ColwiseParallel(output_layouts=Replicate()) (gathered logits, HF's
  "colwise_rep"/"colwise_gather_output"), ordinary loss.
- "B": torchtitan-style sequence parallel: norms SequenceParallel, attention / mlp inputs PrepareModuleInput
  (Shard(1) -> Replicate), o/down RowwiseParallel(output_layouts=Shard(1)), embed_tokens
  RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)), lm_head
  ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False) + loss_parallel().
  Adaptations for Hugging Face modules: the residual stream stays a DTensor (embed_tokens, o_proj and
  down_proj use_local_output=False), so LlamaModel sees the global sequence length when it builds position ids,
  the causal mask and the rotary tables (plain tensors of the full sequence); LlamaDecoderLayer calls self_attn
  with hidden_states as a keyword, so the attention's PrepareModuleInput uses input_kwarg_layouts.

Observed with torch 2.13 / transformers 5.24 (details in the returned data):
- embed_tokens under RowwiseParallel gets a Replicate gradient of the full vocab x hidden on every rank (DTensor has
  no row-sharded strategy for embedding_dense_backward), while its AdamW moments stay sharded like the parameter.
- Under plan B the norm weights' gradients are Partial(sum) DTensors (same bytes as the replicated weight).
- Shards follow torch.chunk: vocab 1001 on 4 ranks is 251/251/251/248 rows. An intermediate size not divisible by
  the mesh size fails with local outputs (RowwiseParallel's from_local infers an even global size); mlp_dtensor=True
  (gate/up use_local_output=False) runs it.

Usage: measure_tp([config, ...], world_size) -> [[rank0 result, rank1 result, ...], ...] (one list per config).
A config is a dict: model (HF config dict), dtype ("bf16" | "fp32"), attn ("sdpa" | "eager"), plan, batch,
seq, and optionally checkpointing (non-reentrant, as saved_tensors.measure), listing (True: rank 0 returns
every saved storage), name. Run as a script for a demo: python -m tests.measure.tensor_parallel
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import tempfile
import time
import traceback
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from tests.measure.dtensor_saved import _OpNames, _Recorder, _layout, _nbytes, local_tensor  # noqa: E402
from tests.measure.saved_tensors import _tensors, build_from_config, gpu_semantics  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PLANS = ("none", "A", "A_rep", "B")
COLLECTIVE_TIMEOUT_S = 120   # a rank that fails alone must not leave the others waiting forever


# ---------------------------------------------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------------------------------------------

def apply_plan(model, plan: str, mesh, mlp_dtensor: bool = False):
    """Apply a plan in place. mlp_dtensor: gate/up return DTensors (use_local_output=False), which lets an
    intermediate size not divisible by the mesh size run (a local output re-wrapped by RowwiseParallel's
    from_local assumes even shards and gets the wrong global size)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    if plan == "none":
        return model
    base = model.model
    if plan in ("A", "A_rep"):
        head = (ColwiseParallel(output_layouts=Shard(-1), use_local_output=False) if plan == "A"
                else ColwiseParallel(output_layouts=Replicate()))
        parallelize_module(model, mesh, {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
                                         "lm_head": head})
        layer_plan = {
            "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel(),
        }
        if mlp_dtensor:
            layer_plan.update({"mlp.gate_proj": ColwiseParallel(use_local_output=False),
                               "mlp.up_proj": ColwiseParallel(use_local_output=False)})
    elif plan == "B":
        parallelize_module(model, mesh, {
            "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                                  use_local_output=False),
            "model.norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
        })
        layer_plan = {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                            desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(use_local_output=not mlp_dtensor),
            "mlp.up_proj": ColwiseParallel(use_local_output=not mlp_dtensor),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        }
    else:
        raise ValueError(f"unknown plan {plan!r}; one of {PLANS}")
    for layer in base.layers:
        parallelize_module(layer, mesh, layer_plan)
    return model


# ---------------------------------------------------------------------------------------------------------------
# One configuration on one rank
# ---------------------------------------------------------------------------------------------------------------

def _enable_checkpointing(model):
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def measure_one(cfg: dict, mesh=None) -> dict:
    """Measure one configuration on this rank (mesh None: a single process without a plan)."""
    from torch.distributed.tensor.parallel import loss_parallel

    plan = cfg.get("plan", "none")
    if mesh is None and plan != "none":
        raise ValueError("a plan needs a device mesh (world size > 1)")
    dtype = DTYPES[cfg.get("dtype", "bf16")]
    attn = cfg.get("attn", "sdpa")
    batch, seq = cfg.get("batch", 2), cfg.get("seq", 128)
    checkpointing = cfg.get("checkpointing", False)
    t0 = time.perf_counter()

    model = build_from_config({**cfg["model"], "attn_implementation": attn}, dtype)
    apply_plan(model, plan, mesh, mlp_dtensor=cfg.get("mlp_dtensor", False))
    if checkpointing:
        _enable_checkpointing(model)

    params = {}
    for name, p in model.named_parameters():
        params[name] = {"local_shape": list(local_tensor(p).shape), "global_shape": list(p.shape),
                        "bytes": _nbytes(p), "layout": _layout(p)}
    param_bytes = sum(v["bytes"] for v in params.values())

    rec = _Recorder(model, listing=cfg.get("listing", False))
    base = model.model

    def enter_block(module, args, kwargs):
        rec.region = "layer"
        if checkpointing:
            rec.checkpointing = False
            for t in _tensors((args, kwargs)):
                rec.add(t)
            rec.checkpointing = True

    names = {id(m): n for n, m in model.named_modules()}

    def push(module, args):
        rec.stack.append(names.get(id(module), type(module).__name__))

    def pop(module, args, out):
        if rec.stack:
            rec.stack.pop()

    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    handles = [b.register_forward_pre_hook(enter_block, with_kwargs=True) for b in base.layers]
    handles.append(base.norm.register_forward_pre_hook(lambda *_: setattr(rec, "region", "head")))
    handles += [register_module_forward_pre_hook(push), register_module_forward_hook(pop)]

    gen = torch.Generator().manual_seed(1234)   # the same ids on every rank
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen)
    parallel_loss = loss_parallel() if plan in ("A", "B") else contextlib.nullcontext()
    try:
        with parallel_loss:
            with gpu_semantics(rec):
                ops = _OpNames(rec) if rec.listing else contextlib.nullcontext()
                with ops, torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
                    loss = model(input_ids=ids, labels=ids).loss
                rec.paused = True
                if rec.listing:
                    rec.attribute_nodes(loss.grad_fn)
                loss_value = float(local_tensor(loss).detach().float())
                loss.backward()
    finally:
        for h in handles:
            h.remove()

    grads = {n: _nbytes(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    for n, p in model.named_parameters():
        params[n]["grad_bytes"] = grads.get(n, 0)
        params[n]["grad_local_shape"] = list(local_tensor(p.grad).shape) if p.grad is not None else None
    grad_layouts = {n: _layout(p.grad) for n, p in model.named_parameters() if p.grad is not None and _layout(p.grad)}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt.step()
    state, step_bytes, step_count, step_dtypes, other = Counter(), 0, 0, set(), Counter()
    for p, s in opt.state.items():
        for k, v in s.items():
            if not isinstance(v, torch.Tensor):
                continue
            if k == "step":
                step_bytes += _nbytes(v)
                step_count += 1
                step_dtypes.add(f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}")
            elif k in ("exp_avg", "exp_avg_sq"):
                state[k] += _nbytes(v)
            else:
                other[k] += _nbytes(v)

    result = {
        "name": cfg.get("name"), "plan": plan, "mlp_dtensor": cfg.get("mlp_dtensor", False),
        "dtype": cfg.get("dtype", "bf16"), "attn": attn,
        "world_size": mesh.size() if mesh is not None else 1, "batch": batch, "seq": seq,
        "checkpointing": checkpointing,
        "loss": loss_value,
        "params_bytes": param_bytes, "params": params,
        "grads_bytes": sum(grads.values()), "grad_layouts": grad_layouts,
        "adamw_bytes": state["exp_avg"] + state["exp_avg_sq"], "adamw_exp_avg_bytes": state["exp_avg"],
        "adamw_exp_avg_sq_bytes": state["exp_avg_sq"], "adamw_other_bytes": dict(other),
        "adamw_step_bytes": step_bytes, "adamw_step_tensors": step_count, "adamw_step_kinds": sorted(step_dtypes),
        "saved": {k: rec.by_region.get(k, 0) for k in ("embed", "layer", "head")},
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if rec.listing:
        for e in rec.entries:
            e.pop("ptr", None)
            if e["op"] is None and any(n.startswith("ScaledDotProduct") for n in e["nodes"]):
                e["op"] = "sdpa (q/k/v/out)"   # added by gpu_semantics after the CPU kernel ran
        result["listing"] = rec.entries
    return result


# ---------------------------------------------------------------------------------------------------------------
# Launch
# ---------------------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_configs(rank: int, world_size: int, port: int, configs: list, out_dir: str, measure, setup=None):
    """A gloo worker's body, shared by the multi-process harnesses: join the group, run `measure(cfg, rank, ctx)`
    on each config (ctx = `setup(rank, world_size)`, e.g. a device mesh), record a failure per configuration and
    keep measuring the others, wait for every rank after each, and write the results to out_dir/rank{rank}.json."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    results = []
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        ctx = setup(rank, world_size) if setup else None
        for cfg in configs:
            try:
                r = measure(cfg, rank, ctx)
            except Exception as exc:  # noqa: BLE001 - report per configuration, keep measuring the others
                r = {"name": cfg.get("name"), "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()[-3000:]}
            results.append(r)
            dist.barrier()
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn_configs(worker, world_size: int, configs: list, prefix: str) -> list[list[dict]]:
    """Spawn `worker(rank, world_size, port, configs, out_dir)` on world_size processes; per config, the per-rank
    results in rank order."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        mp.spawn(worker, args=(world_size, free_port(), configs, tmp), nprocs=world_size, join=True)
        per_rank = []
        for rank in range(world_size):
            with open(os.path.join(tmp, f"rank{rank}.json")) as f:
                per_rank.append(json.load(f))
    return [[per_rank[r][i] for r in range(world_size)] for i in range(len(configs))]


def _tp_mesh(rank, world_size):
    import logging

    from torch.distributed.device_mesh import DeviceMesh

    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)  # failed shapes are reported
    return DeviceMesh("cpu", list(range(world_size)))


def _tp_measure(cfg, rank, mesh):
    r = measure_one(cfg, mesh)
    if rank != 0:
        r.pop("listing", None)
    return r


def _worker(rank: int, world_size: int, port: int, configs: list, out_dir: str):
    run_configs(rank, world_size, port, configs, out_dir, _tp_measure, _tp_mesh)


def measure_tp(configs: list[dict], world_size: int) -> list[list[dict]]:
    """Measure each config on `world_size` ranks; returns, per config, the list of per-rank results.

    world_size 1 measures in this process without a plan (plan must be "none"). Failed configs carry "error".
    """
    if world_size == 1:
        for cfg in configs:
            if cfg.get("plan", "none") != "none":
                raise ValueError("world_size 1 measures without a plan: set plan 'none'")
        return [[measure_one(cfg, None)] for cfg in configs]
    return spawn_configs(_worker, world_size, configs, "zerocalc-tp-")


# ---------------------------------------------------------------------------------------------------------------
# Configurations used by the report
# ---------------------------------------------------------------------------------------------------------------

def llama(layers=2, hidden=256, heads=8, kv=8, ffn=1024, vocab=1000, seq=128, tie=False):
    return dict(model_type="llama", num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                num_key_value_heads=kv, intermediate_size=ffn, vocab_size=vocab, max_position_embeddings=seq,
                attention_dropout=0.0, pad_token_id=0, tie_word_embeddings=tie)


def grid(world_size: int, listing: bool = True) -> list[dict]:
    """The report's grid for one world size: bf16 SDPA for several shapes and plans, fp32 eager, checkpointing.

    GQA kv heads must be divisible by the world size (a k/v projection cannot be split below one head), so kv=2
    runs at world sizes 1-2 and kv=4 at 1-4. ffn689 is not divisible by 2 or 4 and fails with local outputs;
    its "mlp_dtensor" variants show the workaround.
    """
    models = {"base": llama(), "gqa-kv2": llama(kv=2), "gqa-kv4": llama(kv=4),
              "ffn688-v1001": llama(ffn=688, vocab=1001), "ffn689-v1001": llama(ffn=689, vocab=1001)}
    tp = world_size > 1
    out = []
    for mname, m in models.items():
        if m["num_key_value_heads"] % world_size:
            continue
        plans = (["A", "A_rep", "B"] if mname in ("base", "ffn688-v1001") else ["A", "B"]) if tp else ["none"]
        for plan in plans:
            out.append(dict(name=f"{mname}/{plan}/bf16/sdpa", model=m, dtype="bf16", attn="sdpa", plan=plan,
                            batch=2, seq=128, listing=listing and mname == "base"))
        if tp and mname == "ffn689-v1001":
            for plan in ("A", "B"):
                out.append(dict(name=f"{mname}/{plan}+mlp_dtensor/bf16/sdpa", model=m, dtype="bf16", attn="sdpa",
                                plan=plan, batch=2, seq=128, mlp_dtensor=True))
    for plan in ["A", "B"] if tp else ["none"]:
        out.append(dict(name=f"base/{plan}/fp32/eager", model=llama(), dtype="fp32", attn="eager", plan=plan,
                        batch=2, seq=128))
    for plan in ["A", "B"] if tp else ["none"]:
        out.append(dict(name=f"base/{plan}/bf16/sdpa/ckpt", model=llama(), dtype="bf16", attn="sdpa", plan=plan,
                        batch=2, seq=128, checkpointing=True))
    return out


def summary_rows(results: list[list[dict]]) -> list[str]:
    rows = []
    for per_rank in results:
        for rank, r in enumerate(per_rank):
            if "error" in r:
                rows.append(f"{r['name']:<40} rank {rank}: ERROR {r['error'].splitlines()[0][:150]}")
                continue
            s = r["saved"]
            rows.append(f"{r['name']:<40} tp={r['world_size']} rank {rank}: params {r['params_bytes']:>9,} "
                        f"grads {r['grads_bytes']:>9,} adamw {r['adamw_bytes']:>10,} (+step {r['adamw_step_bytes']}) "
                        f"saved embed {s['embed']:>6,} layer {s['layer']:>10,} head {s['head']:>10,} "
                        f"loss {r['loss']:.6f} ({r['seconds']} s)")
    return rows


if __name__ == "__main__":
    import sys

    for ws in [int(a) for a in sys.argv[1:]] or [1, 2, 4]:
        t0 = time.perf_counter()
        res = measure_tp(grid(ws), ws)
        print(f"# world size {ws}: {time.perf_counter() - t0:.1f} s")
        print("\n".join(summary_rows(res)))
