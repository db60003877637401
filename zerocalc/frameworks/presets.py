"""The zerocalc preset a Hugging Face model id names, matched by name: shared by the framework launchers
(LLaMA-Factory, the HF Trainer) and the RL importers (zerocalc/rl/configs), which re-export it."""

from __future__ import annotations

from ..model.presets import MODEL_PRESETS

ALIASES = {
    # Qwen/Qwen2-7B(-Instruct) config.json: hidden 3584, intermediate 18944, 28 layers, 28 heads, 4 KV heads,
    # vocab 152064, untied, q/k/v biases: the qwen2.5-7b preset's shapes (only the context length differs)
    "qwen2-7b": "qwen2.5-7b",
    # Meta's own repository names (meta-llama/Meta-Llama-3-8B, NousResearch/Meta-Llama-3.1-8B: axolotl's examples)
    "meta-llama-3-8b": "llama-3-8b", "meta-llama-3-70b": "llama-3-70b", "meta-llama-3.1-8b": "llama-3.1-8b",
    "meta-llama-3.1-70b": "llama-3.1-70b", "meta-llama-3.1-405b": "llama-3.1-405b",
}


def preset_for(model_id) -> str:
    """The preset a Hugging Face id names ("OpenRLHF/Llama-3-8b-sft-mixture" -> llama-3-8b): the longest preset
    name (or alias) its lowercased repository name starts with, followed by the end or a dash; "" when none."""
    if not isinstance(model_id, str):
        return ""
    name = model_id.rstrip("/").rsplit("/", 1)[-1].lower()
    for alias in sorted(ALIASES, key=len, reverse=True):
        if name == alias or name.startswith(alias + "-"):
            return ALIASES[alias]
    for preset in sorted(MODEL_PRESETS, key=len, reverse=True):
        if name == preset or name.startswith(preset + "-"):
            return preset
    return ""
