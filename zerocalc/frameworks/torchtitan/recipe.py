"""torchtitan's recipe settings beyond checkpointing: torch.compile of the blocks and of the loss, async tensor
parallelism, float8 linears, the optimizer's implementation."""

from __future__ import annotations

from ..common import FrameworkConfigError, one_of
from .fields import SRC


def read_compile(reader) -> None:
    """job_config.py Compile: enable (default false), components (default ["model", "loss"]): each transformer
    block compiled (parallelize.py apply_compile) and the loss (components/loss.py BaseLoss._maybe_compile)."""
    enable = reader.get("compile", "enable", False)
    if not isinstance(enable, bool):
        raise FrameworkConfigError("compile.enable", enable, "true or false")
    components = reader.get("compile", "components", ["model", "loss"])
    if not isinstance(components, list) or any(c not in ("model", "loss") for c in components):
        raise FrameworkConfigError("compile.components", components, 'a list of "model" and "loss"')
    _read_async_tp(reader, enable and "model" in components)
    if not enable:
        return
    if "model" in components:
        reader.b.set("workload", "compile", True, 'compile.enable with "model" in compile.components')
    if "loss" in components:
        reader.b.set("workload", "loss", "compiled", 'compile.enable with "loss" in compile.components')


def _read_async_tp(reader, model_compiled: bool) -> None:
    """parallelism.enable_async_tensor_parallel (distributed/tensor_parallel.py maybe_enable_async_tp, called only
    under tensor parallelism; it refuses an uncompiled model): step/async_tp.py."""
    key = "parallelism.enable_async_tensor_parallel"
    on = reader.get("parallelism", "enable_async_tensor_parallel", False)
    if not isinstance(on, bool):
        raise FrameworkConfigError(key, on, "true or false")
    if not on:
        return
    if reader.get("parallelism", "tensor_parallel_degree", 1) == 1:
        reader.b.ignore(key, "async TP runs only under tensor parallelism (parallelize.py: tp_enabled); "
                             "tensor_parallel_degree is 1")
        return
    if not model_compiled:
        raise FrameworkConfigError(key, on, "false unless compile.enable with \"model\" in compile.components "
                                            "(torchtitan: 'Async TP requires 'model' in --compile.components and "
                                            "--compile.enable')")
    reader.b.set("workload", "async_tp", True, f"{key}: Inductor's micro-pipeline TP (symmetric-memory workspace)")


FLOAT8 = ("quantize", "linear", "float8")      # job_config.py QuantizedLinear.Float8 (238fa99)


def read_float8(reader, converters) -> list:
    """model.converters "float8" (components/quantization/float8.py Float8LinearConverter): torchao Float8Linear
    with [quantize.linear.float8] recipe_name (None: tensorwise) and enable_fsdp_float8_all_gather. Returns the
    converters left unread."""
    rest = [c for c in converters if c not in ("float8", "quantize.linear.float8")]
    doc = reader.doc
    if len(rest) == len(converters):
        return rest
    recipe = doc.get(*FLOAT8, "recipe_name", default=None)
    recipe = "tensorwise" if recipe is None else recipe
    if recipe not in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
        raise FrameworkConfigError("quantize.linear.float8.recipe_name", recipe,
                                   "tensorwise, rowwise or rowwise_with_gw_hp (torchao from_recipe_name)")
    gather = doc.get(*FLOAT8, "enable_fsdp_float8_all_gather", default=False)
    if not isinstance(gather, bool):
        raise FrameworkConfigError("quantize.linear.float8.enable_fsdp_float8_all_gather", gather, "true or false")
    reader.b.set("workload", "float8", recipe, 'model.converters "float8" with quantize.linear.float8.recipe_name')
    if gather:
        reader.b.set("workload", "float8_all_gather", True, "quantize.linear.float8.enable_fsdp_float8_all_gather")
    return rest


def read_optimizer_impl(reader) -> None:
    """[optimizer] implementation: "for-loop", "foreach" or "fused" (default), which components/optimizer.py passes
    to torch's Adam / AdamW as foreach / fused: Scenario.optimizer_impl (its temporaries, tables.ADAM_STEP)."""
    impl = one_of("optimizer.implementation", reader.get("optimizer", "implementation", "fused"),
                  ("fused", "foreach", "for-loop"))
    reader.b.set("scenario", "optimizer_impl", impl,
                 "optimizer.implementation" if reader.doc.has("optimizer", "implementation") else SRC)
