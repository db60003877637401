"""What the checkpoint publishes beside config.json: the tensor bytes of its safetensors index and the dtype it
is stored in.
"""

from __future__ import annotations

import json
import math
from typing import Optional

from ...scenario import FieldError
from ...values import count, long_integer

DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def index_total(data: bytes) -> Optional[int]:
    """metadata.total_size of a model.safetensors.index.json, or None when it has no usable one."""
    text = data.decode("utf-8")        # UnicodeDecodeError and JSONDecodeError are ValueErrors: the caller notes them
    try:
        index = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except json.JSONDecodeError:
        raise
    except ValueError:                 # an integer over Python's digit limit: said in words
        found = long_integer(text)
        raise ValueError(f"an integer of {found[1]:,} digits" if found else "unreadable JSON") from None
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, float) and math.isfinite(total) and total.is_integer() and total <= 10**16:
        total = int(total)             # safetensors writes an int; an integral float is the same size
    try:
        return count("metadata.total_size", total, 0, 10**16)
    except FieldError:
        return None


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
