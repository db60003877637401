"""GPU catalog (data): memory capacity exactly as the driver reports it, next to the marketing name.

NVIDIA: the total of nvidia-smi's "Memory-Usage" column, in MiB (2^20 bytes), as printed on those GPUs (e.g.
"0MiB / 81559MiB" on an H100 80GB HBM3). AMD: rocm-smi --showmeminfo vram, "VRAM Total Memory (B)". The marketing
"80 GB" of an H100 is neither 80 GB nor 80 GiB of usable memory: 81,559 MiB = 85.52 GB = 79.65 GiB.
"""

from __future__ import annotations

from types import MappingProxyType

MIB = 2**20

# key -> (marketing name, capacity in bytes, what the driver prints)
GPU_CATALOG = MappingProxyType({
    "A100-40GB": ("NVIDIA A100 40GB (SXM4 / PCIe)", 40_960 * MIB, "nvidia-smi: 40960MiB"),
    "A100-80GB": ("NVIDIA A100 80GB (SXM4 / PCIe)", 81_920 * MIB, "nvidia-smi: 81920MiB"),
    "H100-SXM-80GB": ("NVIDIA H100 80GB HBM3 (SXM)", 81_559 * MIB, "nvidia-smi: 81559MiB"),
    "H100-PCIe-80GB": ("NVIDIA H100 PCIe 80GB", 81_559 * MIB, "nvidia-smi: 81559MiB"),
    "H200-141GB": ("NVIDIA H200 141GB", 143_771 * MIB, "nvidia-smi: 143771MiB"),
    "B200-180GB": ("NVIDIA B200 180GB", 183_359 * MIB, "nvidia-smi: 183359MiB"),
    "L4-24GB": ("NVIDIA L4 24GB", 23_034 * MIB, "nvidia-smi: 23034MiB"),
    "V100-16GB": ("NVIDIA Tesla V100 16GB (SXM2 / PCIe)", 16_160 * MIB, "nvidia-smi: 16160MiB"),
    "V100-32GB": ("NVIDIA Tesla V100 32GB (SXM2 / PCIe)", 32_510 * MIB, "nvidia-smi: 32510MiB"),
    "RTX-4090-24GB": ("NVIDIA GeForce RTX 4090 24GB", 24_564 * MIB, "nvidia-smi: 24564MiB"),
    "MI300X-192GB": ("AMD Instinct MI300X 192GB", 206_141_652_992, "rocm-smi: 206141652992 B"),
})
DEFAULT_GPU = "H100-SXM-80GB"
