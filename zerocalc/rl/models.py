"""Each model of an RL plan seen through today's per-rank report (parallel/ranks.py layout_report), called once per
model: its training step's peak is the report's own StagePeak at the model's stage, byte for byte; what it keeps on
the GPU between its phases and its forward-only (no-grad) scoring pass are read from the same report's rows.

Rules, each applied by one function below:
- between phases a model keeps its parameters and optimizer state where its offload flags say; gradients are gone
  (torch.optim.Optimizer.zero_grad(set_to_none=True), the default since PyTorch 2.0, and FSDP2 frees the
  unsharded ones after the reduce-scatter);
- a scoring pass (log-probabilities, values, rewards) runs under torch.no_grad: autograd saves nothing, so the
  report's saved activations give way to whichever is larger of one block's tensors (alive one block at a time)
  and the loss end, where the blocks are done: the logits, their fp32 upcast and the fp32 log-softmax (the
  report's forward "logits and loss" plus the log-softmax it counts as saved). ZeRO-3 / FSDP's gathered
  parameters, the library workspaces and the allocator's reserve stay as the report's forward phase has them
  (verl dp_actor.py compute_log_prob, TRL _get_per_token_logps). Measured on the CPU with transformers' Llama
  (tests/measure/nograd_scoring.py): the loss end exactly, a block within 10 % above;
- a reference that shares the policy's LoRA base holds nothing of its own (verl ref_in_actor, TRL's
  disable_adapter context): its pass reuses the policy's weights;
- a framework's own log-probability path replaces that loss end (RLModel.scoring_end, rl/logprobs.py), and a model
  whose parameters stream from host memory (RLModel.streams_params: verl's forward-only FSDP1 CPUOffload) holds
  only the units being gathered;
- each pass has its own micro-batch (rl/batching.py): the scoring pass runs today's report for its own workload.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, NamedTuple, Optional

from ..model.inventory import tensors
from ..parallel.ranks import LayoutReport, layout_report
from ..step.allocator import reserve_bytes
from ..step.context import context_bytes
from ..step.peak import StagePeak
from ..step.workload import Workload
from ..tables import DTYPE_BITS, bytes_of
from .batching import micro_batch_shape
from .logprobs import scoring_end_bytes, scoring_formula
from .plan import ROLE_NAMES, RLModel

FORWARD_KEEPS = frozenset({"library workspaces", "logits and loss", "gathered parameters", "dequantized 4-bit weight",
                           "float8 casts (one linear)", "measured beyond the estimate"})
LOSS, LOG_SOFTMAX = "logits and loss", "loss log-softmax (fp32)"


class ModelView(NamedTuple):
    role: str
    model: RLModel
    report: LayoutReport
    trains: bool
    gpu_by_category: Dict[str, int]      # the model states on the GPU at its stage, by category
    host_bytes: int                      # its states moved to host memory between phases (offload flags)
    scoring_report: Optional[LayoutReport] = None    # its forward-only pass's own report (None: `report`)

    @property
    def name(self) -> str:
        return ROLE_NAMES[self.role]

    @property
    def peak(self) -> StagePeak:
        """Today's peak of this model's step at its stage: exactly what `python -m zerocalc` reports."""
        return self.report.peaks[self.model.stage]

    @property
    def context_bytes(self) -> int:
        return context_bytes(self.report.workload)

    @property
    def scored(self) -> LayoutReport:
        return self.scoring_report if self.scoring_report is not None else self.report

    def idle(self, loaded: bool = False) -> Dict[str, int]:
        """On the GPU between its phases (or, `loaded`, with its parameters brought back for a pass or a sync)."""
        if self.model.shares_policy:
            return {}
        m, out = self.model, {}
        if (loaded and not m.streams_params) or not (m.param_offload or m.streams_params):
            out[f"{self.name} parameters"] = self.gpu_by_category.get("parameters", 0)
        if self.trains and not m.optimizer_offload:
            out[f"{self.name} optimizer state"] = self.gpu_by_category.get("optimizer", 0)
        return {k: v for k, v in out.items() if v}

    def scoring(self) -> Dict[str, int]:
        """A forward-only pass over one micro-batch: its states loaded, the report's forward transients, one
        block's activations instead of the saved stack, and the allocator's reserve over these tensors."""
        report = self.scored
        forward = report.peaks[self.model.stage].phases["forward"]
        view = report.ranks[report.worst[self.model.stage]]
        act = view.shape.act
        parts = dict(self.idle(loaded=True))
        parts.update({f"{self.name} {k}": v for k, v in forward.items() if k in FORWARD_KEEPS - {LOSS} and v})
        # one block's whole forward (recompute_working: what full recompute rebuilds of one block; without
        # recompute per_layer holds it already), or the loss end once the blocks are done
        block = max(act.per_layer_total, act.per_moe_layer_total, act.recompute_working)
        loss_end = self.loss_end_bytes()
        if loss_end >= block:
            parts[f"{self.name} logits and log-probs (no grad)"] = loss_end
        else:
            parts[f"{self.name} activations (one block, no grad)"] = block
        w = report.workload
        parts[f"{self.name} allocator reserve"] = reserve_bytes(sum(parts.values()), w.fragmentation_percent)
        return {k: v for k, v in parts.items() if v}

    def _logits(self):
        """(tokens, vocabulary columns, logit bits) of its scoring pass's last stage."""
        report = self.scored
        view = report.ranks[report.worst[self.model.stage]]
        w = report.workload
        return view.shape.logits_elements // w.vocab_columns, w.vocab_columns, view.shape.act_bits

    def loss_end_bytes(self) -> int:
        """The scoring pass's loss end: its row (rl/logprobs.py), or the training loss's forward and its saved
        log-softmax (transformers' loss, as measured by tests/measure/nograd_scoring.py)."""
        if self.model.scoring_end is not None:
            return scoring_end_bytes(self.model.scoring_end, *self._logits())
        report = self.scored
        act = report.ranks[report.worst[self.model.stage]].shape.act
        return report.peaks[self.model.stage].phases["forward"].get(LOSS, 0) + act.head.get(LOG_SOFTMAX, 0)

    def loss_end_formula(self) -> str:
        if self.model.scoring_end is not None:
            return scoring_formula(self.model.scoring_end, *self._logits())
        return f"{self.loss_end_bytes():,} = the training loss's forward (logits and loss) + its saved log-softmax"

    def update(self) -> Dict[str, int]:
        """The training step's live set at its peak phase, as today's report names it (context included)."""
        p = self.peak
        return {f"{self.name} {k}": v for k, v in p.phases[p.peak_phase].items() if v}

    def largest_tensor_bytes(self, dtype: str) -> int:
        """The largest single parameter tensor in `dtype`: what a per-tensor weight sync gathers at once."""
        a = self.report.workload.arch
        return bytes_of(max(t.elements for t in tensors(a) if not t.tied), DTYPE_BITS[dtype])

    def largest_module_bytes(self, dtype: str) -> int:
        view = self.report.ranks[self.report.worst[self.model.stage]]
        return bytes_of(view.shape.largest_layer_params, DTYPE_BITS[dtype])


def pass_workload(plan, model: RLModel, scoring: bool, end: str = "max") -> Workload:
    """The workload of one pass of `model` at one end of the band: its update's is `model.workload` at the max end
    (what build_plan derived), else derived from its batching; its scoring pass's from scoring_batching."""
    batching = model.scoring_batching if scoring and model.scoring_batching is not None else model.batching
    if batching is None or (end == "max" and batching is model.batching):
        return model.workload
    per_gpu = -(-plan.prompts_per_step * plan.group_size // model.scenario.workers) if plan.algo.rollout \
        else 10**9
    micro_batch, seq_len = micro_batch_shape(batching, plan.length(end), plan.longest, per_gpu)
    return replace(model.workload, micro_batch=micro_batch, seq_len=seq_len)


def refit(plan):
    """The plan with each batched model's workload re-derived at the max end (after its lengths or workers
    changed: the solvers), so that `workload` stays what its batching gives."""
    changes = {}
    for role, model in plan.models():
        if model.batching is not None:
            shaped = replace(model, batching=None)
            workload = pass_workload(plan, replace(shaped, scoring_batching=model.batching), True, "max")
            changes[role] = replace(model, workload=workload)
    return replace(plan, **changes) if changes else plan


def model_view(role: str, model: RLModel, trains: bool, plan=None, end: str = "max") -> ModelView:
    """The model's views at one end of the band (`plan` None: its workload as given, for both passes)."""
    update = model.workload if plan is None else pass_workload(plan, model, False, end)
    scoring = update if plan is None else pass_workload(plan, model, True, end)
    report = layout_report(model.scenario, update)
    view = report.ranks[report.worst[model.stage]]
    result = view.stages[model.stage]
    by_category: Dict[str, int] = {}
    host = 0
    for row, nbytes, where in zip(view.rows, result.per_worker_by_entry, result.entry_location):
        category = row.entry.category
        if category == "gradients" or (not trains and category != "parameters"):
            continue
        if where == "gpu":
            by_category[category] = by_category.get(category, 0) + nbytes
    if (model.param_offload or model.streams_params) and not model.shares_policy:
        host += by_category.get("parameters", 0)
    if model.optimizer_offload and trains:
        host += by_category.get("optimizer", 0)
    scored = None if scoring == update else layout_report(model.scenario, scoring)
    return ModelView(role, model, report, trains, by_category, host, scored)
