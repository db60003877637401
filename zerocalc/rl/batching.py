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

from ..step.batches import Batching, micro_batch_shape  # noqa: F401  (the one batching rule: step/batches.py)

BATCHING_SOURCES = {
    "padded": "verl 0.9.1 workers/engine/fsdp/transformer_impl.py prepare_model_inputs (use_remove_padding=False: "
              "torch.nested.to_padded_tensor to the micro-batch's longest); trl 1.16.0 GRPOTrainer (pad to longest)",
    "packed": "verl 0.9.1 prepare_model_inputs (use_remove_padding=True: input_ids.values().unsqueeze(0), flash-attn "
              "varlen); openrlhf 0.11.2 models/actor.py (--packing_samples: unpad_and_slice_tensor)",
    "dynamic": "verl 0.9.1 utils/seqlen_balancing.py rearrange_micro_batches (every micro-batch's summed length "
               "within max_token_len; use_dynamic_bsz)",
}


def describe(batching: Batching, micro_batch: int, seq_len: int) -> str:
    b = batching
    if b.max_tokens is not None:
        return f"dynamic: at most {b.max_tokens:,} tokens per micro-batch -> {micro_batch * seq_len:,} tokens"
    if b.packed:
        return f"packed: {b.sequences} sequences' real tokens in one row -> {seq_len:,} tokens"
    return f"padded: {micro_batch} sequences x {seq_len:,} tokens (each padded to the longest)"
