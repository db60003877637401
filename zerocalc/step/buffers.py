"""Communication buffers by framework: which gradient buckets and gathered parameters a step holds beyond the ledger.

Workload.comm_buffers names the framework whose buffers are counted (one row each below; COUNTS says each in
words, AUTO maps conventions to rows); "auto" takes it from the scenario's convention. One function,
`buffer_items`, applies the row to one stage of one rank.

- deepspeed: DeepSpeed's fixed-size buckets (deepspeed/runtime/zero/config.py defaults, in elements):
  the ipg reduce bucket is `reduce_bucket_size` elements in the gradient dtype whatever the trained count (LoRA
  carries all of it): at stages 1-2 from backward's first gradient to its end, twice with overlap_comm
  (stage_1_and_2.py setup_buckets), at stage 3 one from initialize on (stage3.py _setup_for_real_optimizer);
  measured against DeepSpeed 0.19.8 (tests/measure/deepspeed_buckets.py). Stage 0's engine flattens at most the
  gradients into its all-reduce bucket. The all-gather bucket of updated parameters at stages 1-2; at stage 3
  the largest module plus max_live_parameters resident (zero3_live_params), the persistent small parameters and
  the gathered module's gradient. DeepSpeed allocates them whatever the data-parallel size (setup_buckets has no
  world-size test), so an explicit "deepspeed" keeps them at one GPU.
- megatron: nothing beyond the ledger. Megatron-Core's DDP reduces (all-reduce, or reduce-scatter with the
  distributed optimizer) in place in the contiguous grad buffer the 18-byte ledger counts as fp32 main gradients,
  and all-gathers updated parameters into the param buffer it counts as bf16 parameters
  (megatron/core/distributed/param_and_grad_buffer.py at d98e8a64: start_grad_sync reduce-scatters
  `local_data_view` of `bucket.grad_data` into itself; start_param_sync gathers into `bucket.param_data`).
  Stage 3 (Megatron's own FSDP) is counted with the fsdp row.
- fsdp: FSDP2 `fully_shard` one unit at a time (torch 2.13.0, git cf30153c, _fully_shard/_fsdp_param_group.py and
  _fsdp_collectives.py; measured on gloo: tests/measure/fsdp2_buffers.py). A unit's all-gather output and its
  unsharded parameters are `dp x ceil(rows / dp)` padded rows of every tensor in param_dtype (the compute dtype);
  the unsharded gradient is the tensor's own size in that dtype; the reduce-scatter input is padded, in
  Workload.reduce_dtype (None: param_dtype, MixedPrecisionPolicy's default; torchtitan's mixed_precision_reduce
  is "float32").
  Forward, at the loss: only the units not resharded after forward stay gathered (the root's all-gather output
  is freed by the root's post-forward). Backward, over its first units (the ones that run while every activation
  is saved): the largest of the windows in `fsdp_backward`. The wrap (Workload.fsdp_wrap):
    blocks      each decoder block a unit, embeddings + final norm + head in the root (accelerate's
                TRANSFORMER_BASED_WRAP, torch's FSDP2 examples): the root stays gathered from its forward to the end
                of backward and accumulates its gradients until then;
    torchtitan  torchtitan/distributed/fsdp.py apply_fsdp_to_decoder at b5bcd76c: the embedding its own unit,
                [norm, lm_head] one unit kept gathered after forward, each block a unit (tied embeddings: one unit
                of all three, kept, like the blocks wrap's root).
- none: nothing is reduced or gathered (one process).
auto: megatron for the megatron convention, fsdp for fsdp2, deepspeed otherwise; at one data-parallel rank (every
ZeRO group of size 1) none, except under the deepspeed convention (DeepSpeed still allocates its buckets).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ..tables import DTYPE_BITS, bytes_of
from .fsdp1 import PREFETCHED_IN, flat_elements, flat_unit, unit_gradient

COMM_BUFFERS = ("auto", "deepspeed", "megatron", "fsdp", "none")
FSDP_WRAPS = ("blocks", "torchtitan")

# convention -> the framework whose buffers auto counts (data, one row per convention; the default row: deepspeed)
AUTO = {"megatron": "megatron", "fsdp2": "fsdp", "deepspeed": "deepspeed"}


class Unit(NamedTuple):
    """One FSDP unit on one rank, in elements: the all-gather output (= the unsharded parameters, padded), the
    unsharded gradients (trainable tensors, their own size) and the reduce-scatter input (trainable, padded)."""
    params: int = 0
    grads: int = 0
    reduce: int = 0

    def __add__(self, other):
        return Unit(*(a + b for a, b in zip(self, other)))


class FsdpUnits(NamedTuple):
    block: Unit        # the rank's largest decoder block
    blocks: int        # blocks on the rank (a prefetch needs a second one)
    first: Unit        # the embedding end (embeddings, positions)
    last: Unit         # the output end (final norm, head)
    tied: bool = False # no separate head on the rank (tied embeddings): torchtitan wraps the ends as one unit
    prefetch: int | None = None   # elements the next block's prefetch gathers; None: the block's (FSDP1's
                                  # leaf-wrapped adapters: the frozen flat unit only, step/fsdp1.py)
    tower: Unit = Unit()          # a vision tower's largest block: its own unit, outside the root (tower_block)


def tower_block(t) -> bool:
    """A vision tower's block tensor (model/vision.py rows "blocks.i." / "global_blocks.i."): FSDP wraps each block
    as its own unit. transformers 5.24 lists the blocks in _no_split_modules (an instance's set gathers its
    sub-models': Qwen2_5_VLVisionBlock, Qwen3VLVisionBlock, SiglipEncoderLayer for Gemma 3, InternVLVisionLayer,
    MllamaVisionEncoderLayer; modeling_utils.py post_init), which accelerate 1.15's TRANSFORMER_BASED_WRAP wraps
    (utils/dataclasses.py FullyShardedDataParallelPlugin.set_auto_wrap_policy), as torchtitan-style fully_shard per
    block does. Such a unit is gathered only while the tower runs (before the first decoder block, and at the end
    of backward), so it is never in the root that stays gathered; the merger / projector and the patch and position
    embeddings stay in the root (Gemma 3's SiglipVisionEmbeddings is a unit of its own too: 5.4M parameters, left
    in the root here)."""
    return t.role in ("vision", "vision adapter") and t.name.startswith(("blocks.", "global_blocks."))


def framework(scenario, workload, shape) -> str:
    """The row that applies: Workload.comm_buffers, or for "auto" the convention's framework; none where nothing
    is sharded (every ZeRO group of one rank) unless DeepSpeed is named (it allocates its buckets anyway)."""
    chosen = workload.comm_buffers
    name = chosen if chosen != "auto" else AUTO.get(scenario.convention, "deepspeed")
    deepspeed_named = chosen == "deepspeed" or (chosen == "auto" and scenario.convention == "deepspeed")
    if name != "none" and not deepspeed_named and all(g.shard == 1 for g in shape.groups):
        return "none"
    return name


# Whether each framework shards bitsandbytes' quantization state with the packed weights (model/finetune.py
# is_quant_state). DeepSpeed ZeRO-3 and FSDP1 partition parameters only, and the state is an attribute of the
# parameter: every rank keeps all of it (AnswerDotAI/fsdp_qlora train.py load_and_quantize at 05ed9f2: "FSDP only
# syncs parameters and buffers, so the quant_state isn't copied"; recorded on the CPU for FSDP1 and DeepSpeed 0.19.8
# ZeRO-3 over 2 gloo ranks: tests/measure/quant_state_fsdp1.py, quant_state_zero3.py).
# FSDP2's QLoRA is torchao's NF4Tensor (torchtune), whose scalers are inner tensors sharded with the data (torchao
# dtypes/nf4tensor.py fsdp_pre_all_gather); Megatron has no bitsandbytes base.
SHARDS_QUANT_STATE = {"deepspeed": False, "fsdp1": False, "fsdp2": True, "megatron": True, "none": False}


def shards_quant_state(scenario, workload) -> bool:
    """Whether the plan's framework manages bitsandbytes' quantization state with the packed weights. Where it does
    not, the state is neither sharded nor offloaded: FSDP1's CPU offload moves each unit's flat parameter alone
    (torch 2.13 distributed/fsdp/_init_utils.py _init_param_handle_from_params: handle.flat_param_to(cpu)), after
    _move_states_to_device moved the module to device_id, and Params4bit.to carries its QuantState along
    (bitsandbytes 0.50.2 nn/modules.py Params4bit.to: self.quant_state.to(device)), so it stays on the GPU;
    DeepSpeed's offload_param moves the partitions it owns (ds_tensor), which the state is not part of."""
    chosen = workload.comm_buffers
    name = chosen if chosen != "auto" else AUTO.get(scenario.convention, "deepspeed")
    if name == "fsdp":
        name = f"fsdp{workload.fsdp_version}"
    return SHARDS_QUANT_STATE[name]


# what each row counts, in words (the report and the page say which row applied and why)
COUNTS = {
    "deepspeed": "DeepSpeed's fixed-size buckets: reduce_bucket_size (twice with overlap_comm), the stage 1-2 "
                 "all-gather bucket, ZeRO-3's largest module + prefetch and persistent parameters",
    "megatron": "nothing beyond the ledger: Megatron's DDP reduces in its grad buffer and gathers into its param "
                "buffer (stage 3 as FSDP)",
    "fsdp": "FSDP one unit at a time: the units kept gathered, a block's unsharded parameters, gradients and "
            "reduce-scatter input, the next block's prefetched all-gather",
    "none": "nothing: no data parallelism, so nothing is reduced or gathered",
}


def describe(scenario, workload, shape) -> dict:
    """Which row applied to a rank and why: {"chosen", "counted", "why"}."""
    counted = framework(scenario, workload, shape)
    chosen = workload.comm_buffers
    why = COUNTS[counted]
    if counted == "fsdp" and workload.fsdp_version == 1:
        why += (f"; FSDP1's flat parameters (use_orig_params {workload.fsdp_use_orig_params}), the root kept "
                "gathered through backward")
    if chosen == "auto":
        why = f"auto (convention {scenario.convention}): " + why
    elif counted != chosen:
        why = f"{chosen} without data parallelism: " + why
    return {"chosen": chosen, "counted": counted, "why": why}


QUANTIZED = ("nf4", "fp4_e2m1", "int4", "int8", "uint8")   # storage FSDP gathers as it is, never cast


@lru_cache(maxsize=1024)     # a layout search asks it of each recompute / offload variant of a rank class
def fsdp_units(rank, groups, compute_bits: int = 16, float8_gather: bool = False, version: int = 2,
               orig_params: str = "no", rbits: int | None = None) -> FsdpUnits:
    """The rank's FSDP units from its holdings. FSDP2: each tensor sharded over its group's size, padded per tensor.
    FSDP1 (`version` 1): one flat parameter per unit, padded once (step/fsdp1.py flat_unit, with use_orig_params
    `orig_params` and the reduce width `rbits`). A quantized frozen base (QLoRA's nf4) is gathered in its packed
    storage, not in param_dtype (bitsandbytes packs two 4-bit values a byte into bnb_4bit_quant_storage; FSDP's
    mixed precision casts floating tensors only): its elements count as compute-dtype elements of the same bytes.
    `float8_gather`: torchao's float8 all-gather (FSDP2), the blocks' linear weights (2-D layer tensors) gathered
    at 8 bits (step/float8.py); their gradients stay wide."""
    if version == 1:
        return _flat_units(rank, groups, compute_bits, orig_params, rbits or compute_bits)
    shard = {g.name: g.shard for g in groups}
    kinds = {"all": Unit(), "dense": Unit(), "moe": Unit()}
    seen, first, last, tower = {}, Unit(), Unit(), {}
    for h in rank.holdings:
        n = shard.get(h.group, 1)
        padded = -(-h.rows // n) * n * (h.local_elements // h.rows if h.rows else 0)
        if h.tensor.storage in QUANTIZED:
            padded = -(-padded * DTYPE_BITS[h.tensor.storage] // compute_bits)
        t = h.tensor
        gathered = padded
        if float8_gather and t.place == "layer" and len(t.shape) == 2 and t.storage not in QUANTIZED:
            gathered = -(-padded * 8 // compute_bits)
        u = Unit(gathered, h.local_elements if t.trainable else 0, padded if t.trainable else 0)
        if t.place == "layer":
            key = (t.kind, t.name)                     # rows split by layer range: one block holds one of them
            if key in seen:
                seen[key] = Unit(*map(max, seen[key], u))
            else:
                seen[key] = u
        elif tower_block(t):
            block = t.name.split(".", 2)[:2]
            tower[tuple(block)] = tower.get(tuple(block), Unit()) + u
        elif t.place == "first":
            first += u
        else:
            last += u
    for (kind, _), u in seen.items():
        kinds[kind] += u
    dense, moe = kinds["all"] + kinds["dense"], kinds["all"] + kinds["moe"]
    return FsdpUnits(dense if dense.params >= moe.params else moe, rank.layers, first, last, _tied(rank),
                     tower=max(tower.values(), key=lambda u: u.params, default=Unit()))


def _tied(rank) -> bool:
    return not any(h.tensor.role == "head" and not h.tensor.tied for h in rank.holdings)


def _flat_units(rank, groups, compute_bits: int, orig_params: str, rbits: int) -> FsdpUnits:
    """FSDP1's units (step/fsdp1.py): each decoder block one flat parameter, the embeddings, final norm and head
    the root's. The root's gathered size is split as first (the embedding end's flat elements) and last (the rest,
    with the root's padding); its gradients are the tensors' own (they wait in autograd until the embedding's
    arrives, measured); the output end's trainable ones, or all of them in a mixed root under use_orig_params."""
    shard = {g.name: g.shard for g in groups}
    world, seen, ends = 1, {}, {"first": [], "last": []}
    for h in rank.holdings:
        world = max(world, shard.get(h.group, 1))
        t = h.tensor
        elements = h.local_elements
        if t.storage in QUANTIZED:
            elements = -(-elements * DTYPE_BITS[t.storage] // compute_bits)
        piece = (elements, bool(t.trainable))
        if t.place == "layer":
            key = (t.kind, t.name, t.role)
            seen[key] = max(seen.get(key, piece), piece)
        elif tower_block(t):                   # a tower block: its own flat unit, never the root's
            continue
        else:
            ends["first" if t.place == "first" else "last"].append(piece)
    kinds = {"all": [], "dense": [], "moe": []}
    # module order: Hugging Face decoder layers register self_attn and mlp before their norms (LlamaDecoderLayer)
    for norms in (False, True):
        for (kind, _, role), piece in seen.items():
            if (role == "norm") == norms:
                kinds[kind].append(piece)
    pieces = [kinds["all"] + kinds[k] for k in ("dense", "moe")]
    units = [Unit(*flat_unit(p, world, orig_params, compute_bits, rbits)) for p in pieces]
    covers = [unit_gradient(p, orig_params) for p in pieces]
    block, covers = max(zip(units, covers), key=lambda uc: uc[0].params)
    root_pieces = ends["first"] + ends["last"]
    root = Unit(*flat_unit(root_pieces, world, orig_params, compute_bits, rbits))
    first_flat = flat_elements(ends["first"], orig_params, compute_bits)
    mixed_flat = root.grads == flat_elements(root_pieces, orig_params, compute_bits) and root.grads
    own = lambda pieces: sum(e for e, t in pieces if t or mixed_flat)  # noqa: E731
    first = Unit(first_flat, own(ends["first"]), 0)
    last = Unit(root.params - first_flat, own(ends["last"]), root.reduce)
    prefetch = block.params - -(-block.grads // world) * world if covers == "leaf" else None
    return FsdpUnits(block, rank.layers, first, last, _tied(rank), prefetch)


def reduce_bits(workload, compute_bits: int) -> int:
    """The width FSDP reduces (and accumulates unsharded) gradients in: MixedPrecisionPolicy.reduce_dtype, or the
    compute dtype when none is named (the policy's default)."""
    return DTYPE_BITS[workload.reduce_dtype] if workload.reduce_dtype else compute_bits


def fsdp_forward(units: FsdpUnits, wrap: str, pbits: int) -> int:
    """Gathered at the loss: the units kept after forward (the root; torchtitan's [norm, lm_head] unit)."""
    kept = units.first + units.last if wrap == "blocks" or units.tied else units.last
    return bytes_of(kept.params, pbits)


def fsdp_backward(units: FsdpUnits, wrap: str, pbits: int, rbits: int, held: bool = True,
                  prefetch: str = "pre") -> tuple[int, int]:
    """(gathered parameters, unsharded gradients + reduce-scatter input) of the largest backward window from the
    output end down to block 1 (_fsdp_param_group.py: pre_backward unshards the unit and prefetches the previous
    unit's all-gather; post_backward reshards, then reduce-scatters, and keeps that reduce-scatter input until the
    next unit's post_backward pops it). P, G, RS: a block's unsharded parameters, gradients, reduce-scatter input;
    A: the next block's prefetched all-gather (P-sized, with a second block on the rank).
      blocks wrap (the root R keeps both ends gathered and accumulates the output end's gradients G_out):
        output end  R + G_out + A;  last block  R + G_out + P + G + A;  a later block (three or more)
        R + G_out + P + G + A + RS (the block after it holds its input);  a block's reduce  R + G_out + G + RS + A
      torchtitan wrap (H = [norm, lm_head], kept after forward):
        H compute  H.P + H.G + A;  H reduce  H.G + H.RS + A;  last block  P + G + A + H.RS (held);
        a later block  P + G + A + RS;  a block's reduce  G + RS + A
    Not counted (after most activations are freed): block 0's prefetch of torchtitan's embedding unit and the
    reduce-scatter of the root or embedding unit at the end of backward.
    FSDP1 (`held` False): a unit's post-backward drops its reduce tensors when it returns (step/fsdp1.py), so no
    window holds the previous block's; RS is then the cast and padded copies of the gradient. Its
    backward_prefetch (`prefetch`, step/fsdp1.py PREFETCHED_IN) says which windows hold A."""
    u, last = units.block, units.last
    p, g, rs = bytes_of(u.params, pbits), bytes_of(u.grads, pbits), bytes_of(u.reduce, rbits)
    a = (p if units.prefetch is None else bytes_of(units.prefetch, pbits)) if units.blocks > 1 else 0
    later = units.blocks > 2 and held
    a_out, a_compute, a_reduce = (a if w in PREFETCHED_IN[prefetch] else 0 for w in ("output end", "compute", "reduce"))
    if wrap == "blocks" or units.tied:
        root = bytes_of((units.first + units.last).params, pbits)
        # tied: the head's gradient is the embedding's
        out = bytes_of(last.grads + (units.first.grads if units.tied else 0), pbits)
        windows = [(root + a_out, out), (root + p + a_compute, out + g), (root + a_reduce, out + g + rs)]
        if later:
            windows.append((root + p + a, out + g + rs))
    else:
        hp, hg, hrs = bytes_of(last.params, pbits), bytes_of(last.grads, pbits), bytes_of(last.reduce, rbits)
        windows = [(hp + a, hg), (a, hg + hrs), (p + a, g + hrs), (a, g + rs)]
        if later:
            windows.append((p + a, g + rs))
    return max(windows, key=sum)


class Gathers(NamedTuple):
    """FSDP's gathered parameters as the allocator's replay (timeline.py) allocates them on the all-gather stream,
    in bytes: the unit kept through backward (the blocks wrap's root from forward's start, torchtitan's
    [norm, lm_head] from the loss), one block's all-gather output, the units gathered at once (the running block
    and the next one: FSDP2's implicit forward prefetch and its backward prefetch, FSDP1's limit_all_gathers
    rate limiter that lets two run ahead and its BACKWARD_PRE), and one block's unsharded gradient with its
    reduce-scatter input (on the reduce-scatter stream)."""
    kept: int = 0
    kept_from_start: bool = True
    unit: int = 0
    forward_window: int = 1
    backward_window: int = 1
    unit_grad: int = 0


def fsdp1_flattens(scenario, workload, shape, stage: int) -> bool:
    """Whether FSDP1 flattens and shards the rank's units at `stage`: FULL_SHARD (stage 3) under the fsdp row."""
    return stage == 3 and workload.fsdp_version == 1 and framework(scenario, workload, shape) == "fsdp"


def fsdp_gathers(scenario, workload, shape, stage: int) -> Gathers:
    """The rank's Gathers at `stage` under FSDP1 (fsdp_forward, fsdp_backward: the same units): each unit's padded
    unsharded flat parameter is one allocation on the unshard stream (torch/distributed/fsdp/_flat_param.py
    _alloc_padded_unsharded_flat_param, run under _runtime_utils.py _unshard's unshard stream). Gathers() where
    nothing is gathered that way: below stage 3, another framework, nothing sharded, and FSDP2, whose all-gather
    output (copy-in stream) and per-tensor copy-out (compute stream) the replay does not split yet: it keeps the
    largest module as its unit (timeline.plan_of)."""
    units = shape.fsdp
    if units is None or not fsdp1_flattens(scenario, workload, shape, stage):
        return Gathers()
    pbits = shape.compute_bits
    rbits = reduce_bits(workload, pbits)
    wrap = workload.fsdp_wrap
    two = 2 if units.blocks > 1 else 1
    u = units.block
    return Gathers(fsdp_forward(units, wrap, pbits), wrap == "blocks" or units.tied, bytes_of(u.params, pbits),
                   two, two if "compute" in PREFETCHED_IN[workload.fsdp_backward_prefetch] else 1,
                   bytes_of(u.grads, pbits) + bytes_of(u.reduce, rbits))


REUSE_DISTANCE = 1_000_000_000      # DeepSpeed's stage3_max_reuse_distance default (elements); not a plan field


def zero3_live_params(params: int, largest_module: int, max_live: int, prefetch: int,
                      reuse: int = REUSE_DISTANCE) -> int:
    """ZeRO-3's gathered parameters at once: the running module plus what stays resident beside it. The prefetcher's
    scan marks every queued use it passes as fetched (partitioned_param_coordinator.py fetch_sub_module), so nothing
    it passed is released before that use, and with any prefetch it runs ahead until max_live parameters are
    resident. Without prefetch, parameters reused within stage3_max_reuse_distance elements are kept (__params_to_
    release), at most that many: its default is counted, on the safe side. Measured on DeepSpeed 0.19.8 (tests/
    measure/deepspeed_live.py): the resident elements reach max_live and stay within one module of it."""
    return min(params, largest_module + (max_live if prefetch else reuse))


def buffer_items(name: str, s: int, scenario, workload, shape, ds: dict) -> tuple[list, list, list]:
    """(forward, backward, optimizer step) components of one stage under the framework `name`. `ds` holds the
    DeepSpeed terms worked out once per rank (peak._phase_items)."""
    if name == "megatron" and s == 3:
        name = "fsdp"                                           # Megatron's FSDP gathers unit by unit too
    if name in ("none", "megatron"):
        return [], [], []
    if name == "fsdp":
        if shape.fsdp is None:
            return [], [], []
        pbits = shape.compute_bits
        rbits = reduce_bits(workload, pbits)
        wrap = workload.fsdp_wrap
        gathered, grads = fsdp_backward(shape.fsdp, wrap, pbits, rbits, held=workload.fsdp_version == 2,
                                        prefetch=workload.fsdp_backward_prefetch)
        if s < 3:          # the ledger holds whole parameters: only the unit's gradients and reduce-scatter
            u = shape.fsdp.block
            return [], [("gradient buckets", bytes_of(u.grads, pbits) + bytes_of(u.reduce, rbits))], []
        return ([("gathered parameters", fsdp_forward(shape.fsdp, wrap, pbits))],
                [("gathered parameters", gathered), ("gradient buckets", grads)], [])
    forward, backward, optimizer = [], [], []
    if s == 3:     # stage3.py allocates one bucket per communication dtype at init and keeps it for the run
        forward.extend([("gathered parameters", ds["gathered"]), ("gradient buckets", ds["reduce_bucket"])])
        backward.append(("gathered parameters", ds["gathered"] + ds["layer_grad"]))
        backward.append(("gradient buckets", ds["reduce_bucket"]))
        optimizer.extend([("persistent parameters", ds["persistent"]), ("gradient buckets", ds["reduce_bucket"])])
        return forward, backward, optimizer
    if s == 0:     # the engine's buffered_allreduce_fallback flattens at most the gradients into one bucket
        backward.append(("gradient buckets", min(ds["reduce_bucket"], ds["trained_grads"])))
        return forward, backward, optimizer
    # stages 1-2 (stage_1_and_2.py setup_buckets): allocated at backward's first gradient, a second with
    # overlap_comm, freed at backward's end
    backward.append(("gradient buckets", (2 if workload.overlap(s) else 1) * ds["reduce_bucket"]))
    optimizer.append(("all-gather bucket", ds["allgather_bucket"]))
    return forward, backward, optimizer
