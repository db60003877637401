"""DeepEP's buffers: expert parallelism through DeepEP (Megatron's --moe-token-dispatcher-type flex with
--moe-enable-deepep) maps its own NVLink buffer (and, past one node, an NVSHMEM RDMA buffer) outside PyTorch's
allocator, once per process: a row beside NCCL's (nccl.py), which nvidia-smi shows and max_memory_reserved not.

Read from deepseek-ai/DeepEP at dd758caf451848bd150e1046af3d0a73e5fff38d (DEEPEP):
- deep_ep/buffers/legacy.py: Buffer.num_sms 20 (Megatron's --moe-deepep-num-sms default); get_dispatch_config /
  get_combine_config give Config(num_sms, nvl send, nvl recv, rdma send, rdma recv) per EP size (CONFIGS: the
  recv chunks, the terms the sizes use); an EP size off the table is refused by DeepEP ("Unsupported number of EP
  ranks"): zerocalc takes the next listed size up, the larger buffer;
- csrc/legacy/config.hpp get_nvl_buffer_size_hint and get_rdma_buffer_size_hint: per channel (num_sms / 2) and
  peer, the recv chunk's tokens x (hidden bytes + SourceMeta's 8 bytes + 128 top-k indices of 8 bytes + 128 top-k
  weights and 128 scales of 4 bytes), plus counters, rounded up to 128 bytes; the RDMA buffer only past 8 ranks,
  twice (send and receive);
- csrc/legacy/buffer.hpp: the NVL buffer from the shared-memory allocator (cudaMalloc / cuMem), not PyTorch's.
The caller (Megatron's fused_a2a.py get_buffer) takes the larger of the dispatch and combine hints, with hidden
bytes = hidden x max(element size, 2). Not counted: NVSHMEM's own symmetric heap beyond the RDMA buffer, the
low-latency kernels' buffers (decoding, not training).
"""

from __future__ import annotations

DEEPEP = "deepseek-ai/DeepEP dd758caf451848bd150e1046af3d0a73e5fff38d"
NUM_SMS = 20
MAX_NVL_PEERS = 8
TOP_K, SCALES, SOURCE_META, INDEX_BYTES = 128, 128, 8, 8
# EP size -> (dispatch nvl recv, combine nvl recv, dispatch rdma (send, recv), combine rdma (send, recv))
CONFIGS = {2: (256, 256, (6, 128), (6, 128)), 4: (256, 256, (6, 128), (6, 128)), 8: (256, 256, (6, 128), (6, 128)),
           16: (288, 288, (20, 128), (12, 128)), 24: (288, 288, (8, 128), (8, 128)),
           32: (288, 288, (8, 128), (8, 128)), 48: (288, 288, (8, 128), (8, 128)),
           64: (288, 288, (8, 128), (8, 128)), 96: (480, 480, (12, 128), (8, 128)),
           128: (560, 560, (12, 128), (8, 128)), 144: (720, 720, (12, 128), (8, 128)),
           160: (720, 720, (12, 128), (8, 128))}
DISPATCHERS = ("alltoall", "deepep")


def _round(n: int) -> int:
    return -(-n // 128) * 128


def _token_bytes(hidden_bytes: int) -> int:
    return hidden_bytes + SOURCE_META + TOP_K * INDEX_BYTES + TOP_K * 4 + SCALES * 4


def nvl_bytes(hidden_bytes: int, ranks: int, recv_tokens: int, num_sms: int = NUM_SMS) -> int:
    """config.hpp get_nvl_buffer_size_hint."""
    channels, nvl, rdma = num_sms // 2, min(ranks, MAX_NVL_PEERS), max(ranks // MAX_NVL_PEERS, 1)
    return _round(channels * nvl * (2 * rdma + 3) * 4 + channels * nvl * recv_tokens * _token_bytes(hidden_bytes))


def rdma_bytes(hidden_bytes: int, ranks: int, send_tokens: int, recv_tokens: int, num_sms: int = NUM_SMS) -> int:
    """config.hpp get_rdma_buffer_size_hint (the recv chunk aligned up to the send chunk); 0 within one node."""
    if ranks <= MAX_NVL_PEERS:
        return 0
    channels, rdma = num_sms // 2, ranks // MAX_NVL_PEERS
    recv = -(-recv_tokens // send_tokens) * send_tokens
    return _round(channels * rdma * (MAX_NVL_PEERS * 2 + 2) * 2 * 4
                  + channels * rdma * recv * (_token_bytes(hidden_bytes) + 16) * 2)


def deepep_bytes(workload) -> int:
    """One rank's DeepEP buffers (NVL + RDMA), 0 without the DeepEP dispatcher or expert parallelism."""
    ep = workload.layout.ep
    if workload.moe_dispatcher != "deepep" or ep <= 1 or not workload.arch.moe_layers:
        return 0
    size = next((n for n in sorted(CONFIGS) if n >= ep), max(CONFIGS))
    nvl_d, nvl_c, rdma_d, rdma_c = CONFIGS[size]
    hidden_bytes = workload.arch.hidden * 2              # hidden x max(element size, 2): bf16 or an fp8 dispatch
    nvl = max(nvl_bytes(hidden_bytes, ep, nvl_d), nvl_bytes(hidden_bytes, ep, nvl_c))
    rdma = max(rdma_bytes(hidden_bytes, ep, *rdma_d), rdma_bytes(hidden_bytes, ep, *rdma_c))
    return nvl + rdma
