"""Bytes of every optimizer's state after one step, read from optimizer.state on the CPU (test-only).

`measure(config, optimizer, ...)` builds a tiny random Hugging Face model (optionally with peft LoRA adapters),
splits its trainable parameters the way each optimizer's own code or documentation does, gives every parameter a
random gradient, steps once and walks optimizer.state: every tensor found (inside tensor subclasses such as
torchao's OptimState8bit through __tensor_flatten__, inside objects such as GaLore's projector through their
attributes) is counted once per storage; storages of the parameters themselves are not state. What a state needs
does not depend on the gradient's values, so random gradients stand in for a backward pass.

`step` scalars of torch.optim.AdamW and torchao's low-bit AdamW are reported apart ("host"): both create them with
torch.tensor(0.0), on the host, unless AdamW is capturable or fused (torch/optim/adamw.py _init_group;
torchao/optim/adam.py step), so they are not GPU memory.

Versions: torch 2.13 (torch.optim.Muon), bitsandbytes 0.50.2, torchao 0.18.0, galore-torch 1.0, apollo-torch 1.0.3,
pytorch-optimizer 4.1.0 (SOAP), adam-mini 1.1.1.
"""

from __future__ import annotations

import os
import warnings
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from tests.measure.saved_tensors import build_from_config  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _eager_compile(fn=None, **_options):
    """torch.compile as TORCHDYNAMO_DISABLE leaves it: the function, uncompiled (also as a decorator factory)."""
    return fn if fn is not None else (lambda f: f)
HOST_KEYS = {"step"}          # torch AdamW / torchao: a host scalar (see the module docstring)


def muon_split(named):
    """Moonlight's rule (MoonshotAI/Moonlight examples/toy_train.py @abaa96e get_optimizer): Muon for ndim >= 2
    except embed_tokens and lm_head; the rest AdamW."""
    muon = [p for n, p in named if p.ndim >= 2 and "embed_tokens" not in n and "lm_head" not in n]
    ids = {id(p) for p in muon}
    return muon, [p for n, p in named if id(p) not in ids]


def lowrank_split(named):
    """GaLore's README / torchrun_main.py: 2-D weights of modules named attn or mlp (self_attn / mlp in HF)."""
    low = [p for n, p in named if p.ndim == 2 and ("self_attn" in n or "mlp" in n) and ".experts." not in n]
    ids = {id(p) for p in low}
    return low, [p for n, p in named if id(p) not in ids]


def optimizers(name: str, named, rank: int = 8, fallback: str = "adamw", config: dict = None):
    """The optimizer(s) a run with `name` builds over the named trainable parameters."""
    params = [p for _, p in named]
    if name == "adam-mini":       # adam-mini 1.1.1, configured as its README says: the model's dim and heads
        from adam_mini import Adam_mini
        return [Adam_mini(named, dim=config["hidden_size"], n_heads=config["num_attention_heads"],
                          n_kv_heads=config["num_key_value_heads"], verbose=False)]
    if name == "muon":
        # torch.optim.Muon takes 2-D parameters only; a 3-D fused expert tensor is left out here (Moonlight's own
        # Muon views it as g.view(g.size(0), -1) and keeps a zeros_like momentum: its elements, unmeasured).
        named = [(n, p) for n, p in named if p.ndim <= 2]
        muon, rest = muon_split(named)
        out = [torch.optim.Muon(muon)] if muon else []
        if rest and fallback == "adamw":
            out.append(torch.optim.AdamW(rest))
        elif rest and fallback == "lion":
            import bitsandbytes as bnb
            out.append(bnb.optim.Lion(rest, optim_bits=32))
        return out
    if name in ("galore-adamw", "apollo-adamw"):
        low, rest = lowrank_split(named)
        if name == "galore-adamw":
            from galore_torch import GaLoreAdamW
            group = dict(params=low, rank=rank, update_proj_gap=200, scale=0.25, proj_type="std")
            return [GaLoreAdamW([group, dict(params=rest)])]
        from apollo_torch import APOLLOAdamW
        group = dict(params=low, rank=rank, proj="random", scale_type="channel", scale=1, update_proj_gap=200,
                     proj_type="std")
        return [APOLLOAdamW([group, dict(params=rest)])]
    if name == "shampoo":      # facebookresearch/optimizers' distributed_shampoo (not on PyPI: SHAMPOO_SRC)
        import sys
        sys.path.insert(0, os.environ.get("SHAMPOO_SRC", ""))
        from distributed_shampoo import DistributedShampoo
        return [DistributedShampoo(params, lr=1e-3)]
    if name == "soap":         # pytorch-optimizer's port keeps the reference's state (nikhilvyas/SOAP @f42d296)
        from pytorch_optimizer import SOAP
        return [SOAP(params)]
    if name.endswith("-ao"):
        from torchao.optim import AdamW4bit, AdamW8bit, AdamWFp8
        return [{"adamw-8bit-ao": AdamW8bit, "adamw-4bit-ao": AdamW4bit, "adamw-fp8-ao": AdamWFp8}[name](params)]
    import bitsandbytes as bnb
    cls = {"adamw-8bit-bnb": bnb.optim.AdamW8bit, "paged-adamw-8bit": bnb.optim.PagedAdamW8bit,
           "paged-adamw": bnb.optim.PagedAdamW}[name]
    return [cls(params)]


def _tensors(value, out):
    if isinstance(value, torch.Tensor):
        if hasattr(value, "__tensor_flatten__") and type(value) is not torch.Tensor and \
                not isinstance(value, torch.nn.Parameter):
            for attr in value.__tensor_flatten__()[0]:
                _tensors(getattr(value, attr), out)
        else:
            out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out)
    elif isinstance(value, dict):            # Distributed Shampoo: a dict per block
        for v in value.values():
            _tensors(v, out)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        for v in vars(value).values():
            _tensors(v, out)


def state_bytes(opts, params) -> dict:
    """GPU and host bytes of the optimizers' state, per state key, each storage once, parameters' excluded."""
    seen = {p.untyped_storage().data_ptr() for p in params}
    by_key, host = {}, 0
    for opt in opts:
        for state in opt.state.values():
            for key, value in state.items():
                found = []
                _tensors(value, found)
                for t in found:
                    ptr = t.untyped_storage().data_ptr()
                    if ptr in seen:
                        continue
                    seen.add(ptr)
                    nbytes = t.untyped_storage().nbytes()
                    if key in HOST_KEYS:
                        host += nbytes
                    else:
                        by_key[key] = by_key.get(key, 0) + nbytes
    return dict(by_key=by_key, gpu=sum(by_key.values()), host=host)


def build(config: dict, dtype: str = "fp32", lora: dict = None):
    model = build_from_config(config, DTYPES[dtype])
    if lora:
        from tests.measure.peft_lora import wrap
        model = wrap(model, autocast_adapter_dtype=False, **lora)
    return model


def measure(config: dict, optimizer: str, dtype: str = "fp32", lora: dict = None, rank: int = 8,
            fallback: str = "adamw") -> dict:
    """Optimizer state bytes after one step of `optimizer` on the model `config` describes (see the docstring)."""
    model = build(config, dtype, lora)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    torch.manual_seed(1)
    for _, p in named:
        p.grad = torch.randn_like(p)
    # torchao compiles its step per shape (minutes here, the same bytes): torch.compile returns the function itself
    # for this step only, as TORCHDYNAMO_DISABLE makes it do, never process-wide (the environment switch silently
    # turned every later torch.compile measurement of the suite eager)
    with warnings.catch_warnings(), mock.patch.object(torch, "compile", _eager_compile):
        warnings.simplefilter("ignore")
        opts = optimizers(optimizer, named, rank, fallback, config)
        for opt in opts:
            opt.step()
            if optimizer == "soap":       # its first step only builds the preconditioners; the second projects
                opt.step()
    out = state_bytes(opts, [p for _, p in model.named_parameters()])
    out["shapes"] = {n: list(p.shape) for n, p in named}
    out["unstepped"] = {n: p.numel() for n, p in named if optimizer == "muon" and p.ndim > 2}
    return out


def muon_step_peak(m: int, n: int, dtype: str = "fp32", nesterov: bool = True) -> int:
    """Peak bytes of the tensors torch.optim.Muon.step() allocates for one m x n parameter (its state already
    made), traced op by op with a TorchDispatchMode: each op's outputs are counted once per storage while a Python
    reference to them lives (weakref.finalize), the parameter, its gradient and its momentum excluded."""
    from tests.measure.optimizer_step import StepTrace as Trace     # the live-storage trace, one copy

    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(m, n, dtype=DTYPES[dtype]))
    p.grad = torch.randn_like(p)
    opt = torch.optim.Muon([p], nesterov=nesterov)
    opt.step()                                   # the momentum exists from here on
    known = {t.untyped_storage().data_ptr() for t in (p, p.grad, opt.state[p]["momentum_buffer"])}
    trace = Trace(known)
    with trace:
        opt.step()
    return trace.peak
