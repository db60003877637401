"""GPU catalog (data): two capacities per card, each as it was published, next to the marketing name.

- nvidia-smi's total (`memory.total`, the "NNNNNMiB" of its Memory-Usage column; AMD: rocm-smi's "VRAM Total
  Memory (B)"). It is the device's memory, not what a training job can have: the driver keeps part of it.
- What PyTorch can use: `torch.cuda.get_device_properties(i).total_memory` (CUDA's totalGlobalMem, deviceQuery's
  "Total amount of global memory") and the OOM message's "GPU 0 has a total capacity of X GiB" (cudaMemGetInfo's
  total). The caching allocator works under this ceiling, so the verdict compares the peak (the CUDA context
  included) with it. The H100 80GB shows 81,559 MiB in nvidia-smi (85.52 GB) and "total capacity of 79.11 GiB"
  (84.94 GB) in PyTorch: a plan at 85.08 GB passes the first and cannot run.

Both figures move by tens of MiB between driver versions (docs/research/gpu_capacities.md); where several were
published the lowest is used, so a verdict holds on every driver seen. A card with no published PyTorch figure is
estimated from the cards of its memory family that have one: nvidia-smi's total less the family's largest published
gap (nvidia-smi's total - PyTorch's), rounded up to 128 MiB, so the estimate is below every sourced card of the
family had it been estimated the same way. The gaps differ by family, not by size (docs/research/gpu_capacities.md:
0.3-0.64 GiB on GDDR cards of 16-48 GB, 0.5-1.08 GiB on NVIDIA HBM cards of 40-275 GiB, under 0.02 GiB on AMD's
HBM), so no fit by size would be safer. A family with fewer than MIN_FAMILY sourced cards (AMD's: two) keeps the
flat ESTIMATE_GAP, above every published gap of every family; so does a capacity typed without its card.
"""

from __future__ import annotations

from decimal import Decimal
from types import MappingProxyType
from typing import NamedTuple, Optional, Tuple

MIB, GIB = 2**20, 2**30
ESTIMATE_GAP = 1280 * MIB       # any card: above every published gap (the largest, GH200's, is 1,103 MiB)
GAP_STEP = 128 * MIB            # a family's largest gap is rounded up to this: drift between drivers is tens of MiB
MIN_FAMILY = 3                  # sourced cards a family needs before its own gap replaces ESTIMATE_GAP


class GPU(NamedTuple):
    name: str             # the marketing name
    smi_bytes: int        # nvidia-smi's memory.total (rocm-smi's VRAM total)
    smi_source: str       # as printed, and where it was published
    usable_bytes: int     # what PyTorch can use: total_memory / the OOM message's "total capacity"
    usable_source: str    # as printed and where, or how it was estimated
    estimated: bool       # no published PyTorch figure: nvidia-smi's total less the family's gap
    compute_capability: Optional[Tuple[int, int]] = None    # CUDA's (major, minor); None on AMD
    family: str = ""      # the memory family whose published gaps bound an estimate (FAMILY)

    @property
    def reported_as(self) -> str:       # the driver's figure as printed (kept for the catalogue listing)
        return self.smi_source.split(" (", 1)[0]


def _printed(text: str) -> int:
    """Bytes of a figure as printed: '81559 MiB', '79.11 GiB' (PyTorch prints two decimals: the value may be up to
    0.005 GiB higher, never counted), '42298834944 B'."""
    number, unit = text.split()
    return int(Decimal(number) * {"B": 1, "MiB": MIB, "GiB": GIB}[unit])


def _card(name, smi, smi_source, usable=None, usable_source=None) -> GPU:
    """A card as published; one without a PyTorch figure is marked estimated and gets its capacity in _estimate."""
    smi_bytes = _printed(smi)
    if usable is None:
        return GPU(name, smi_bytes, f"{smi} ({smi_source})", smi_bytes, "", True)
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
        "NVIDIA H100 PCIe 80GB", "81559 MiB", "as the SXM card, modal-labs/modal-client#2797",
        "81008 MiB", "total_memory=81008MB (79.11 GiB, as the SXM card's OOM message) on an 'NVIDIA H100 PCIe', "
        "torch 2.0.1+cu117, the setup of pytorch/pytorch#110153"),
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
    "A10-24GB": _card(
        "NVIDIA A10 24GB", "23028 MiB", "modal-labs/modal-client#2797",
        "21.99 GiB", "OOM message on a Lambda A10 instance, zai-org/CogVLM#236"),
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
    "V100-16GB": _card(
        "NVIDIA Tesla V100 16GB (SXM2 / PCIe)", "16160 MiB", "older drivers (16384 MiB on driver 570, "
        "1CatAI/1Cat-vLLM#85)",
        "16130 MiB", "total_memory=16130MB on a Tesla V100-SXM2-16GB (15.75 GiB), ultralytics/yolov3 README.md "
        "(2019, its mAP section); 15.77 GiB in the OOM message on Azure's V100 16GB (Standard_NC6s_v3), "
        "stanford-futuredata/ARES@6a383e02 README.md"),
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
# How a node's GPUs talk (vendor datasheets): NVLink / NVSwitch or Infinity Fabric between every GPU of an HGX or
# OAM board ("nvlink"; the A100 and V100 rows, named for both form factors, are taken as SXM), an NVLink bridge
# between pairs of PCIe cards ("pairs": H100 NVL, A40, RTX A6000, RTX 3090), or PCIe alone ("pcie"). Tensor and
# context parallelism exchange activations every layer: a layout fix over PCIe is slow, and says so.
INTERCONNECT = MappingProxyType({
    **dict.fromkeys(("A100-40GB", "A100-80GB", "H100-SXM-80GB", "H20-96GB", "H200-141GB", "GH200-96GB", "B200-180GB",
                     "B300-288GB", "V100-16GB", "V100-32GB", "MI300X-192GB", "MI325X-256GB", "MI355X-288GB"), "nvlink"),
    **dict.fromkeys(("H100-NVL-94GB", "A40-48GB", "RTX-A6000-48GB", "RTX-A6000-48GB-ECC", "RTX-3090-24GB"), "pairs"),
    **dict.fromkeys(("H100-PCIe-80GB", "L4-24GB", "A10G-24GB", "A10-24GB", "T4-16GB", "L40S-48GB", "RTX-6000-Ada-48GB",
                     "RTX-4090-24GB", "RTX-5090-32GB"), "pcie"),
})


def fast_links(gpu: str, group: int) -> bool:
    """Whether a tensor / context parallel group of `group` GPUs talks over NVLink (a custom card: assumed so)."""
    kind = INTERCONNECT.get(gpu, "nvlink")
    return group <= 1 or kind == "nvlink" or (kind == "pairs" and group <= 2)


# The memory family per card: what the driver keeps differs between GDDR boards, NVIDIA's HBM modules and AMD's.
FAMILY = MappingProxyType({
    **dict.fromkeys(("A100-40GB", "A100-80GB", "H100-SXM-80GB", "H100-PCIe-80GB", "H100-NVL-94GB", "H20-96GB",
                     "H200-141GB", "GH200-96GB", "B200-180GB", "B300-288GB", "V100-16GB", "V100-32GB"), "NVIDIA HBM"),
    **dict.fromkeys(("L4-24GB", "A10G-24GB", "A10-24GB", "T4-16GB", "L40S-48GB", "A40-48GB", "RTX-A6000-48GB",
                     "RTX-A6000-48GB-ECC", "RTX-6000-Ada-48GB", "RTX-3090-24GB", "RTX-4090-24GB", "RTX-5090-32GB"),
                    "NVIDIA GDDR"),
    **dict.fromkeys(("MI300X-192GB", "MI325X-256GB", "MI355X-288GB"), "AMD HBM"),
})


def family_gaps(cards: dict) -> dict:
    """family -> (the gap an estimate subtracts, the sourced cards it rests on): the family's largest published gap
    rounded up to GAP_STEP, or ESTIMATE_GAP below MIN_FAMILY sourced cards."""
    out = {}
    for family in dict.fromkeys(FAMILY.values()):
        sourced = [k for k, g in cards.items() if FAMILY[k] == family and not g.estimated]
        largest = max((cards[k].smi_bytes - cards[k].usable_bytes for k in sourced), default=0)
        gap = -(-largest // GAP_STEP) * GAP_STEP if len(sourced) >= MIN_FAMILY else ESTIMATE_GAP
        out[family] = (gap, tuple(sourced))
    return out


def _estimate(key: str, card: GPU, gaps: dict) -> GPU:
    family = FAMILY[key]
    card = card._replace(compute_capability=COMPUTE_CAPABILITY.get(key), family=family)
    if not card.estimated:
        return card
    gap, sourced = gaps[family]
    why = (f"the largest published gap of the {len(sourced)} sourced {family} cards, rounded up to 128 MiB"
           if len(sourced) >= MIN_FAMILY else
           f"the flat gap: {len(sourced)} sourced {family} cards are too few to bound one")
    return card._replace(usable_bytes=card.smi_bytes - gap, usable_source=(
        f"estimated: nvidia-smi's {card.reported_as} less {gap // MIB} MiB ({why}; no published PyTorch figure)"))


FAMILY_GAPS = MappingProxyType(family_gaps(_CARDS))
GPU_CATALOG = MappingProxyType({key: _estimate(key, card, FAMILY_GAPS) for key, card in _CARDS.items()})
DEFAULT_GPU = "H100-SXM-80GB"


def catalog_rows() -> list:
    """The catalogue as plain rows (the CLI's --list-gpus, the page's catalogue table): both capacities, sources."""
    return [{"name": key, "capacity_bytes": gpu.usable_bytes, "marketing_name": gpu.name,
             "capacity_source": gpu.usable_source, "estimated": gpu.estimated, "nvidia_smi_bytes": gpu.smi_bytes,
             "reported_as": gpu.reported_as, "nvidia_smi_source": gpu.smi_source,
             "compute_capability": gpu.compute_capability, "family": gpu.family}
            for key, gpu in GPU_CATALOG.items()]


def estimated_names() -> list:
    """The marketing names of the cards whose capacity is still estimated (the page lists them)."""
    return [gpu.name for gpu in GPU_CATALOG.values() if gpu.estimated]
