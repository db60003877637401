"""The step's framework choices in the app's state (issue 20): Megatron's fused loss, whose communication buffers
(zerocalc.step.buffers), FSDP's wrap, version (1: flat parameters, zerocalc.step.fsdp1) and use_orig_params,
reshard-after-forward and reduce dtype, the allocator whose reserve band is
shown (zerocalc.step.allocator), and the library workspaces. The fields as a link carries them, and the Workload
keywords they give. Where the core has None the state holds a value a link never needs: "auto", or -1 bytes."""

from __future__ import annotations

from zerocalc.step.allocator import ALLOCATORS, DEFAULT_ALLOCATOR
from zerocalc.step.batches import BATCH_MODES, parse_points
from zerocalc.step.buffers import COMM_BUFFERS, FSDP_WRAPS
from zerocalc.step.float8 import FLOAT8_RECIPES
from zerocalc.step.fsdp1 import FSDP_VERSIONS, ORIG_PARAMS, PREFETCH
from zerocalc.step.grad_lifetime import GRAD_LIFETIMES
from zerocalc.step.host import LOADING_CHOICES
from zerocalc.step.losses import LOSS_CHOICES
from zerocalc.step.megatron_recompute import DEFAULT_MODULES, FULL_METHODS, RECOMPUTE_MODULES
from zerocalc.step.op_checkpoint import OP_POLICIES, USER_POLICY_OPS, USER_POLICY_PREFIX
from zerocalc.step.workload import RESHARD_CHOICES, WORKLOAD_LIMITS
from zerocalc.tables import DTYPE_BITS
from zerocalc.versions import PAGE_RELEASES, parse as parse_versions, text as versions_text

OWN_POLICY = "own"      # the op kinds ticked in op_saves (a "save:" policy)


def step_fields(field) -> tuple:
    """The fields, built with ui.state.fields's Field."""
    units_lo, units_hi = WORKLOAD_LIMITS["allocator_units"]
    return (field("comm_buffers", "choice", "auto", COMM_BUFFERS), field("fsdp_wrap", "choice", "blocks", FSDP_WRAPS),
            field("fsdp_version", "int", 2, (), min(FSDP_VERSIONS), max(FSDP_VERSIONS)),   # an int, as imports give it
            field("fsdp_use_orig_params", "choice", "no", ORIG_PARAMS),
            field("fsdp_backward_prefetch", "choice", "pre", PREFETCH),
            field("reshard_after_forward", "choice", "auto", RESHARD_CHOICES),
            field("grad_lifetime", "choice", "auto", GRAD_LIFETIMES),
            field("reduce_dtype", "choice", "auto", ("auto",) + tuple(DTYPE_BITS)),
            field("allocator", "choice", DEFAULT_ALLOCATOR, tuple(ALLOCATORS)),
            field("allocator_units", "int", 0, (), units_lo, units_hi),
            field("workspace_bytes", "count", -1, (), -1, WORKLOAD_LIMITS["workspace_bytes"][1]),  # -1: the table's
            field("loss_fusion", "bool", False),
            # the recipe (issue 21): the loss implementation, its chunks, torch.compile of the blocks
            field("loss", "choice", "auto", LOSS_CHOICES),
            field("loss_chunks", "int", 8, (), *WORKLOAD_LIMITS["loss_chunks"]),
            field("compile", "bool", False), field("repeat_kv", "bool", False),
            field("activation_offload", "bool", False),
            field("optimizer_in_backward", "bool", False), field("float8", "choice", "none", FLOAT8_RECIPES),
            field("float8_all_gather", "bool", False), field("async_tp", "bool", False),
            field("op_policy", "choice", "torchtitan", tuple(OP_POLICIES) + (OWN_POLICY,)),
            field("op_saves", "multi", ("mm/2", "attention"), USER_POLICY_OPS),
            # Megatron's recompute (zerocalc/step/megatron_recompute.py): its selective modules, its full method
            field("recompute_modules", "multi", (DEFAULT_MODULES,), tuple(RECOMPUTE_MODULES)),
            field("recompute_method", "choice", "uniform", FULL_METHODS),
            field("recompute_num_layers", "int", 1, (), *WORKLOAD_LIMITS["recompute_num_layers"]),
            # Calibrate's Set: live tensors a measurement showed beyond the estimate (issue 22)
            field("measured_extra_bytes", "count", 0, (), *WORKLOAD_LIMITS["measured_extra_bytes"]),
            # a node's RAM, typed in GB (issue 33: it was typed in bytes); the core counts bytes
            field("host_ram_gb", "factor", 0.0, (), 0.0, WORKLOAD_LIMITS["host_memory_bytes"][1] // 10**9),
            field("model_loading", "choice", "auto", LOADING_CHOICES),
            # the batch as it really is (issue 37, zerocalc/step/batches.py) and Hugging Face's router loss
            field("batch_mode", "choice", "fixed", BATCH_MODES), field("router_loss", "bool", False),
            field("holds_output", "bool", False),          # a loop that keeps the model's output (losses.py)
            field("holds_graph", "bool", False),           # a loop that keeps the last step's loss (LitGPT's)
            field("batch_lengths", "points", (), (LENGTHS_HINT,)),      # padded: the samples' lengths
            # the library releases the run used (zerocalc/versions.py): one field per library with rows
            *(field(f"{lib}_version", "choice", releases[0], releases) for lib, releases in PAGE_RELEASES.items()))


LENGTHS_HINT = "percentile points of the samples' lengths, e.g. p50=512,p90=2048,max=8192 (the last at max)"


def lengths_text(points) -> str:
    """The points as the text box and the link write them: "p50=512,p90=2048,max=8192"; nothing when none."""
    return ",".join(f"p{p}={t}" if p != 100 else f"max={t}" for p, t in points)


def lengths_from_text(text: str) -> tuple:
    """The text box's points (nothing: none given); FieldError (a ValueError) naming what is allowed."""
    return () if not str(text).strip() else parse_points(text)


def step_versions(state: dict) -> tuple:
    """FineTune.versions from the release fields (only those differing from the defaults)."""
    return parse_versions(versions_text(tuple((lib, state[f"{lib}_version"]) for lib in PAGE_RELEASES)))


def step_workload(state: dict) -> dict:
    """The Workload keywords of those fields (Megatron's loss fusion only under the megatron implementation)."""
    return {"comm_buffers": state["comm_buffers"], "fsdp_wrap": state["fsdp_wrap"],
            "fsdp_version": state["fsdp_version"], "fsdp_use_orig_params": state["fsdp_use_orig_params"],
            # FSDP2 always prefetches at each pre-backward: the FSDP1 choice applies to FSDP1 only
            "fsdp_backward_prefetch": state["fsdp_backward_prefetch"] if state["fsdp_version"] == 1 else "pre",
            "reshard_after_forward": state["reshard_after_forward"], "grad_lifetime": state["grad_lifetime"],
            "reduce_dtype": None if state["reduce_dtype"] == "auto" else state["reduce_dtype"],
            "allocator": state["allocator"], "allocator_units": state["allocator_units"],
            "workspace_bytes": None if state["workspace_bytes"] < 0 else state["workspace_bytes"],
            "loss_fusion": bool(state["loss_fusion"]) and state["implementation"] == "megatron",
            "loss": state["loss"] if state["implementation"] == "huggingface" else "auto",
            "loss_chunks": state["loss_chunks"], "compile": bool(state["compile"]),
            "repeat_kv": bool(state["repeat_kv"]),
            "activation_offload": bool(state["activation_offload"]) and state["recompute"] == "full"
            and state["recompute_every"] == 1 and not megatron_full(state),
            "optimizer_in_backward": bool(state["optimizer_in_backward"]) and state["micro_batches"] == 1,
            "float8": state["float8"],
            "float8_all_gather": bool(state["float8_all_gather"]) and state["float8"] == "tensorwise",
            "async_tp": bool(state["async_tp"]) and bool(state["compile"]) and state["tp"] > 1
            and bool(state["sequence_parallel"]) and state["implementation"] == "huggingface",
            "op_policy": op_policy(state), **megatron_recompute(state),
            "measured_extra_bytes": state["measured_extra_bytes"],
            "host_memory_bytes": round(state["host_ram_gb"] * 10**9), "model_loading": state["model_loading"],
            # packing needs varlen attention (the core refuses it with eager)
            "batch_mode": batch_mode(state),
            "batch_lengths": tuple(state["batch_lengths"]) if batch_mode(state) == "padded" else ()}


def batch_mode(state: dict) -> str:
    """The state's batch mode, as the core takes it: packing needs varlen attention (the core refuses it with
    eager), so packed with eager reads as fixed."""
    return state["batch_mode"] if state["batch_mode"] != "packed" or state["attention"] == "flash" else "fixed"


def op_policy(state: dict) -> str:
    """The core's op_policy: a named one, or "own": the op kinds ticked in op_saves as a "save:" policy."""
    if state["recompute"] != "op":
        return "torchtitan"
    if state["op_policy"] == OWN_POLICY:
        return USER_POLICY_PREFIX + ",".join(state["op_saves"])
    return state["op_policy"]


def megatron_full(state: dict) -> bool:
    return state["recompute_method"] != "uniform" or state["recompute_num_layers"] != 1


def megatron_recompute(state: dict) -> dict:
    """Megatron's modules under selective recompute, its method under full recompute of every block (the other
    levels keep the defaults, as op keeps torchtitan's policy)."""
    full = state["recompute"] == "full" and state["recompute_every"] == 1
    return {"recompute_modules": ",".join(state["recompute_modules"]) if state["recompute"] == "selective"
            else DEFAULT_MODULES,
            "recompute_method": state["recompute_method"] if full else "uniform",
            "recompute_num_layers": state["recompute_num_layers"] if full else 1}
