"""The RL frameworks' log-probability ends as data: what a forward-only scoring pass holds where its blocks end (the
logits and whatever computes the log-probabilities and entropies from them), and which training loss row
(step/losses.py) each framework's update runs. One function applies a row.

A scoring row's terms are live together at the pass's loss end: (bits, over, narrow) as in step/losses.py, over
"TV" (tokens x vocabulary), "chunk" (verl's entropy chunk of rows x vocabulary) or "tile" (TRL's projection tile);
`narrow` terms exist only when the logits are narrower than fp32 (an upcast that is a copy). Measured on the CPU
from the frameworks' own files where they run (tests/measure/rl_logprobs.py, pinned in
tests/fixtures/rl/logprob_peaks.json); flash-attn's and TRL's Triton kernels read from their code.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from ..step.losses import TILE_COLUMNS, TILE_TOKENS
from ..tables import bytes_of

VERL_CHUNK = 2048          # verl FSDPEngineConfig entropy_from_logits_chunk_size
MEASURED = "CPU: the framework's own function under CUDA autocast's fp32 policies (tests/measure/rl_logprobs.py)"


class ScoringEnd(NamedTuple):
    terms: Tuple[Tuple[object, str, bool], ...]
    source: str
    checked: str


SCORING_ENDS = {
    # transformers' loss on the logits (what the plan assumed before the frameworks' own paths): the logits, their
    # fp32 upcast and the fp32 log-softmax (tests/measure/nograd_scoring.py: exact)
    "huggingface": ScoringEnd((("w", "TV", False), (32, "TV", True), (32, "TV", False)),
                              "transformers loss/loss_utils.py ForCausalLMLoss (logits.float(), log_softmax)",
                              "CPU: transformers' Llama under no_grad (tests/measure/nograd_scoring.py)"),
    # verl's reference pass and any pass without entropy: the logits; flash-attn's cross_entropy_loss forward
    # writes per-row fp32 vectors only, and without flash-attn logprobs_from_logits_v2 runs one row at a time
    "verl": ScoringEnd((("w", "TV", False),),
                       "verl 0.9.1 workers/engine/fsdp/transformer_impl.py prepare_model_outputs (calculate_entropy "
                       "False), utils/torch_functional.py logprobs_from_logits",
                       "the code (flash-attn: Triton); CPU: logprobs_from_logits_v2 holds one row's fp32 at a time "
                       "(" + MEASURED + ")"),
    # verl's old log-probs compute the entropy too (ray_trainer.py _compute_old_log_prob: calculate_entropy=True),
    # with entropy_from_logits under torch.compile (FSDPEngineConfig use_torch_compile: true): Inductor keeps one
    # fp32 T x V buffer (the exponentials its softmax and the weighted sum both read)
    "verl, entropy": ScoringEnd((("w", "TV", False), (32, "TV", False)),
                                "verl 0.9.1 ray_trainer.py _compute_old_log_prob, transformer_impl.py "
                                "compute_entropy_from_logits = torch.compile(entropy_from_logits, dynamic=True)",
                                "CPU: Inductor's code for verl's function (one float32 [T, V] buffer; "
                                "tests/measure/rl_logprobs.py compiled_buffers)"),
    # use_torch_compile: false: softmax's fp32 copy and output, logsumexp's fp32 copy, then softmax x logits in fp32
    "verl, entropy (eager)": ScoringEnd((("w", "TV", False), (32, "TV", False), (32, "TV", False)),
                                        "verl 0.9.1 utils/torch_functional.py entropy_from_logits",
                                        MEASURED + ": 8 bytes per T x V above the logits"),
    # entropy_from_logits_with_chunking: each chunk's .float() copy, its softmax and the product, one chunk at a time
    "verl, entropy (chunked)": ScoringEnd((("w", "TV", False), (96, "chunk", False)),
                                          "verl 0.9.1 utils/torch_functional.py entropy_from_logits_with_chunking "
                                          f"(entropy_from_logits_chunk_size {VERL_CHUNK})",
                                          MEASURED + ": 12 bytes per chunk row x V"),
    # TRL's fused LM head: one reused [4,096 x 32,768] tile, per-token fp32 statistics; no T x V
    "trl": ScoringEnd((("w", "tile", False),),
                      "trl 1.16.0 trainer/utils.py add_fused_lm_head, kernels/chunked_logprob.py "
                      "ChunkedLogProbFunction.forward (mm_buf)", "the code (Triton on CUDA)"),
    # OpenRLHF upcasts the logits (the bf16 ones die at the reassignment), then flash-attn's forward: per-row vectors
    "openrlhf": ScoringEnd((("w", "TV", True), (32, "TV", False)),
                           "openrlhf 0.11.2 models/actor.py Actor.forward (output['logits'].to(torch.float32)), "
                           "models/utils.py log_probs_from_logits",
                           "the code (flash-attn: Triton); the upcast as HF's (tests/measure/loss_peaks.py)"),
}


class LogprobPath(NamedTuple):
    """A framework's log-probability path: the training loss row of its updates (step/losses.py; "auto": the
    workload's own) and the scoring rows of the policy's own pass and of the other models' passes (None: the
    training loss row's forward, as before)."""
    update_loss: str
    policy_scoring: Optional[str]
    other_scoring: Optional[str]
    about: str


LOGPROB_PATHS = {
    "verl": LogprobPath("flash-ce", "verl, entropy", "verl",
                        "verl: flash-attn cross entropy (in-place backward), old log-probs with the compiled entropy"),
    "verl-eager-entropy": LogprobPath("flash-ce", "verl, entropy (eager)", "verl",
                                      "verl with fsdp_config.use_torch_compile false"),
    "verl-chunked-entropy": LogprobPath("flash-ce", "verl, entropy (chunked)", "verl",
                                        "verl with entropy_from_logits_with_chunking"),
    "verl-no-flash-attn": LogprobPath("rowwise", "verl, entropy", "verl",
                                      "verl without flash-attn: logprobs_from_logits_v2, one row at a time"),
    "trl": LogprobPath("trl-fused", "trl", "trl", "TRL's fused LM head for every pass"),
    "openrlhf": LogprobPath("flash-ce-fp32", "openrlhf", "openrlhf",
                            "OpenRLHF: fp32 logits, flash-attn cross entropy"),
    "huggingface": LogprobPath("auto", None, None, "transformers' loss (the logits' fp32 upcast and log-softmax)"),
}
LOGPROB_CHOICES = tuple(LOGPROB_PATHS)


def extents(tokens: int, vocab: int, chunk: int = VERL_CHUNK) -> dict:
    return {"TV": tokens * vocab, "chunk": min(tokens, chunk) * vocab,
            "tile": min(tokens, TILE_TOKENS) * min(vocab, TILE_COLUMNS)}


def scoring_end_bytes(row: str, tokens: int, vocab: int, logit_bits: int, chunk: int = VERL_CHUNK) -> int:
    """What a scoring row holds at its peak for `tokens` x `vocab` logits of `logit_bits` bits."""
    size = extents(tokens, vocab, chunk)
    return sum(bytes_of(size[over], logit_bits if bits == "w" else bits)
               for bits, over, narrow in SCORING_ENDS[row].terms if not narrow or logit_bits != 32)


def scoring_formula(row: str, tokens: int, vocab: int, logit_bits: int) -> str:
    words = {"TV": f"{tokens:,} x {vocab:,}", "chunk": f"min({tokens:,}, {VERL_CHUNK}) x {vocab:,}",
             "tile": f"min({tokens:,}, {TILE_TOKENS}) x min({vocab:,}, {TILE_COLUMNS})"}
    terms = [f"{(logit_bits if bits == 'w' else bits) // 8} x {words[over]}"
             for bits, over, narrow in SCORING_ENDS[row].terms if not narrow or logit_bits != 32]
    return f"{scoring_end_bytes(row, tokens, vocab, logit_bits):,} = " + " + ".join(terms) + f" ({row})"
