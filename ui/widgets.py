"""Sidebar controls. Each widget's key is its state field's name, so st.session_state *is* the app state; the
first run seeds it from the URL, and choosing a model or a convention resets the fields that follow from it."""

from __future__ import annotations

import streamlit as st

from zerocalc.hf_config import MAX_CONFIG_BYTES, ConfigError, architecture_from_config
from zerocalc.scenario import FieldError

from .figures import STAGE_LABELS
from .state import (ARCH_FIELDS, CUSTOM, FIELD, FIELDS, PARAMS_ONLY, PRECISION_FIELDS, _arch_value, default_for)

LABELS = {
    "model": "Model", "params": "Parameters (7B, 1.5T, 350M, 1e9 ...)", "layers": "Layers", "hidden": "Hidden size",
    "heads": "Attention heads", "kv_heads": "KV heads (GQA)", "head_dim": "Head size (0: hidden / heads)",
    "ffn": "FFN size", "vocab": "Vocabulary", "context": "Context length (learned positions)",
    "tied_embeddings": "Tied embeddings", "gated_mlp": "Gated MLP (SwiGLU)", "norm": "Norm", "bias": "Linear biases",
    "qkv_bias": "Q/K/V biases", "positions": "Positions", "fused_qkv": "Fused QKV module",
    "fused_gate_up": "Fused gate/up module", "activation": "Activation", "softmax_fp32": "Softmax in fp32 (eager)",
    "attn_dropout": "Attention dropout", "resid_dropout": "Residual dropout", "embd_dropout": "Embedding dropout",
    "convention": "Convention", "param_dtype": "Parameters dtype", "grad_dtype": "Gradients dtype",
    "master_dtype": "Master copy dtype", "grad_accum_dtype": "Extra gradient buffer", "optimizer": "Optimizer",
    "optimizer_dtype": "Optimizer state dtype", "comm_dtype": "Communication dtype",
    "workers": "Data-parallel workers (dp)",
    "shard_group": "Shard group (0: all workers)", "gpus_per_node": "Workers per node",
    "offload_optimizer": "Offload optimizer", "offload_params": "Offload parameters (ZeRO-3)",
    "micro_batch": "Micro-batch", "seq_len": "Sequence length", "attention": "Attention",
    "recompute": "Recompute", "activation_dtype": "Activation dtype", "implementation": "Kernels (what is saved)",
    "reduce_bucket_size": "reduce_bucket_size (elements)", "allgather_bucket_size": "allgather_bucket_size (elements)",
    "prefetch_bucket_size": "stage3_prefetch_bucket_size", "max_live_parameters": "stage3_max_live_parameters",
    "param_persistence_threshold": "stage3_param_persistence_threshold", "overlap_comm": "overlap_comm",
    "cuda_context_bytes": "CUDA context + framework (bytes)", "fragmentation_percent": "Allocator reserve (%)",
    "gpu": "GPU", "gpu_memory": "Custom capacity (bytes)", "buffer_factor": "DeepSpeed buffer factor",
    "units": "Units", "breakdown": "Bars by", "stage": "Stage",
    "tp": "Tensor parallel (tp)", "pp": "Pipeline stages (pp)", "schedule": "Pipeline schedule",
    "vpp": "Virtual stages per rank (vpp)", "cp": "Context parallel (cp)", "sequence_parallel": "Sequence parallel",
    "loss_parallel": "Vocab-parallel logits and loss", "vocab_divisor": "Pad vocabulary to a multiple of (x tp; 0: auto)",
    "micro_batches": "Micro-batches per step (gradient accumulation)",
}
HELP = {
    "convention": "Which tensors a framework keeps per parameter; each dtype below can then be changed.",
    "units": "GB = 10^9 bytes, GiB = 2^30 bytes.",
    "shard_group": "Hybrid sharding (FSDP HYBRID_SHARD, ZeRO++ hpZ): state split within groups of this size.",
    "cuda_context_bytes": "Outside PyTorch's allocator, inside nvidia-smi's figure. Assumed 1 GiB.",
    "fragmentation_percent": "Caching-allocator reserve and fragmentation, as a share of live tensors.",
    "workers": "The ZeRO / FSDP group. World size = dp x tp x pp x cp.",
    "tp": "Splits heads and the FFN across GPUs of a node (Megatron, torchtitan); must divide heads, KV heads, FFN.",
    "pp": "Splits the layers into stages; the first stage also holds the embedding, the last the head.",
    "schedule": "1F1B holds up to pp micro-batches on the first stage; interleaved adds virtual stages; "
                "GPipe holds all micro-batches.",
    "vpp": "Model chunks per pipeline rank (interleaved schedule); pp x vpp must divide the layers.",
    "cp": "Splits the sequence across GPUs (ring attention, flash only); ZeRO then shards over dp x cp.",
    "sequence_parallel": "Also splits norms, dropout and the residual stream over tp (Korthikanti et al. 2022).",
    "loss_parallel": "Off: every tensor-parallel rank gathers the full logits (Hugging Face's colwise_rep head).",
    "vocab_divisor": "Megatron's make_vocab_size_divisible_by (128 with megatron kernels; 0 picks it).",
    "micro_batches": "Micro-batches per optimizer step; in flight on pipeline stages; ZeRO-2/3 reduce each one.",
}
SLIDERS = {"micro_batch", "fragmentation_percent", "attn_dropout", "resid_dropout", "embd_dropout"}
RADIOS = {"units", "attention", "breakdown"}


def seed(state: dict) -> None:
    """Put a state into the widgets' session slots on a session's first run. A slot that already holds a value
    is the user's own input, sent before that first run finished (typing during the page load): it wins."""
    for name, value in state.items():
        if name not in st.session_state:
            st.session_state[name] = value


def _on_model_change():
    model = st.session_state["model"]
    if model not in (CUSTOM, PARAMS_ONLY):
        current = {"model": model}
        for name in ARCH_FIELDS:
            st.session_state[name] = default_for(name, current)


def _on_schedule_change():
    # Virtual stages exist only in the interleaved schedule (Megatron needs at least 2 there).
    interleaved = st.session_state["schedule"] == "interleaved"
    st.session_state["vpp"] = max(2, st.session_state["vpp"]) if interleaved else 1


def _on_convention_change():
    current = {"convention": st.session_state["convention"]}
    for name in PRECISION_FIELDS:
        st.session_state[name] = default_for(name, current)


def _on_config_upload():
    upload = st.session_state.get("config_upload")
    st.session_state.pop("config_error", None)
    if upload is None:
        return
    try:
        data = upload.getvalue()
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError("config", f"{len(data):,} bytes", f"at most {MAX_CONFIG_BYTES:,} bytes")
        arch = architecture_from_config(data)
    except (ConfigError, FieldError) as exc:  # every refusal names the config key and what is allowed
        st.session_state["config_error"] = f"config.json refused: {exc}"
        return
    st.session_state["model"] = CUSTOM
    for name in ARCH_FIELDS:
        st.session_state[name] = _arch_value(arch, name)


def widget(name: str, container=st, **extra):
    f = FIELD[name]
    label, help_text = LABELS[name], HELP.get(name)
    if name == "stage":
        return container.radio(label, range(4), key=name, horizontal=True, format_func=STAGE_LABELS.__getitem__,
                               **extra)
    if f.kind == "choice":
        if name in RADIOS:
            return container.radio(label, f.choices, key=name, help=help_text, horizontal=True, **extra)
        return container.selectbox(label, f.choices, key=name, help=help_text, **extra)
    if f.kind == "bool":
        return container.checkbox(label, key=name, help=help_text, **extra)
    if f.kind == "prob":
        return container.slider(label, float(f.lo), float(f.hi), step=0.01, key=name, help=help_text, **extra)
    if f.kind == "factor":
        return container.number_input(label, float(f.lo), float(f.hi), step=0.1, key=name, help=help_text, **extra)
    if name in SLIDERS:
        return container.slider(label, int(f.lo), int(f.hi), step=1, key=name, help=help_text, **extra)
    return container.number_input(label, int(f.lo), int(f.hi), step=1, key=name, help=help_text, **extra)


def sidebar() -> None:
    """Every input control, grouped as a user plans: model, precision, cluster, step, GPU, assumptions."""
    sb = st.sidebar
    sb.header("Model")
    widget("model", sb, on_change=_on_model_change)
    if st.session_state["model"] == PARAMS_ONLY:
        sb.text_input(LABELS["params"], key="params_text", help="The peak panel needs an architecture.")
    else:
        # Drawn only on demand: two dozen idle widgets would slow every rerun (their values persist regardless).
        if sb.toggle("Edit the architecture", key="edit_arch"):
            for name in ARCH_FIELDS:
                widget(name, sb)
        sb.file_uploader("…or load a Hugging Face config.json", type=["json"], key="config_upload",
                         on_change=_on_config_upload, help="Parsed as JSON, never executed. 1 MB at most.")
    sb.header("Precision")
    widget("convention", sb, on_change=_on_convention_change)
    for name in PRECISION_FIELDS:
        widget(name, sb)
    sb.header("Cluster")
    for name in ("workers", "shard_group", "gpus_per_node", "offload_optimizer", "offload_params"):
        widget(name, sb)
    if st.session_state["model"] != PARAMS_ONLY and sb.toggle("Model parallelism (tp, pp, cp)", key="edit_layout"):
        widget("tp", sb)
        widget("sequence_parallel", sb)
        widget("pp", sb)
        widget("schedule", sb, on_change=_on_schedule_change)
        if st.session_state["schedule"] == "interleaved":
            widget("vpp", sb)
        for name in ("cp", "loss_parallel", "vocab_divisor"):
            widget(name, sb)
    sb.header("Training step")
    for name in ("micro_batch", "micro_batches", "seq_len", "attention", "recompute", "activation_dtype",
                 "implementation"):
        widget(name, sb)
    sb.header("GPU")
    widget("gpu", sb)
    if st.session_state["gpu"] == CUSTOM:
        widget("gpu_memory", sb)
    if sb.toggle("Edit working-set assumptions", key="edit_assumptions"):
        for name in ("reduce_bucket_size", "allgather_bucket_size", "prefetch_bucket_size", "max_live_parameters",
                     "param_persistence_threshold", "overlap_comm", "cuda_context_bytes", "fragmentation_percent",
                     "buffer_factor"):
            widget(name, sb)
    sb.header("Display")
    widget("units", sb)


def read_state() -> dict:
    """The state as the widgets hold it now (params typed as text is parsed by the caller)."""
    return {f.name: st.session_state[f.name] for f in FIELDS}
