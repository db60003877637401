"""Measure pipeline-parallel stages on CPU (test-only; needs torch and transformers).

A Hugging Face Llama-style model (random weights, built identically on every rank) is split into 2 stages on 2 gloo
processes: stage 0 holds embed_tokens and the first half of the decoder layers, stage 1 the other layers, the final
norm and lm_head (each stage also keeps the rotary module, which has buffers only). Tied embeddings
(tie_word_embeddings=True) are not kept tied across stages: stage 0 holds embed_tokens.weight and stage 1 the same
tensor as lm_head.weight, so each stage holds a full vocab x hidden copy (nothing synchronises their gradients).

Per stage it returns parameter bytes (and names, shapes), then runs torch.distributed.pipelining (PipelineStage with
Schedule1F1B or ScheduleGPipe) for `steps` steps with the model's own causal-LM loss on the last stage and reports:
- peak live saved-for-backward bytes per step (one count per storage while any autograd node still holds it;
  parameters excluded). The pack hook returns a detached view and watches it with weakref.finalize, so it never
  keeps a graph alive (a strong reference would create a cycle that keeps the first step's extra shape-inference
  forward alive);
- the saved bytes of one micro-batch through the stage alone (forward and loss, no schedule), so the peak can be
  read as a number of micro-batches in flight;
- gradient and AdamW state bytes after the steps.
These counts use the CPU kernels as they are (no CUDA semantics): for bf16/fp32 SDPA without dropout the CPU flash
kernel saves what the CUDA flash kernel saves (q, k, v, output, fp32 logsumexp), which the report checks against
tests/measure/saved_tensors.measure. Eager attention and dropout would differ (see saved_tensors.py).

Usage: measure_pp([config, ...]) -> [[stage0 result, stage1 result], ...]; a config: model (HF config dict), dtype,
attn, batch (global), seq, microbatches, schedule ("1F1B" | "GPipe"), steps, name.
"""

from __future__ import annotations

import os
import time
import weakref

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tests.measure.saved_tensors import build_from_config  # noqa: E402
from tests.measure.tensor_parallel import DTYPES, llama, run_configs, spawn_configs  # noqa: E402


class StageModule(nn.Module):
    """One pipeline stage of a LlamaForCausalLM: optional embedding, some decoder layers, optional norm + head."""

    def __init__(self, model, layer_ids, first: bool, last: bool):
        super().__init__()
        base = model.model
        self.config = model.config
        self.embed_tokens = base.embed_tokens if first else None
        self.layers = nn.ModuleList([base.layers[i] for i in layer_ids])
        self.rotary_emb = base.rotary_emb
        self.norm = base.norm if last else None
        self.lm_head = model.lm_head if last else None

    def forward(self, x):
        from transformers.masking_utils import create_causal_mask

        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        mask = create_causal_mask(config=self.config, inputs_embeds=h, attention_mask=None, cache=None,
                                  position_ids=pos)
        pe = self.rotary_emb(h, position_ids=pos)
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_embeddings=pe, position_ids=pos)
        if self.lm_head is not None:
            h = self.lm_head(self.norm(h))
        return h


def split(model, stage: int, num_stages: int = 2, stage_layers=None) -> StageModule:
    """Stage `stage` of `num_stages`: its share of the decoder layers (stage_layers: the count of each stage, in
    order, as torchtitan's module_fqns_per_model_part assigns them; None: as even as they go)."""
    n = model.config.num_hidden_layers
    if stage_layers is None:
        bounds = [round(i * n / num_stages) for i in range(num_stages + 1)]
    else:
        assert len(stage_layers) == num_stages and sum(stage_layers) == n, stage_layers
        bounds = [sum(stage_layers[:i]) for i in range(num_stages + 1)]
    return StageModule(model, range(bounds[stage], bounds[stage + 1]), stage == 0, stage == num_stages - 1)


class LiveSaved:
    """Live bytes saved for backward, one count per storage, through weak references to detached views."""

    def __init__(self, module):
        self.params = {p.untyped_storage().data_ptr() for p in module.parameters()}
        self.count, self.live, self.peak, self.packed = {}, 0, 0, 0
        self.paused = False

    def pack(self, t):
        storage = t.untyped_storage()
        ptr, n = storage.data_ptr(), storage.nbytes()
        if self.paused or ptr in self.params or not n:
            return t
        view = t.detach()                      # same storage, no autograd history, only autograd refers to it
        c = self.count.get(ptr, 0)
        if c == 0:
            self.live += n
            self.peak = max(self.peak, self.live)
        self.count[ptr] = c + 1
        self.packed += 1
        weakref.finalize(view, self._release, ptr, n)
        return view

    def _release(self, ptr, n):
        c = self.count[ptr] - 1
        if c:
            self.count[ptr] = c
        else:
            del self.count[ptr]
            self.live -= n

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda v: v)


def _param_info(module):
    names = {n: {"shape": list(p.shape), "bytes": p.numel() * p.element_size()} for n, p in module.named_parameters()}
    return sum(v["bytes"] for v in names.values()), names


def _one_microbatch_saved(stage_mod, model, stage, cfg, dtype, ids, labels):
    """Saved bytes of one micro-batch through this stage alone (forward + loss on the last stage; stage: its
    index, 0 for the one that embeds)."""
    rec = LiveSaved(stage_mod)
    mb = ids.shape[0] // cfg["microbatches"]
    if stage == 0:
        x = ids[:mb].clone()   # its own storage: a view would count the whole batch's ids
    else:
        x = torch.randn(mb, cfg["seq"], model.config.hidden_size, dtype=dtype, requires_grad=True)
    with rec.hooks():
        out = stage_mod(x)
        if stage_mod.lm_head is not None:
            out = model.loss_function(logits=out, labels=labels[:mb], vocab_size=model.config.vocab_size)
    total = rec.live
    out.float().sum().backward() if out.dim() else out.backward()
    stage_mod.zero_grad(set_to_none=True)
    return total


def measure_stage(cfg: dict, stage: int, num_stages: int, group=None) -> dict:
    """One pipeline rank: `stage` is the rank; with cfg["vpp"] > 1 it holds stages rank, rank + pp, ... (the
    looped placement of torchtitan's pipeline_module_split) and runs ScheduleInterleaved1F1B."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    dtype = DTYPES[cfg.get("dtype", "bf16")]
    t0 = time.perf_counter()
    model = build_from_config({**cfg["model"], "attn_implementation": cfg.get("attn", "sdpa")}, dtype)
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    full_params = sum(p.numel() * p.element_size() for p in model.parameters())   # tied weights once
    pp, vpp = num_stages, cfg.get("vpp", 1)
    total_stages = pp * vpp
    indices = [stage + v * pp for v in range(vpp)]
    chunks = [split(model, i, total_stages, cfg.get("stage_layers")) for i in indices]
    stage_mod = nn.ModuleList(chunks)
    del model.model.layers   # drop what this stage does not hold (the StageModule keeps its own references)
    pbytes, pnames = _param_info(stage_mod)

    gen = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, model.config.vocab_size, (cfg["batch"], cfg["seq"]), generator=gen)
    one_mb = [_one_microbatch_saved(c, model, i, cfg, dtype, ids, ids) for c, i in zip(chunks, indices)]

    def loss_fn(logits, labels):
        return model.loss_function(logits=logits, labels=labels, vocab_size=model.config.vocab_size)

    pstages = [PipelineStage(c, i, total_stages, torch.device("cpu"), group=group) for c, i in zip(chunks, indices)]
    if vpp > 1:
        schedule = ScheduleInterleaved1F1B(pstages, n_microbatches=cfg["microbatches"], loss_fn=loss_fn)
    else:
        sched_cls = {"1F1B": Schedule1F1B, "GPipe": ScheduleGPipe}[cfg.get("schedule", "1F1B")]
        schedule = sched_cls(pstages[0], n_microbatches=cfg["microbatches"], loss_fn=loss_fn)
    rec = LiveSaved(stage_mod)
    opt = torch.optim.AdamW(stage_mod.parameters(), lr=1e-3)
    peaks, leftover, losses_out, packed = [], [], [], []
    for _ in range(cfg.get("steps", 2)):
        rec.peak, rec.packed = rec.live, 0
        losses = []
        with rec.hooks():
            if 0 in indices:
                schedule.step(ids)
            elif total_stages - 1 in indices:
                schedule.step(target=ids, losses=losses)
            else:
                schedule.step()
        peaks.append(rec.peak)
        packed.append(rec.packed)
        leftover.append(rec.live)
        if losses:
            losses_out.append([float(x.detach()) for x in losses])
        grads = sum(p.grad.numel() * p.grad.element_size() for p in stage_mod.parameters() if p.grad is not None)
        opt.step()
        opt.zero_grad(set_to_none=False)
    state = sum(v.numel() * v.element_size() for s in opt.state.values() for k, v in s.items()
                if k in ("exp_avg", "exp_avg_sq"))
    return {
        "name": cfg.get("name"), "stage": stage, "schedule": cfg.get("schedule", "1F1B"), "stages": indices,
        "microbatches": cfg["microbatches"], "batch": cfg["batch"], "seq": cfg["seq"],
        "params_bytes": pbytes, "params": pnames, "tied_in_full_model": tied, "full_model_params_bytes": full_params,
        "grads_bytes": grads, "adamw_bytes": state,
        "saved_one_microbatch": sum(one_mb), "saved_one_microbatch_per_stage": one_mb,
        "peak_saved_per_step": peaks, "live_saved_after_step": leftover, "tensors_packed_per_step": packed,
        "microbatches_in_flight": [round(p / sum(one_mb), 3) for p in peaks] if sum(one_mb) else None,
        "losses": losses_out, "seconds": round(time.perf_counter() - t0, 2),
    }


def _stage_measure(cfg, rank, world_size):
    return measure_stage(cfg, rank, world_size)


def _world(rank, world_size):
    return world_size


def _worker(rank, world_size, port, configs, out_dir):
    run_configs(rank, world_size, port, configs, out_dir, _stage_measure, _world)


def measure_pp(configs: list[dict], world_size: int = 2) -> list[list[dict]]:
    """Run each config as a `world_size`-stage pipeline (one stage per process); per config, per-stage results."""
    return spawn_configs(_worker, world_size, configs, "zerocalc-pp-")


def grid() -> list[dict]:
    out = []
    for tie in (False, True):
        for schedule in ("1F1B", "GPipe"):
            out.append(dict(name=f"llama4L-tie{int(tie)}/{schedule}/bf16/sdpa", model=llama(layers=4, tie=tie),
                            dtype="bf16", attn="sdpa", batch=4, seq=128, microbatches=4, schedule=schedule, steps=2))
    return out


if __name__ == "__main__":
    t0 = time.perf_counter()
    res = measure_pp(grid())
    print(f"# pipeline, 2 stages: {time.perf_counter() - t0:.1f} s")
    for per_stage in res:
        for r in per_stage:
            if "error" in r:
                print(r["name"], "ERROR", r["error"], r["traceback"][-2000:])
                continue
            print(f"{r['name']:<36} stage {r['stage']}: params {r['params_bytes']:>9,} grads {r['grads_bytes']:>9,} "
                  f"adamw {r['adamw_bytes']:>10,} one-mb saved {r['saved_one_microbatch']:>9,} peak/step "
                  f"{r['peak_saved_per_step']} in flight {r['microbatches_in_flight']} "
                  f"left {r['live_saved_after_step']}"
                  f" ({r['seconds']} s)")
