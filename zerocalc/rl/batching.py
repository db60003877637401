"""Tokens per micro-batch of each pass of an RL step (a model's update, its scoring pass), from the framework's
batching rule and the sequences' lengths, as data: one function applies it.

A pass's micro-batch takes `sequences` rollouts at a time and is either
- padded: every sequence padded to the micro-batch's longest (verl use_remove_padding=False pads to the longest in
  the micro-batch: engine/fsdp/transformer_impl.py prepare_model_inputs, torch.nested.to_padded_tensor; TRL pads a
  batch to its longest prompt and completion), so one long response sets every sequence's length;
- packed: the sequences' real tokens concatenated into one row, attention kept apart by flash-attn's varlen kernels
  (verl use_remove_padding=True, input_ids.values().unsqueeze(0); OpenRLHF --packing_samples,
  unpad_and_slice_tensor): a micro-batch of n sequences is their summed lengths, run as one sequence of that many
  tokens (micro-batch 1): activations are linear in tokens under flash attention;
- dynamic: micro-batches cut by a token budget (verl use_dynamic_bsz with ppo_max_token_len_per_gpu /
  log_prob_max_token_len_per_gpu: utils/seqlen_balancing.py rearrange_micro_batches keeps every micro-batch's
  summed length within the budget, splitting further until it holds), at most the GPU's share of the step.

The plan's lengths have two ends (RLPlan.lengths): "max", every sequence at prompt + response max length (the
promise), and "typical", every sequence at the typical prompt + typical response. A padded micro-batch is padded to
its longest member, so its typical end stays at the longest length: one long response in the micro-batch sets it.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from ..scenario import FieldError, require_int

BATCHING_SOURCES = {
    "padded": "verl 0.9.1 workers/engine/fsdp/transformer_impl.py prepare_model_inputs (use_remove_padding=False: "
              "torch.nested.to_padded_tensor to the micro-batch's longest); trl 1.16.0 GRPOTrainer (pad to longest)",
    "packed": "verl 0.9.1 prepare_model_inputs (use_remove_padding=True: input_ids.values().unsqueeze(0), flash-attn "
              "varlen); openrlhf 0.11.2 models/actor.py (--packing_samples: unpad_and_slice_tensor)",
    "dynamic": "verl 0.9.1 utils/seqlen_balancing.py rearrange_micro_batches (every micro-batch's summed length "
               "within max_token_len; use_dynamic_bsz)",
}


class Batching(NamedTuple):
    """How one pass of one model cuts its rollouts into micro-batches."""
    sequences: int                     # rollouts per micro-batch (ppo_micro_batch_size_per_gpu, ...)
    packed: bool = False               # remove padding: a micro-batch is its sequences' summed lengths
    max_tokens: Optional[int] = None   # dynamic batch size: at most this many tokens per micro-batch

    def check(self, field: str) -> "Batching":
        require_int(f"{field}.sequences", self.sequences, 1, 10**7)
        if not isinstance(self.packed, bool):
            raise FieldError(f"{field}.packed", self.packed, "true or false")
        if self.max_tokens is not None:
            require_int(f"{field}.max_tokens", self.max_tokens, 1, 10**9)
        return self

    @property
    def kind(self) -> str:
        return "dynamic" if self.max_tokens is not None else "packed" if self.packed else "padded"


def micro_batch_shape(batching: Batching, length: int, longest: int, per_gpu: int) -> Tuple[int, int]:
    """(micro_batch, seq_len) of one micro-batch: `length` is each sequence's length at this end of the band,
    `longest` prompt + response max, `per_gpu` the rollouts one data-parallel rank holds in the step."""
    b = batching
    per_gpu = max(1, per_gpu)
    if b.max_tokens is not None:
        if b.max_tokens < longest:
            # verl asserts max_token_len >= the longest sequence (rearrange_micro_batches)
            raise FieldError("max_tokens", b.max_tokens, f"at least the longest sequence ({longest:,} tokens): "
                                                         "verl refuses a budget below it")
        tokens = min(b.max_tokens, per_gpu * length)
        if b.packed:
            return 1, max(tokens, length)
        return max(1, tokens // longest), longest
    sequences = min(b.sequences, per_gpu)
    if b.packed:
        return 1, sequences * length
    return sequences, longest


def describe(batching: Batching, micro_batch: int, seq_len: int) -> str:
    b = batching
    if b.max_tokens is not None:
        return f"dynamic: at most {b.max_tokens:,} tokens per micro-batch -> {micro_batch * seq_len:,} tokens"
    if b.packed:
        return f"packed: {b.sequences} sequences' real tokens in one row -> {seq_len:,} tokens"
    return f"padded: {micro_batch} sequences x {seq_len:,} tokens (each padded to the longest)"
