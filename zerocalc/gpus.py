"""GPU catalog (data): two capacities per card, each as it was published, next to the marketing name.

- nvidia-smi's total (`memory.total`, the "NNNNNMiB" of its Memory-Usage column; AMD: rocm-smi's "VRAM Total
  Memory (B)"). It is the device's memory, not what a training job can have: the driver keeps part of it.
- What PyTorch can use: `torch.cuda.get_device_properties(i).total_memory` (CUDA's totalGlobalMem, deviceQuery's
  "Total amount of global memory") and the OOM message's "GPU 0 has a total capacity of X GiB" (cudaMemGetInfo's
  total). The caching allocator works under this ceiling, so the verdict compares the peak (the CUDA context
  included) with it. The H100 80GB shows 81,559 MiB in nvidia-smi (85.52 GB) and "total capacity of 79.11 GiB"
  (84.94 GB) in PyTorch: a plan at 85.08 GB passes the first and cannot run.

Both figures move by tens of MiB between driver versions (docs/research/gpu_capacities.md); where several were
published the lowest is used, so a verdict holds on every driver seen. A card with no published PyTorch figure
gets nvidia-smi's total less ESTIMATE_GAP, marked estimated: the published gaps run from 0.02 GiB (MI300X) to
1.08 GiB (GH200, two drivers), so 1.25 GiB is below every sourced figure.
"""

from __future__ import annotations

from decimal import Decimal
from types import MappingProxyType
from typing import NamedTuple, Optional, Tuple

MIB, GIB = 2**20, 2**30
ESTIMATE_GAP = 1280 * MIB


class GPU(NamedTuple):
    name: str             # the marketing name
    smi_bytes: int        # nvidia-smi's memory.total (rocm-smi's VRAM total)
    smi_source: str       # as printed, and where it was published
    usable_bytes: int     # what PyTorch can use: total_memory / the OOM message's "total capacity"
    usable_source: str    # as printed and where, or how it was estimated
    estimated: bool       # no published PyTorch figure: nvidia-smi's total less ESTIMATE_GAP
    compute_capability: Optional[Tuple[int, int]] = None    # CUDA's (major, minor); None on AMD

    @property
    def reported_as(self) -> str:       # the driver's figure as printed (kept for the catalogue listing)
        return self.smi_source.split(" (", 1)[0]


def _printed(text: str) -> int:
    """Bytes of a figure as printed: '81559 MiB', '79.11 GiB' (PyTorch prints two decimals: the value may be up to
    0.005 GiB higher, never counted), '42298834944 B'."""
    number, unit = text.split()
    return int(Decimal(number) * {"B": 1, "MiB": MIB, "GiB": GIB}[unit])


def _card(name, smi, smi_source, usable=None, usable_source=None) -> GPU:
    smi_bytes = _printed(smi)
    if usable is None:
        return GPU(name, smi_bytes, f"{smi} ({smi_source})", smi_bytes - ESTIMATE_GAP,
                   f"estimated: nvidia-smi's {smi} less 1.25 GiB (no published PyTorch figure)", True)
    return GPU(name, smi_bytes, f"{smi} ({smi_source})", _printed(usable), f"{usable} ({usable_source})", False)


# key -> the card. Keys are stable (links carry them). Sources: docs/research/gpu_capacities.md quotes each line;
# "owner/repo@commit path" is a file at that commit, "owner/repo#N" an issue or pull request.
_CARDS = {
    "A100-40GB": _card(
        "NVIDIA A100 40GB (SXM4 / PCIe)", "40960 MiB", "modal-labs/modal-client#2797",
        "42298834944 B", "deviceQuery on A100-SXM4-40GB, bottlerocket-os/bottlerocket#3873"),
    "A100-80GB": _card(
        "NVIDIA A100 80GB (SXM4 / PCIe)", "81920 MiB", "A100-SXM4-80GB, NVIDIA/mig-parted#31",
        "79.14 GiB", "OOM message, lianqi1008/Control-GIC#6; 79.15 GiB in vllm-project/vllm#4408"),
    "H100-SXM-80GB": _card(
        "NVIDIA H100 80GB HBM3 (SXM)", "81559 MiB", "NVIDIA/nccl#1264",
        "79.11 GiB", "OOM message on H100 80GB, vllm-project/vllm#12756"),
    "H100-PCIe-80GB": _card(
        "NVIDIA H100 PCIe 80GB", "81559 MiB", "as the SXM card, modal-labs/modal-client#2797"),
    "H100-NVL-94GB": _card(
        "NVIDIA H100 NVL 94GB", "95830 MiB", "NVIDIA/gpu-admin-tools#4",
        "99961274368 B", "fastfetch's GPU total, the 93.10 GiB OOM messages print; fastfetch-cli/fastfetch#1658"),
    "H20-96GB": _card(
        "NVIDIA H20 96GB", "97871 MiB", "NVIDIA/nvtrust#128",
        "97285 MiB", "total_memory=97285MB, alipay/PainlessInferenceAcceleration@78c9b002 flood/flood/ops/seg_attn.py"),
    "H200-141GB": _card(
        "NVIDIA H200 141GB", "143771 MiB", "thundergolfer.com/blog/nvidia-gpu-memory-capacity",
        "143156 MiB", "total_memory=143156MB (139.80 GiB), ai-bot-pro/achatbot@c2b101be "
        "deploy/modal/src/llm/vllm/vlm/skywork_r1v.py; 139.81 GiB in vllm-project/vllm#34553"),
    "GH200-96GB": _card(
        "NVIDIA GH200 480GB (96GB HBM3)", "97871 MiB", "sgawe11/rag-on-gh200@04aabc9b README.md",
        "94.50 GiB", "OOM message on a GH200 480GB, vllm-project/vllm#9630"),
    "B200-180GB": _card(
        "NVIDIA B200 180GB", "183359 MiB", "NVIDIA/TensorRT-LLM#10278",
        "178.35 GiB", "cudaGetDeviceProperties on B200, pytorch/ao#4002"),
    "B300-288GB": _card(
        "NVIDIA B300 288GB", "275040 MiB", "johnpfeiffer/source.johnpfeiffer.github.io@5624f9be "
        "content/ai/b300-deepseek-0731.md",
        "267.69 GiB", "vLLM's 'Free memory on device (267.08/267.69 GiB)', the same file"),
    "L4-24GB": _card(
        "NVIDIA L4 24GB", "23034 MiB", "GoogleCloudPlatform/pubsec-declarative-toolkit#655",
        "22.03 GiB", "OOM message on an L4, lmstudio-ai/lmstudio-bug-tracker#1638"),
    "A10G-24GB": _card(
        "NVIDIA A10G 24GB (AWS)", "23028 MiB", "NVIDIA/DCGM#232",
        "22587 MiB", "total_memory=22587MB (22.06 GiB) in TorchCodec's CUDA tutorial output; 22723MB in "
        "shylane/YoloV3@ae59d77b README.md, 22.49 GiB in AUTOMATIC1111/stable-diffusion-webui#1259 (2022)"),
    "A10-24GB": _card("NVIDIA A10 24GB", "23028 MiB", "modal-labs/modal-client#2797"),
    "T4-16GB": _card(
        "NVIDIA T4 16GB", "15360 MiB", "modal-labs/modal-client#2797",
        "14.56 GiB", "OOM message on a Colab T4 (2025), johnpfeiffer/source.johnpfeiffer.github.io@5624f9be "
        "content/ai/diffusion-google-colab.md; 14.75 GiB in hpcaitech/Open-Sora#697"),
    "L40S-48GB": _card(
        "NVIDIA L40S 48GB", "46068 MiB", "ECC on, akash-network/provider-configs#99",
        "44.39 GiB", "OOM message on a 48 GB L40S, FX-DOVE/ltx2.5@ea51009d tests/test_oom_regression.py"),
    "A40-48GB": _card(
        "NVIDIA A40 48GB", "46068 MiB", "ECC on, ubccr/ccr-examples BindCraft EXAMPLES.md",
        "45416 MiB", "total_memory=45416MB, songxf1024/CaPGNN@039446f1 main.py"),
    "RTX-A6000-48GB": _card(
        "NVIDIA RTX A6000 48GB (ECC off)", "49140 MiB", "ModelCloud/GPTQModel#2824",
        "48676 MiB", "total_memory=48676MB, pytorch/ao@2a183578 torchao/prototype/hqq/README.md"),
    "RTX-A6000-48GB-ECC": _card(
        "NVIDIA RTX A6000 48GB (ECC on)", "46068 MiB", "with ECC on, as L40S and A40 (docs/research/gpu_capacities.md)"),
    "RTX-6000-Ada-48GB": _card(
        "NVIDIA RTX 6000 Ada Generation 48GB", "46068 MiB", "ECC on, DINGYANB/MTVCrafter#21",
        "44.43 GiB", "OOM message, the same issue"),
    "V100-16GB": _card("NVIDIA Tesla V100 16GB (SXM2 / PCIe)", "16160 MiB",
                       "older drivers (16384 MiB on driver 570, 1CatAI/1Cat-vLLM#85)"),
    "V100-32GB": _card(
        "NVIDIA Tesla V100 32GB (SXM2 / PCIe)", "32510 MiB", "older drivers (32768 MiB on driver 560)",
        "31.74 GiB", "OOM message on a V100 32GB, liucongg/ChatGLM-Finetuning#73"),
    "RTX-3090-24GB": _card(
        "NVIDIA GeForce RTX 3090 24GB", "24576 MiB", "noonghunna/club-3090#1127",
        "24259 MiB", "total_memory=24259MB, songxf1024/CaPGNN@039446f1 main.py"),
    "RTX-4090-24GB": _card(
        "NVIDIA GeForce RTX 4090 24GB", "24564 MiB", "vllm-project/vllm#7768",
        "23.64 GiB", "OOM message on a 4090, 3DTopia/Phidias-Diffusion#8; 23.68 GiB in zai-org/CogVideo#36"),
    "RTX-5090-32GB": _card(
        "NVIDIA GeForce RTX 5090 32GB", "32607 MiB", "noonghunna/club-3090#1075",
        "33677180928 B", "deviceQuery, aikitoria/open-gpu-kernel-modules#1"),
    "MI300X-192GB": _card(
        "AMD Instinct MI300X 192GB", "206141652992 B", "rocm-smi, ROCm/legacy-rocm-build#4750",
        "191.98 GiB", "HIP OOM message on MI300X, vllm-project/vllm#7951"),
    "MI325X-256GB": _card(
        "AMD Instinct MI325X 256GB", "255.98 GiB", "as PyTorch's: rocm-smi and PyTorch agree on MI300X (256 GiB less "
        "16 MiB here)", "255.98 GiB", "HIP OOM message on MI325X, vllm-project/vllm#41962"),
    "MI355X-288GB": _card(
        "AMD Instinct MI355X 288GB", "309220868096 B", "rocm-smi VRAM total in public ROCm 7.2 logs (no citable "
        "address yet)"),
}
# CUDA compute capability per card (NVIDIA's CUDA GPUs table): kernels and library workspaces depend on it.
COMPUTE_CAPABILITY = MappingProxyType({
    "A100-40GB": (8, 0), "A100-80GB": (8, 0), "H100-SXM-80GB": (9, 0), "H100-PCIe-80GB": (9, 0),
    "H100-NVL-94GB": (9, 0), "H20-96GB": (9, 0), "H200-141GB": (9, 0), "GH200-96GB": (9, 0), "B200-180GB": (10, 0),
    "B300-288GB": (10, 3), "L4-24GB": (8, 9), "A10G-24GB": (8, 6), "A10-24GB": (8, 6), "T4-16GB": (7, 5),
    "L40S-48GB": (8, 9), "A40-48GB": (8, 6), "RTX-A6000-48GB": (8, 6), "RTX-A6000-48GB-ECC": (8, 6),
    "RTX-6000-Ada-48GB": (8, 9), "V100-16GB": (7, 0), "V100-32GB": (7, 0), "RTX-3090-24GB": (8, 6),
    "RTX-4090-24GB": (8, 9), "RTX-5090-32GB": (12, 0),
})
GPU_CATALOG = MappingProxyType({key: card._replace(compute_capability=COMPUTE_CAPABILITY.get(key))
                                for key, card in _CARDS.items()})
DEFAULT_GPU = "H100-SXM-80GB"


def catalog_rows() -> list:
    """The catalogue as plain rows (the CLI's --list-gpus, the page's catalogue table): both capacities, sources."""
    return [{"name": key, "capacity_bytes": gpu.usable_bytes, "marketing_name": gpu.name,
             "capacity_source": gpu.usable_source, "estimated": gpu.estimated, "nvidia_smi_bytes": gpu.smi_bytes,
             "reported_as": gpu.reported_as, "nvidia_smi_source": gpu.smi_source,
             "compute_capability": gpu.compute_capability} for key, gpu in GPU_CATALOG.items()]
