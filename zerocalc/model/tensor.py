"""One row of the parameter inventory (DESIGN.md section 7): a parameter tensor with its role, tensor-parallel split,
pipeline place and storage. model/inventory.py lists a decoder's rows, model/vision.py a vision tower's."""

from __future__ import annotations

from typing import NamedTuple, Tuple

# A vision tower's own rows (model/vision.py): its training mode (VisionTower.training) sets their trainable flags,
# and a language model's fine-tuning passes them through unchanged.
VISION_ROLES = ("vision", "projector", "vision adapter")

class ParamTensor(NamedTuple):
    """One row of the parameter inventory (DESIGN.md section 7)."""
    name: str            # as in the module tree, one layer standing for all: "q_proj.weight"
    module: str          # the nn.Module owning it: ZeRO-3 gathers module by module
    shape: Tuple[int, ...]
    role: str            # embedding | position | attention | mlp | norm | router | expert | shared expert | head |
                         # mtp (the multi-token-prediction projection)
    tp: str              # column (dim 0 split) | row (last dim split) | vocab (vocabulary rows) | replicated |
                         # expert-column / expert-row / expert (experts over ep, then column / row over etp)
    place: str           # layer (every block) | first (first pipeline stage) | last (last pipeline stage) |
                         # mtp (each multi-token-prediction module, on the last stage)
    tied: bool = False   # the output head of tied embeddings: stored once, a copy on the last stage under PP
    kind: str = "all"    # which blocks hold it: all | dense (dense-MLP blocks) | moe (mixture-of-experts blocks)
    storage: str = ""    # a fixed storage dtype ("fp32" for a router kept in fp32, "nf4" for a quantized base)
    trainable: bool = True
    first_layer: int = 0           # block tensors: the row applies to blocks first_layer <= i < stop_layer
    stop_layer: int = 1 << 30      # (fine-tuning the last k blocks splits a tensor's rows at L - k)
    heads: int = 0       # q/k projection weights: the model's query heads (Adam-mini's blocks of hidden^2 / heads)

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def expert(self) -> bool:
        return self.tp.startswith("expert")
