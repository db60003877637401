"""What the checkpoint publishes beside config.json: the tensor bytes of its safetensors index and the dtype it
is stored in.
"""

from __future__ import annotations

import json
from typing import Optional

DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def index_total(data: bytes) -> Optional[int]:
    """metadata.total_size of a model.safetensors.index.json, or None when it has no usable one."""
    try:
        index = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    # UnicodeDecodeError and JSONDecodeError are ValueErrors: the caller notes them
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, float) and total.is_integer():
        total = int(total)
    if isinstance(total, bool) or not isinstance(total, int) or not 0 <= total <= 10**16:
        return None
    return total


def dtype_note(config: dict, total: Optional[int]) -> Optional[str]:
    """The checkpoint's dtype as config.json states it, and what the published size means in parameters."""
    quant = config.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method", "unknown"))[:40]
        return (f"quantized checkpoint (quantization_config.quant_method {method!r}): the published size is not "
                "parameters x one dtype width")
    key = "dtype" if "dtype" in config else "torch_dtype"
    dtype = config.get(key)
    if not isinstance(dtype, str):
        return None
    dtype = dtype[:40]
    width = DTYPE_BYTES.get(dtype)
    if width is None:
        return f"published dtype {dtype!r} (config.json {key!r}): its width is unknown here"
    note = f"published in {dtype} (config.json {key!r}, {width} bytes a parameter)"
    if total is not None:
        approx = "" if total % width == 0 else "about "
        note += (f": {total:,} bytes / {width} = {approx}{total // width:,} parameters if every tensor is stored in "
                 f"{dtype}")
    return note
