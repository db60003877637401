"""NCCL's buffers: device memory each communicator the plan creates takes outside PyTorch's allocator (so
max_memory_reserved never shows it and nvidia-smi does), one row per process group.

Read from NVIDIA/nccl at 5067397c2676d5aed50042fc39e5c8ee96eb0027 (NCCL):
- src/init.cc computeBuffSizes: per connection and protocol, LL = 8 lines x 512 threads x NCCL_STEPS (8) x 16 bytes
  = 524,288; LL128 = 120 elements x 640 threads x 8 steps x 8 bytes = 4,915,200; Simple = NCCL_BUFFSIZE, 4 MiB by
  default: 9,633,792 bytes for the three. P2P (send/recv) steps are p2pChunkSize: 512 KiB over NVLink
  (NCCL_P2P_NVL_CHUNKSIZE), 128 KiB over the network or PCIe, times the 8 steps.
- With cuMem (NCCL's default on CUDA 12) each connection's buffers are mapped in 2 MiB granules and a further 2 MiB
  granule holds its FIFO and control words: NVIDIA/nccl#1685's ALLOC log of an all-to-all on 8 x H100 shows exactly
  10,485,760- and 2,097,152-byte allocations, 12 MiB per connection (CONNECTION below).
- A ring holds one receiving connection per channel and rank (the sending side's buffers live at the peer): ring
  bytes = channels x CONNECTION. Trees add up to three more peers; they are the band's high end.
- src/transport/nvls.cc: NVLink SHARP (Hopper and later on an NVSwitch node, NCCL_NVLS_ENABLE=2: on where
  supported) maps nvlsChannels (16 on sm90, 24 on one sm100 node) x 2 x (128 KiB x 8 steps) per head, one head per
  local rank, once as unicast and once as multicast memory: 2 x 16 x 2 x 1 MiB x 8 = 512 MiB on 8 H100s.
- Channels (what NCCL's INIT log prints): 16 coll and 16 p2p channels per peer on an 8 x H800 NVSwitch node with
  NVLS off (NVIDIA/nccl#892), 32 channels per pair for an all-to-all on 8 x H100 (#1685), 8 coll channels and 2 p2p
  channels per peer across two H20 nodes (#1189), 4 and 2 on two PCIe GPUs (#1706). CHANNELS holds them.
- PyTorch's ProcessGroupNCCL creates one communicator per process group at its first collective; split groups do
  not share buffers unless NCCL_COMM_SPLIT_SHARE_RESOURCES=1 (sjeaugey, NVIDIA/nccl#986: "More communicators =
  more memory used").
Checked against NVIDIA/nccl#1685: the first all_to_all_single on 8 x H100 took 3.28 GB outside PyTorch; the rows
give 7 peers x 32 channels x 12 MiB = 2.63 GiB at the point (the band's high end, 2x, holds it).
Not counted: the default (world) group's communicator when the step never uses it beside the plan's groups,
Megatron's extra groups (embedding, position embedding, tp-dp-cp), DeepEP / NVSHMEM buffers, CUDA graphs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Tuple

from ..gpus import GPU_CATALOG, INTERCONNECT

MIB = 2**20
NCCL = "NVIDIA/nccl 5067397c2676d5aed50042fc39e5c8ee96eb0027"
LL, LL128, SIMPLE = 524_288, 4_915_200, 4 * MIB
GRANULE = 2 * MIB                     # cuMem's mapping granularity and the FIFO/control granule (#1685)
NVLS_STEP = 128 * 1024 * 8            # NCCL_NVLS_CHUNKSIZE x NCCL_STEPS
NVLS_CHANNELS = {9: 16, 10: 24}       # nvls.cc NVLS_NCHANNELS_SM90, NVLS_NCHANNELS_SM100_NVL (by major)
LOW_PERCENT, HIGH_PERCENT = 25, 200   # answers/ranges.py: Simple alone, no NVLS .. trees beside rings, both sides


class Channels(NamedTuple):
    coll: int          # ring channels of a collective communicator
    per_peer: int      # p2p channels per peer (send/recv, all-to-all)
    source: str


# (link, compute-capability major or 0 for any) -> channels; the first match in order wins.
CHANNELS = (
    (("nvlink", 9), Channels(16, 32, "#892: 16 coll channels on 8 x H800 (NVLS off); #1685: 32 per pair on H100")),
    (("nvlink", 10), Channels(16, 32, "as Hopper (an assumption: no Blackwell log was found)")),
    (("nvlink", 0), Channels(12, 16, "an assumption below Hopper's (NVLink 3 has 12 links a GPU)")),
    (("network", 0), Channels(8, 2, "#1189: 8 coll channels, 2 p2p channels per peer across two H20 nodes")),
    (("pcie", 0), Channels(4, 2, "#1706: 4 coll channels, 2 p2p channels per peer on two PCIe GPUs")),
)


def connection_bytes(buffsize: int) -> int:
    """One connection's buffers, mapped in cuMem granules, plus its FIFO granule."""
    return -(-(LL + LL128 + buffsize) // GRANULE) * GRANULE + GRANULE


def p2p_connection_bytes(link: str, buffsize: int) -> int:
    """A send/recv connection: all three protocols over NVLink (#1685), Simple's p2p steps elsewhere."""
    if link == "nvlink":
        return connection_bytes(buffsize)
    return -(-min(buffsize, 128 * 1024 * 8) // GRANULE) * GRANULE + GRANULE


def channels(link: str, major: int) -> Channels:
    return next(c for (l, m), c in CHANNELS if l == link and m in (0, major))


class Group(NamedTuple):
    name: str          # dp, dp shard, dp replicate, tp, cp, ep, pp
    size: int
    stride: int        # ranks between members: the product of the dimensions inside it (tp innermost)
    pattern: str       # collective | all-to-all | pipeline


def plan_groups(scenario, layout, dispatcher: str = "alltoall") -> Tuple[Group, ...]:
    """The process groups of a plan with more than one member, in Megatron's order tp, cp, ep, dp, pp (tp
    innermost): under hybrid sharding the data-parallel group is a shard group and a replicate group. With DeepEP
    dispatching the tokens (deepep.py) the expert group's NCCL communicator runs collectives only: NCCL connects its
    send/recv channels at a first all-to-all, which never comes."""
    tp, cp, ep, n, group = layout.tp, layout.cp, layout.ep, scenario.workers, scenario.group
    inner = tp * cp
    dp = ((("dp", n, inner),) if group >= n else (("dp shard", group, inner), ("dp replicate", n // group,
                                                                              inner * group)))
    rows = [Group("tp", tp, 1, "collective"), Group("cp", cp, tp, "collective"),
            Group("ep", ep, inner, "collective" if dispatcher == "deepep" else "all-to-all"),
            *(Group(a, b, c, "collective") for a, b, c in dp),
            Group("pp", layout.pp, inner * n, "pipeline")]
    return tuple(g for g in rows if g.size > 1)


def _setting(group: Group, gpu: str | None, per_node: int) -> Tuple[str, int, Channels]:
    """(link, compute-capability major, channels) of one group: the network once it spans nodes (tp innermost),
    else the node's links; a custom card is taken as an NVLink Hopper."""
    card = GPU_CATALOG.get(gpu) if gpu else None
    major = card.compute_capability[0] if card is not None and card.compute_capability else 9
    node = INTERCONNECT.get(gpu, "nvlink") if gpu else "nvlink"
    link = "network" if group.size * group.stride > per_node else "nvlink" if node == "nvlink" else "pcie"
    return link, major, channels(link, major)


def group_bytes(group: Group, gpu: str | None, per_node: int, buffsize: int, nvls: bool) -> int:
    """One rank's buffers in one communicator: ring channels (and NVLS on an NVSwitch node from Hopper on) for a
    collective group, channels per peer for each peer of an all-to-all (every other member) or a pipeline (the
    previous and next stage)."""
    link, major, ch = _setting(group, gpu, per_node)
    if group.pattern == "collective":
        total = ch.coll * connection_bytes(buffsize)
        if nvls and link == "nvlink" and major >= 9:
            total += 2 * NVLS_CHANNELS[min(major, 10)] * 2 * NVLS_STEP * group.size
        return total
    peers = group.size - 1 if group.pattern == "all-to-all" else min(2, group.size - 1)
    return peers * ch.per_peer * p2p_connection_bytes(link, buffsize)


def _card(workload):
    """The catalogued card, or None for a custom capacity (taken as an NVLink Hopper node: _setting)."""
    return None if workload.gpu_memory is not None else workload.gpu


def nccl_bytes(scenario, workload) -> int:
    """Every communicator's buffers on one rank, at the point (before Workload.nccl_percent)."""
    return _groups_bytes(scenario, workload.layout, workload.moe_dispatcher, _card(workload),
                         workload.nccl_buffsize, workload.nccl_nvls)


@lru_cache(maxsize=1024)      # a layout search asks it of each recompute variant of a layout
def _groups_bytes(scenario, layout, dispatcher: str, gpu, buffsize, nvls) -> int:
    return sum(group_bytes(g, gpu, scenario.gpus_per_node, buffsize, nvls)
               for g in plan_groups(scenario, layout, dispatcher))


def nccl_dict(scenario, workload) -> dict:
    """The report's NCCL rows: one per communicator, each with its bytes at the point and how it is counted."""
    gpu = _card(workload)
    rows = []
    for g in plan_groups(scenario, workload.layout, workload.moe_dispatcher):
        link, _, ch = _setting(g, gpu, scenario.gpus_per_node)
        b = group_bytes(g, gpu, scenario.gpus_per_node, workload.nccl_buffsize, workload.nccl_nvls)
        rows.append({"group": g.name, "ranks": g.size, "pattern": g.pattern, "link": link,
                     "channels": ch.coll if g.pattern == "collective" else ch.per_peer, "channels_source": ch.source,
                     "bytes": b, "counted_bytes": b * workload.nccl_percent // 100})
    return {"rows": rows, "percent": workload.nccl_percent, "buffsize": workload.nccl_buffsize,
            "nvls": workload.nccl_nvls, "source": NCCL + " src/init.cc, src/transport/nvls.cc; step/nccl.py"}
