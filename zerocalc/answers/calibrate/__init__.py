"""Calibration: read what a real run printed, and set it against the estimate.

parse(text) recognises each format below on its own (several pasted together are merged) and returns one
Measurement in exact integer bytes. The formats, and where each is defined:

- "probe": the one line tools/zerocalc_probe.py prints ("zerocalc-probe v1 gpu=... forward.alloc=..."), per-phase
  peaks from torch.cuda.max_memory_allocated / max_memory_reserved and the driver's view from mem_get_info.
- "memory_stats": torch.cuda.memory_stats() as JSON, as its printed OrderedDict, or the nested form of
  memory_stats_as_nested_dict(); keys "allocated_bytes.all.peak", "reserved_bytes.all.peak", ... (torch/cuda/memory.py
  memory_stats; the nested keys from torch/csrc/cuda/Module.cpp THCPModule_memoryStats).
- "memory_summary": the table torch.cuda.memory_summary() prints (torch/cuda/memory.py memory_summary); its sizes
  are floored by _format_size (sz //= 1024 per unit step), so each is exact to within one unit, upwards.
- "deepspeed": DeepSpeed's see_memory_usage lines "MA 1.23 GB  Max_MA 2.34 GB  CA 3.45 GB  Max_CA 4 GB"
  (deepspeed/runtime/utils.py): the values are bytes / (1024 * 1024 * 1024), so "GB" there means GiB; MA, Max_MA and
  CA are rounded to 2 decimals, Max_CA to a whole GiB (round() without digits). Also its memory_status lines
  ("current alloc=...GB (delta=...GB max=...GB) current cache=...GB (... max=...GB)"), likewise / 1024**3.
- "torch_oom": the CUDA out-of-memory message of the caching allocator (c10/cuda/CUDACachingAllocator.cpp,
  format_size: 2 decimals of bytes / KiB / MiB / GiB), current values at the failure.
- "nvidia_smi": nvidia-smi --query-gpu=memory.used,memory.total --format=csv (header "memory.used [MiB],
  memory.total [MiB]", rows "81000 MiB, 81559 MiB"; also noheader / nounits, extra columns, several GPUs), and the
  "Memory-Usage" column of the plain nvidia-smi table ("12345MiB / 81559MiB"). nvidia-smi's MiB is 2^20 bytes.
- "plain": labelled numbers such as "max_memory_allocated: 12345" (bytes) or "Peak reserved: 66.3 GiB".
  "GB" / "MB" there mean 10^9 / 10^6 bytes (zerocalc's GB) unless parse(..., gb="binary"): many scripts print
  bytes / 1024**3 and call it GB; the Measurement's notes say which reading was used.

compare(measurement, peak, workload) then sets each measured figure against the part of the estimate that it
counts, and says which Workload assumption would absorb the difference (see compare's docstring).
"""
