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
  disable_adapter context): its pass reuses the policy's weights.
"""

from __future__ import annotations

from typing import Dict, NamedTuple

from ..model.inventory import tensors
from ..parallel.ranks import LayoutReport, layout_report
from ..step.allocator import reserve_bytes
from ..step.peak import StagePeak
from ..tables import DTYPE_BITS, bytes_of
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

    @property
    def name(self) -> str:
        return ROLE_NAMES[self.role]

    @property
    def peak(self) -> StagePeak:
        """Today's peak of this model's step at its stage: exactly what `python -m zerocalc` reports."""
        return self.report.peaks[self.model.stage]

    @property
    def context_bytes(self) -> int:
        return self.report.workload.cuda_context_bytes

    def idle(self, loaded: bool = False) -> Dict[str, int]:
        """On the GPU between its phases (or, `loaded`, with its parameters brought back for a pass or a sync)."""
        if self.model.shares_policy:
            return {}
        m, out = self.model, {}
        if loaded or not m.param_offload:
            out[f"{self.name} parameters"] = self.gpu_by_category.get("parameters", 0)
        if self.trains and not m.optimizer_offload:
            out[f"{self.name} optimizer state"] = self.gpu_by_category.get("optimizer", 0)
        return {k: v for k, v in out.items() if v}

    def scoring(self) -> Dict[str, int]:
        """A forward-only pass over one micro-batch: its states loaded, the report's forward transients, one
        block's activations instead of the saved stack, and the allocator's reserve over these tensors."""
        forward = self.peak.phases["forward"]
        view = self.report.ranks[self.report.worst[self.model.stage]]
        act = view.shape.act
        parts = dict(self.idle(loaded=True))
        parts.update({f"{self.name} {k}": v for k, v in forward.items() if k in FORWARD_KEEPS - {LOSS} and v})
        # one block's whole forward (recompute_working: what full recompute rebuilds of one block; without
        # recompute per_layer holds it already), or the loss end once the blocks are done
        block = max(act.per_layer_total, act.per_moe_layer_total, act.recompute_working)
        loss_end = forward.get(LOSS, 0) + act.head.get(LOG_SOFTMAX, 0)
        if loss_end >= block:
            parts[f"{self.name} logits and log-probs (no grad)"] = loss_end
        else:
            parts[f"{self.name} activations (one block, no grad)"] = block
        w = self.report.workload
        parts[f"{self.name} allocator reserve"] = reserve_bytes(sum(parts.values()), w.fragmentation_percent)
        return {k: v for k, v in parts.items() if v}

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


def model_view(role: str, model: RLModel, trains: bool) -> ModelView:
    report = layout_report(model.scenario, model.workload)
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
    if model.param_offload and not model.shares_policy:
        host += by_category.get("parameters", 0)
    if model.optimizer_offload and trains:
        host += by_category.get("optimizer", 0)
    return ModelView(role, model, report, trains, by_category, host)
