"""What torchtune's and LitGPT's attention save for backward against Hugging Face's SDPA path, eager and compiled
(test-only; needs torch, transformers, torchao, torchtune 0.6.1 and litgpt 0.5.13). Run by tests/test_repeated_kv.py
as a script, with torchtune and litgpt installed beside the venv (`pip install --no-deps --target DIR
torchtune==0.6.1`, ZEROCALC_TORCHTUNE_PATH names DIR; litgpt==0.5.13, ZEROCALC_LITGPT_PATH), because torchtune
0.6.1's package import reaches for two things this venv does not give it (litgpt imports as it is):
- torchao.dtypes.nf4tensor, which torchao 0.18 moved to torchao.quantization.quantize_.workflows.nf4.nf4_tensor
  (the same NF4Tensor class): aliased;
- its data-side dependencies (datasets, tiktoken, sentencepiece, blobfile, omegaconf, kagglehub, PIL), imported by
  torchtune/__init__ and torchtune/data but never run by a model's forward or backward: each one that is missing
  is stood in for by an empty module.
The model code measured is the frameworks' own: torchtune.models.llama3_2's builder, its MultiHeadAttention
(torchtune/modules/attention.py: K and V expanded to the query heads and flattened, a copy, when num_kv_heads <
num_heads) and its SDPA call; litgpt.GPT with a Llama config, its CausalSelfAttention (litgpt/model.py: K and V
repeat_interleave'd to the query heads in training when n_query_groups != n_head); and transformers' own SDPA path
with a padded batch (a padding mask: integrations/sdpa_attention.py repeats K and V where grouped-query SDPA would
need no mask).

One decoder block (the second; the rotary tables, batch 1, are left out) of a tiny Llama in bf16, 4 query heads over
2 KV heads, is run forward with a pack hook that records each saved storage once (parameters excluded); the
attention's saves are the 4-D ones (batch, heads, sequence, head dim): q, k, v as the kernel got them and its output
(the CPU flash kernel's autograd node saves the same tensors as CUDA's, derivatives.yaml). Compiled runs the block
under torch.compile (Inductor's default partitioner), the measured block only, warmed up first and measured on a
second call, as compiled_saves.py does.

    PYTHONPATH=TORCHTUNE_DIR:LITGPT_DIR:. python -m tests.measure.repeated_kv_attention     # prints JSON
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import sys
from unittest import mock

SHAPE = dict(vocab=512, layers=2, heads=4, kv_heads=2, hidden=128, ffn=352, batch=2, seq=256)
DATA_SIDE = ("datasets", "tiktoken", "sentencepiece", "blobfile", "omegaconf", "kagglehub", "PIL")


class _Absent(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Empty modules for the data-side packages that are not installed (never run by the model)."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        stub = mock.MagicMock(name=spec.name)
        stub.__path__, stub.__spec__ = [], spec
        return stub

    def exec_module(self, module):
        pass


def load_torchtune():
    nf4 = importlib.import_module("torchao.quantization.quantize_.workflows.nf4.nf4_tensor")
    sys.modules.setdefault("torchao.dtypes.nf4tensor", nf4)
    missing = []
    for name in DATA_SIDE:
        try:
            importlib.import_module(name)
        except Exception:
            missing.append(name)
    sys.meta_path.insert(0, _Absent(tuple(missing)))
    import torchtune
    from torchtune.models.llama3_2._component_builders import llama3_2
    return torchtune.__version__, llama3_2


def _attention_saves(model, block, call, head_dim: int, seq: int):
    """Bytes of the 4-D saves (batch, heads, seq, head_dim) one block makes in a forward, and their head counts."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen, found, inside = set(), [], [False]

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if inside[0] and ptr not in seen and ptr not in params and storage.nbytes():
            seen.add(ptr)
            if t.dim() == 4 and t.shape[0] == SHAPE["batch"] and t.shape[2:] == (seq, head_dim):  # not cos / sin
                found.append((t.shape[1], storage.nbytes()))
        return t

    hooks = [block.register_forward_pre_hook(lambda *_: inside.__setitem__(0, True)),
             block.register_forward_hook(lambda *_: inside.__setitem__(0, False))]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = call()
    out.float().sum().backward()
    for h in hooks:
        h.remove()
    return {"bytes": sum(n for _, n in found), "heads": sorted(h for h, _ in found)}


def _models(s, llama3_2):
    """(name, model, its blocks, a forward returning the logits) for each implementation, built alike."""
    import torch
    from tests.measure.saved_tensors import build_from_config

    from litgpt.config import Config
    from litgpt.model import GPT

    torch.manual_seed(0)
    tt = llama3_2(vocab_size=s["vocab"], num_layers=s["layers"], num_heads=s["heads"], num_kv_heads=s["kv_heads"],
                  embed_dim=s["hidden"], max_seq_len=s["seq"], intermediate_dim=s["ffn"],
                  tie_word_embeddings=True).to(torch.bfloat16).train()
    lit = GPT(Config(block_size=s["seq"], vocab_size=s["vocab"], padded_vocab_size=s["vocab"], n_layer=s["layers"],
                     n_head=s["heads"], n_query_groups=s["kv_heads"], n_embd=s["hidden"], intermediate_size=s["ffn"],
                     mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False, parallel_residual=False,
                     rotary_percentage=1.0)).to(torch.bfloat16).train()
    hf = build_from_config(dict(model_type="llama", num_hidden_layers=s["layers"], hidden_size=s["hidden"],
                                num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                                intermediate_size=s["ffn"], vocab_size=s["vocab"], tie_word_embeddings=True,
                                max_position_embeddings=s["seq"], attn_implementation="sdpa"), torch.bfloat16)
    ids = torch.randint(0, s["vocab"], (s["batch"], s["seq"]))
    padded = torch.ones_like(ids)
    padded[1:, s["seq"] // 2:] = 0          # the second row padded to the first's length: a padding mask
    return (("torchtune", tt, tt.layers, lambda: tt(ids)), ("litgpt", lit, lit.transformer.h, lambda: lit(ids)),
            ("huggingface", hf, hf.model.layers, lambda: hf(input_ids=ids).logits),
            ("huggingface padded", hf, hf.model.layers, lambda: hf(input_ids=ids, attention_mask=padded).logits))


def measure() -> dict:
    from importlib.metadata import version

    import litgpt  # noqa: F401 (imported before torchtune's stand-ins exist: it gets the real packages)
    import torch
    import transformers

    tune_version, llama3_2 = load_torchtune()
    s = SHAPE
    head_dim = s["hidden"] // s["heads"]
    out = {"torch": torch.__version__, "transformers": transformers.__version__, **s}
    for compiled in (False, True):
        for name, model, blocks, call in _models(s, llama3_2):
            if compiled and name.endswith("padded"):
                continue                                   # the same module, compiled above without the mask
            if compiled:
                blocks[1].compile(dynamic=False)
                call().float().sum().backward()          # warm up: compile outside the measured call
                model.zero_grad(set_to_none=True)
            out[f"{name} {'compiled' if compiled else 'eager'}"] = _attention_saves(model, blocks[1], call, head_dim,
                                                                                    s["seq"])
    out["torchtune"], out["litgpt"] = tune_version, version("litgpt")
    return out


if __name__ == "__main__":
    print(json.dumps(measure()))
