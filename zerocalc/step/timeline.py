"""A step's allocation sequence, built from a stage's peak parts (step/peak.py) and the rank's step shape, for the
caching allocator's model (caching_allocator.py) to replay.

The order is the one a training step allocates in, each named part of the report as the tensors it is made of
(rounding and pooling act per tensor, not on a lump):
1. persistent: the model states of the forward phase, one tensor per parameter tensor and state copy (parameter,
   gradient, two optimizer moments: a holding's share of the part split in four), the library workspaces (one per
   cuBLAS handle: forward and backward), what calibration measured beyond the estimate;
2. forward, block by block: the block's saved activations, one tensor per term of ActivationReport.per_layer (or
   its checkpointed / MoE terms; a term of k hidden states is k tensors), QLoRA's 4-bit weights each dequantized
   around its share of them, a transient the size of its largest term, and under ZeRO-3 the block's gathered
   unit on the all-gather stream, freed once the prefetch window (the "gathered parameters" part) moves on;
   DeepSpeed's window stays resident across the loss and through backward (Pieces.resident: its prefetcher keeps
   max_live parameters gathered, buffers.zero3_live_params), FSDP's units are resharded after forward;
3. the loss: the forward "logits and loss" part (the logits and their upcast) around the head's saved terms, freed
   as forward returns; at backward's start its gradient transients (the backward part), freed with the saved
   terms when the head's backward is done;
4. backward, block by block from the last: the rebuilt block under recompute (its weights dequantized again
   under QLoRA), a gradient transient, each dequantized weight once more for its input's gradient, the block's
   share of any gradients that grow during backward (grad_lifetime.py), under ZeRO-3 the unsharded gradient on the
   reduce-scatter stream, freed a block later; then the block's saved activations are freed. The gradient buckets
   are allocated once at backward's start;
5. the optimizer step: its parts beyond the states (fp32 gradient copy, foreach or shaped-optimizer
   temporaries), one tensor per parameter tensor as foreach allocates them, then freed.
A step is replayed twice (the second step meets the first one's cached blocks, as max_memory_reserved of a run
does; a third reads as the second) for `blocks` blocks; blocks_reserve() replays every block of the rank up to WHOLE
(72) and extrapolates beyond from 24 and 48 blocks.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Dict, List, NamedTuple, Tuple

from .buffers import Gathers
from .caching_allocator import FREE, MALLOC, Config, Result, simulate
from .caching_fast import State, eligible
from .losses import CACHED_MOMENT, GRAPH, HELD, PREVIOUS

COMPUTE, ALL_GATHER, REDUCE_SCATTER = 0, "all-gather", "reduce-scatter"
STATE_COPIES = 4              # parameter, gradient and two moments: a holding's share of the states, split in four
REPLAYED = (24, 48)           # beyond WHOLE blocks, the reserve is extrapolated from these two block counts
WHOLE = 72                    # up to this many blocks are replayed whole (72 = 24 + 48: never more blocks replayed)
PER_STEP_FIXED = ("model states", "library workspaces", "measured beyond the estimate", "activations",
                  "logits and loss", "gathered parameters", "gradient buckets", "recompute (one block)",
                  "CUDA context", "NCCL buffers", "allocator reserve", HELD, GRAPH, PREVIOUS)


class Plan(NamedTuple):
    """What the timeline needs from one stage's peak and the rank's shape (all bytes)."""
    layer_states: Tuple[int, ...]       # one block's parameter tensors' shares of the forward model states
    other_states: Tuple[int, ...]       # the tensors outside the blocks (embedding, head, final norm)
    grow_states: Tuple[int, ...]        # one block's gradients allocated during backward (0 when none grow)
    saved: Tuple[int, ...]              # one block's saved activation tensors
    head: Tuple[int, ...]               # the loss's saved tensors
    head_backward: Tuple[int, ...]      # the loss's backward transients, one per tensor
    workspaces: int
    extra: int
    unit: int                     # ZeRO-3: one block's gathered parameters (0 otherwise)
    window: int                   # gathered units alive at once
    unit_grad: int                # ZeRO-3: one block's unsharded gradient on the reduce-scatter stream
    buckets: int
    rebuilt: Tuple[int, ...]            # recompute: one block rebuilt in backward
    step_temps: Tuple[int, ...]         # the optimizer step's temporaries, per parameter tensor of one block
    layers: int
    in_flight: int = 0            # activations beyond one micro-batch's blocks and head, alive through the step
    dequantized: Tuple[int, ...] = ()   # QLoRA: each 4-bit weight of a block dequantized while its linear runs
    outside_temps: Tuple[int, ...] = ()  # the optimizer step's temporaries of the tensors outside the blocks
    wrap_block: Tuple[int, ...] = ()    # FSDP1's wrapping: one block's tensors moved to the GPU (fsdp1_wrap.py)
    wrap_root: Tuple[int, ...] = ()     # and the root's, flattened last
    head_forward: Tuple[int, ...] = ()  # the loss's forward transients ("logits and loss"), gone by backward
    kept: int = 0                 # FSDP: the unit kept gathered through backward (buffers.Gathers)
    kept_from_start: bool = True  # gathered from forward's start (the root), else from the loss
    backward_window: int = 1      # gathered units alive at once in backward
    units_stay: bool = False      # DeepSpeed ZeRO-3: forward's resident units carried into backward (Pieces.resident)


class Pieces(NamedTuple):
    """The tensors a replay takes beyond the peak's named parts, where a part is several tensors: FSDP1's
    wrapping (fsdp1_wrap.wrap_tensors), the loss's transients (losses.loss_tensors) and FSDP1's gathered units
    (buffers.fsdp_gathers); replay_pieces.pieces_of builds them. Empty: each part one lump."""
    wrap_block: Tuple[int, ...] = ()
    wrap_root: Tuple[int, ...] = ()
    loss_forward: Tuple[int, ...] = ()
    loss_backward: Tuple[int, ...] = ()
    gathers: Gathers = Gathers()
    resident: bool = False        # DeepSpeed ZeRO-3: the gathered window stays resident across the loss and backward


def _as_tensors(part: int, tensors: Tuple[int, ...]) -> Tuple[int, ...]:
    """A part as its tensors where they add up to it (a part kept or replaced elsewhere: one lump)."""
    return tensors if tensors and sum(tensors) == part else ((part,) if part > 0 else ())


def _tensors(term: int, hidden: int) -> List[int]:
    """A saved term as the tensors it is made of: a whole number k (2-8) of hidden-state tensors, give or take an
    eighth of one (a norm's fp32 copy and its statistics, q, k and v), is k of them and the rest; else one
    tensor. Rounding and pooling are per tensor (a 0.5 MiB hidden state is a small-pool block)."""
    k = round(term / hidden) if hidden else 0
    if 2 <= k <= 8 and abs(term - k * hidden) * 8 < hidden:
        rest = term - k * hidden
        return [hidden] * k + ([rest] if rest > 0 else []) if rest >= 0 else [hidden] * (k - 1) + [hidden + rest]
    return [term]


def _split(total: int, weights: List[int]) -> Tuple[int, ...]:
    """total bytes split in proportion to weights, the remainder on the last (exact sum)."""
    whole = sum(weights)
    if total <= 0 or whole <= 0:
        return ()
    out = [total * w // whole for w in weights]
    out[-1] += total - sum(out)
    return tuple(x for x in out if x > 0)


def plan_of(peak, shape, cycle_unit: int = 0, pieces: Pieces = Pieces()) -> Plan:
    """The timeline's inputs from a StagePeak (its phases' named parts) and the rank's StepShape; `pieces`: the
    parts that are several tensors (replay_pieces.pieces_of)."""
    fwd, bwd, opt = (peak.phases[p] for p in ("forward", "backward", "optimizer_step"))
    act = shape.act
    layers = max(1, act.layers + act.moe_layers)
    holdings = [h for g in shape.groups for h in g.holdings]
    in_layer = [h.local_elements for h in holdings if h.tensor.place == "layer"]
    outside = [h.local_elements * h.instances for h in holdings if h.tensor.place != "layer"]
    per_layer_elems, outside_elems = sum(in_layer), sum(outside)
    states = fwd.get("model states", 0)
    whole = per_layer_elems * layers + outside_elems
    layer_share = states * per_layer_elems * layers // whole // layers if whole else 0
    grown = max(0, max(bwd.get("model states", 0), opt.get("model states", 0)) - states)
    copies = [w for w in in_layer for _ in range(STATE_COPIES)]
    block = act.per_layer if act.layers else act.per_moe_layer
    terms = act.checkpointed if act.checkpointed_layers else block
    hidden = terms.get("attention input") or terms.get("mlp input") or 0
    saved = [piece for v in terms.values() if v > 0 for piece in _tensors(v, hidden)]
    # the block rebuilt under recompute: the tensors an un-checkpointed block saves, not its checkpoint's input
    rebuilt_terms = act.rebuilt_terms or block
    width = rebuilt_terms.get("attention input") or rebuilt_terms.get("mlp input") or hidden
    rebuilt_pieces = [piece for v in rebuilt_terms.values() if v > 0 for piece in _tensors(v, width)] or saved or [1]
    head = [piece for v in act.head.values() if v > 0 for piece in _tensors(v, hidden)]
    # what the activations part holds beyond one micro-batch's blocks and head (pipeline micro-batches in flight,
    # embeddings, rotary tables): one lump alive through the step; a part below them scales the blocks down
    beyond = fwd.get("activations", 0) - sum(saved) * layers - sum(head)
    if beyond < 0:
        scale = fwd.get("activations", 0) / max(1, sum(saved) * layers + sum(head))
        saved, head, beyond = [int(x * scale) for x in saved], [int(x * scale) for x in head], 0
    gathered = fwd.get("gathered parameters", 0)
    # ZeRO-3's unit: the largest block gathered in the compute dtype; its unsharded gradient is the rest of the
    # cycle unit (allocator.cycle_unit_bytes) for the trained share of the parameters (LoRA: the adapters only)
    unit = min(gathered, -(-shape.largest_layer_params * shape.compute_bits // 8)) if cycle_unit else 0
    trained = sum(g.params for g in shape.groups if not g.name.endswith("frozen"))
    unit_grad = (cycle_unit - unit) * trained // max(1, shape.params) if unit else 0
    # gathered units alive at once; DeepSpeed's resident window rounded up, so the replay holds no less than the sum
    window = max(1, -(-gathered // unit) if pieces.resident else gathered // unit) if unit else 0
    fsdp = pieces.gathers
    if fsdp.unit and cycle_unit:      # FSDP: its own units (buffers.Gathers), not the largest module
        unit, window, unit_grad = fsdp.unit, fsdp.forward_window, fsdp.unit_grad
    step_parts = sum(v for k, v in opt.items() if k not in PER_STEP_FIXED and k not in ("all-gather bucket",
                                                                                        "persistent parameters"))
    # the step's temporaries, one per parameter tensor as foreach allocates them: a block's share per block (so a
    # replay of fewer blocks than the rank holds allocates that many blocks' worth, as it does their states)
    temps_layer = step_parts * per_layer_elems * layers // whole // layers if whole else 0
    # QLoRA: a block's 4-bit weights, each dequantized to the compute dtype around its matmul (the part is the
    # largest of them: step/peak.py's "dequantized 4-bit weight")
    largest_dq = fwd.get("dequantized 4-bit weight", 0)
    dequantized = tuple(-(-h.local_elements * shape.compute_bits // 8) for h in holdings
                        if largest_dq and h.tensor.place == "layer" and len(h.shape) == 2
                        and h.local_elements * shape.compute_bits // 8 <= largest_dq)
    rebuilt_bytes = bwd.get("recompute (one block)", 0) + bwd.get(CACHED_MOMENT, 0)   # peak._split_moments
    return Plan(_split(layer_share, copies), _split(states - layer_share * layers, outside * STATE_COPIES),
                _split(grown // layers, in_layer), tuple(saved),
                tuple(head),
                _as_tensors(bwd.get("logits and loss", 0), pieces.loss_backward), fwd.get("library workspaces", 0),
                # a loop's held output and graph: alive through the step, replayed as a lump like the measured extra
                fwd.get("measured beyond the estimate", 0) + opt.get(HELD, 0) + opt.get(GRAPH, 0), unit,
                window, unit_grad, bwd.get("gradient buckets", 0),
                _split(rebuilt_bytes, rebuilt_pieces), _split(temps_layer, in_layer), layers, beyond, dequantized,
                _split(step_parts - temps_layer * layers, outside), pieces.wrap_block, pieces.wrap_root,
                _as_tensors(fwd.get("logits and loss", 0), pieces.loss_forward),
                fsdp.kept if fsdp.unit and cycle_unit else 0, fsdp.kept_from_start,
                fsdp.backward_window if fsdp.unit and cycle_unit else window if pieces.resident else 1,
                bool(unit) and pieces.resident)


def events(plan: Plan, blocks: int, steps: int = 2) -> list:
    """The allocation events of `steps` training steps over `blocks` blocks (tensor ids are unique per step)."""
    return _persistent(plan.layer_states, blocks, plan.other_states, plan.workspaces, plan.extra,
                       plan.wrap_block, plan.wrap_root) + step_events(plan, blocks, steps)


def _persistent(layer_states, blocks, other_states, workspaces, extra, wrap_block=(), wrap_root=()) -> list:
    """The persistent tensors, allocated once into the empty allocator: the model states, the two library
    workspaces and what calibration measured beyond the estimate (ids from 0). Under FSDP1's wrapping
    (fsdp1_wrap.py) each unit's states are allocated where FSDP1 clones its shard, the root's last: the unit's
    tensors, their flat concatenation, the states, then the flat tensor and the tensors freed (ids from 1 << 39)."""
    out, ids, temps = [], iter(range(1 << 39)), iter(range(1 << 39, 1 << 40))

    def states(sizes):
        out.extend((MALLOC, next(ids), size, COMPUTE) for size in sizes if size > 0)

    # (the unit's wrap tensors, the states allocated at its shard); no wrap: every state at once
    units = [(wrap_block, layer_states)] * blocks + [(wrap_root, other_states)] if wrap_block or wrap_root \
        else [((), layer_states * blocks + other_states)]
    for unit, kept in units:
        tensors = [(MALLOC, next(temps), size, COMPUTE) for size in unit]
        flat = [(MALLOC, next(temps), sum(unit), COMPUTE)] if unit else []
        out.extend(tensors + flat)
        states(kept)
        out.extend([(FREE, e[1]) for e in flat + tensors])
    states((workspaces // 2, workspaces // 2, extra))
    return out


def step_events(plan: Plan, blocks: int, steps: int = 2) -> list:
    """The events of the steps alone (ids from 1 << 40, apart from the persistent tensors'). A step frees every
    tensor it allocates, so each step is the same list of events, ids included (built once)."""
    out: list = []
    ids = iter(range(1 << 40, 1 << 62))

    def malloc(size, stream=COMPUTE):
        if size <= 0:
            return None
        i = next(ids)
        out.append((MALLOC, i, size, stream))
        return i

    def free(*tids):
        out.extend((FREE, t) for t in tids if t is not None)

    biggest = max(plan.saved, default=0)
    if steps > 0:                                                 # one step, repeated below
        saved, units = [], []
        in_flight = malloc(plan.in_flight)
        kept = malloc(plan.kept, ALL_GATHER) if plan.kept_from_start else None
        for _b in range(blocks):                                  # forward
            if plan.unit:
                units.append(malloc(plan.unit, ALL_GATHER))
                if len(units) > plan.window:
                    free(units.pop(0))
            saved.append(_run_linears(plan.dequantized, plan.saved, malloc, free))
            free(malloc(biggest))
        if not plan.units_stay:      # FSDP reshards after forward; DeepSpeed's prefetcher keeps them resident
            free(*units)
            units = []
        kept = kept or malloc(plan.kept, ALL_GATHER)
        # the loss: its forward transients (the logits and their upcast) around the saved log-softmax, freed as
        # forward returns, before backward's gradient transients
        logits = [malloc(s) for s in plan.head_forward]
        head = [malloc(s) for s in plan.head]
        free(*logits)
        head_grad = [malloc(s) for s in plan.head_backward]       # backward
        buckets = malloc(plan.buckets)
        free(*head_grad, *head)
        grads, pending = [], []
        for _b in range(blocks):
            if plan.unit:
                units.append(malloc(plan.unit, ALL_GATHER))
                if len(units) > plan.backward_window:
                    free(units.pop(0))
            rebuilt = _run_linears(plan.dequantized if plan.rebuilt else (), plan.rebuilt, malloc, free)
            transient = malloc(biggest)
            for size in reversed(plan.dequantized):               # each linear's backward dequantizes again
                free(malloc(size))
            grads += [malloc(g) for g in plan.grow_states]
            if plan.unit_grad:
                pending.append(malloc(plan.unit_grad, REDUCE_SCATTER))
                if len(pending) > 1:
                    free(pending.pop(0))
            free(transient, *rebuilt, *saved.pop())
        free(*units, kept, *pending, buckets, in_flight)
        temps = [malloc(t) for t in plan.step_temps * blocks + plan.outside_temps]     # optimizer step
        free(*temps, *grads)
    return out * steps


def _run_linears(dequantized, outputs, malloc, free) -> list:
    """A block's forward: its outputs allocated in turn, each dequantized weight (QLoRA) alive around its share
    of them; returns the outputs' ids."""
    if not dequantized:
        return [malloc(s) for s in outputs]
    out, per = [], -(-len(outputs) // len(dequantized))
    for i, size in enumerate(dequantized):
        weight = malloc(size)
        out += [malloc(s) for s in outputs[i * per:(i + 1) * per]]
        free(weight)
    return out


def replay(plan: Plan, blocks: int, config: Config = Config()) -> Result:
    """simulate(events(plan, blocks), config); on the fast path the persistent tensors' state is replayed once per
    (their sizes, config) and each replay goes on from a copy of it (solve() varies the step, not the states)."""
    if eligible(config):
        state = _persistent_state(plan.layer_states, blocks, plan.other_states, plan.workspaces, plan.extra,
                                  plan.wrap_block, plan.wrap_root, config)
        return state.copy().run(step_events(plan, blocks)).result()
    return simulate(events(plan, blocks), config)


@lru_cache(maxsize=64)
def _persistent_state(layer_states, blocks, other_states, workspaces, extra, wrap_block, wrap_root, config):
    return State(config).run(_persistent(layer_states, blocks, other_states, workspaces, extra, wrap_block,
                                         wrap_root))


@lru_cache(maxsize=512)
def blocks_reserve(plan: Plan, config: Config = Config()) -> Dict[str, int]:
    """The simulated reserve (peak reserved - peak allocated) at the rank's block count: replayed whole, or above
    WHOLE blocks extrapolated linearly from REPLAYED (the reserve does not grow evenly with the blocks: on
    Llama-2-7B it moves in steps, 0.26 GiB at 2 blocks, 1.12 at 6, 1.38 at 16, 2.76 at 32, so few blocks do not
    predict many). Cached: a plan (tuples of ints) replays once; the dict returned is shared, do not change it."""
    if plan.layers <= WHOLE:
        r = replay(plan, plan.layers, config)
        return {"reserve": max(0, r.peak_reserved - r.peak_allocated), "allocated": r.peak_allocated}
    (a, b) = REPLAYED
    ra, rb = replay(plan, a, config), replay(plan, b, config)
    res_a, res_b = ra.peak_reserved - ra.peak_allocated, rb.peak_reserved - rb.peak_allocated
    per_block = (res_b - res_a) // (b - a)
    reserve = res_b + per_block * (plan.layers - b)
    alloc = rb.peak_allocated + (rb.peak_allocated - ra.peak_allocated) // (b - a) * (plan.layers - b)
    return {"reserve": max(0, reserve), "allocated": alloc}
