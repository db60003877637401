"""torchtitan's recipe settings beyond checkpointing: torch.compile of the blocks and of the loss."""

from __future__ import annotations

from ..common import FrameworkConfigError


def read_compile(reader) -> None:
    """job_config.py Compile: enable (default false), components (default ["model", "loss"]): each transformer
    block compiled (parallelize.py apply_compile) and the loss (components/loss.py BaseLoss._maybe_compile)."""
    enable = reader.get("compile", "enable", False)
    if not isinstance(enable, bool):
        raise FrameworkConfigError("compile.enable", enable, "true or false")
    components = reader.get("compile", "components", ["model", "loss"])
    if not isinstance(components, list) or any(c not in ("model", "loss") for c in components):
        raise FrameworkConfigError("compile.components", components, 'a list of "model" and "loss"')
    if not enable:
        return
    if "model" in components:
        reader.b.set("workload", "compile", True, 'compile.enable with "model" in compile.components')
    if "loss" in components:
        reader.b.set("workload", "loss", "compiled", 'compile.enable with "loss" in compile.components')
