"""The loss end: what each cross-entropy implementation saves for backward and holds transiently, as data.

A row's terms are (bits, over, narrow): bits per element ("w" the logits' own width, "g" the gradients' dtype),
over which extent ("TV" tokens x vocabulary columns of the rank, "TV/n" one of the loss's n chunks, "Th" tokens x
hidden, "Vh" the head's vocabulary columns x hidden, "cV" one Liger chunk of rows x vocabulary, "tile" one TRL
projection tile of at most 4,096 tokens x 32,768 columns), and whether the
term exists only when the logits are narrower than fp32 (an upcast or a cast back that is a copy). `saved` is what
the loss keeps for backward per T x V element (activations.py counts it among the head's activations); the
phases' terms are what it holds beyond that at the end of forward and at the start of backward.
Measured on the CPU with each package's own code where it runs (tests/measure/loss_peaks.py, megatron_loss.py,
compiled_saves.py); Liger's and cut-cross-entropy's Triton kernels read from their code.

The RL frameworks' log-probability paths are rows too (the policy update of an RL plan, zerocalc/rl/): verl's and
OpenRLHF's flash-attn cross entropy and TRL's fused LM head. Their kernels are Triton, read from the code; the
tensors around them (the logits, OpenRLHF's upcast) are the ones the other rows measure.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

from ..tables import DTYPE_BITS, bytes_of
from ..versions import applies, family_of


class LossRow(NamedTuple):
    forward: Tuple[Tuple[object, str, bool], ...]
    backward: Tuple[Tuple[object, str, bool], ...]
    saved: object                 # bits per T x V element kept for backward (32: the fp32 log-softmax)
    saved_name: str
    source: str
    checked: str


MEGATRON_CE = "Megatron-LM d98e8a64 megatron/core/"
SOFTMAX = "loss log-softmax (fp32)"
LOSSES = {
    "huggingface": LossRow(
        (("w", "TV", False), (32, "TV", True)),                     # the logits, their fp32 upcast (logits.float())
        (("w", "TV", False), (32, "TV", False), ("w", "TV", True)),  # the logits, fp32 gradient, its cast back
        32, SOFTMAX, "transformers loss_utils.py ForCausalLMLoss: logits.float(), then cross_entropy",
        "the code; CPU: tests/measure/loss_peaks.py (10 / 12 bytes per T x V under the Trainer)"),
    # Older transformers (zerocalc/versions.py): before 4.49 ForCausalLMLoss copied the shifted fp32 logits
    # (logits[..., :-1, :].contiguous(), a copy once a micro-batch holds two sequences); before 4.46 the model
    # upcast them itself (LlamaForCausalLM.forward: self.lm_head(...).float()), so the narrow logits die at the
    # upcast. Backward keeps today's peak: the saved log-softmax, nll_loss's and log_softmax's fp32 gradients
    # (slice_backward's fp32 copy comes after them). Measured with transformers 4.45.2 (tests/test_versions.py).
    "huggingface, transformers < 4.49": LossRow(
        (("w", "TV", False), (32, "TV", True), (32, "TV", False)),
        (("w", "TV", False), (32, "TV", False), ("w", "TV", True)), 32, SOFTMAX,
        "transformers 4.48.0 loss/loss_utils.py:38 ForCausalLMLoss (removed by PR #35646, 4.49.0)",
        "the code; the same line measured at 4.45.2 (tests/test_versions.py)"),
    "huggingface, transformers < 4.46": LossRow(
        ((32, "TV", False), (32, "TV", False)),
        (("w", "TV", False), (32, "TV", False), ("w", "TV", True)), 32, SOFTMAX,
        "transformers 4.45.2 models/llama/modeling_llama.py:1214-1229 LlamaForCausalLM.forward",
        "CPU: transformers 4.45.2, torch 2.13 (tests/test_versions.py): 12 bytes per T x V at the loss's forward, "
        "8 beyond the saved log-softmax at backward, bf16"),
    "huggingface, transformers < 4.46, one sequence": LossRow(
        ((32, "TV", False),),
        (("w", "TV", False), (32, "TV", False), ("w", "TV", True)), 32, SOFTMAX,
        "transformers 4.45.2 models/llama/modeling_llama.py:1214-1229 (one sequence's shifted slice is contiguous)",
        "CPU: transformers 4.45.2, torch 2.13, batch 1 (tests/test_versions.py)"),
    # Vocab-parallel cross entropy on DTensor logits (torch.distributed.tensor.parallel.loss_parallel, torch 2.13
    # loss.py; torchtitan's _LossParallelCrossEntropy keeps the same buffers): the local logits, their fp32 upcast
    # and the shifted copy in _log_softmax; in backward (the logits dropped first, as torchtitan does) the saved
    # log-softmax beside zeros_like, exp and their sum (_nll_loss_and_log_softmax_backward).
    "huggingface, loss parallel": LossRow(
        (("w", "TV", False), (32, "TV", True), (32, "TV", False)), ((32, "TV", False),) * 3, 32, SOFTMAX,
        "torch 2.13 torch/distributed/tensor/parallel/loss.py _log_softmax, _nll_loss_and_log_softmax_backward",
        "CPU: 2 gloo ranks, DTensor logits under loss_parallel() (tests/measure/loss_parallel.py): 14 / 16 bytes "
        "per local T x V element at bf16"),
    # The bf16 logits stay referenced by GPTModel._postprocess while compute_language_model_loss runs and are freed
    # when forward returns (no node saves them). _VocabParallelCrossEntropy upcasts them once (.float()), subtracts
    # the max, exponentiates and normalises in place, and saves that fp32 softmax, the target mask and the masked
    # target; backward turns it into the gradient in place and returns it fp32, which autograd casts to the
    # logits' dtype (engine.cpp validate_outputs) before the saved buffer is released.
    "megatron": LossRow(
        (("w", "TV", True),), (("w", "TV", True),), 32, SOFTMAX,
        MEGATRON_CE + "tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy, models/gpt/gpt_model.py "
        "_postprocess, models/common/language_module/language_module.py compute_language_model_loss",
        "CPU: megatron-core's code, allocation by allocation (tests/test_loss_megatron.py)"),
    # --cross-entropy-loss-fusion: the same steps under torch.compile (jit_fuser). Its backward scatters into the
    # saved softmax, which Inductor does out of place: a fresh fp32 buffer, then calculate_gradients' bf16 cast.
    "megatron, fused": LossRow(
        (("w", "TV", True),), ((32, "TV", False), (16, "TV", False)), 32, SOFTMAX,
        MEGATRON_CE + "fusions/fused_cross_entropy.py calculate_gradients, jit.py jit_fuser = torch.compile",
        "CPU: Inductor's C++ code of torch 2.13 (tests/test_loss_megatron.py); not on a GPU"),
    # torchtune's chunked output: the model returns n bf16 chunks (modules/transformer.py chunked_output), the
    # loss upcasts one chunk at a time (ce_chunked_output_loss.py compute_cross_entropy); every chunk's fp32
    # log-softmax stays saved. Backward runs every chunk's loss before the projection: one chunk's two fp32
    # gradients at a time.
    "chunked": LossRow(
        (("w", "TV", False), (32, "TV/n", True)), ((32, "TV/n", False), (32, "TV/n", False)), 32, SOFTMAX,
        "torchtune 0.6.1 modules/loss/ce_chunked_output_loss.py CEWithChunkedOutputLoss, recipes/"
        "full_finetune_single_device.py (del logits before backward)",
        "CPU: torchtune's own loss file (tests/measure/loss_peaks.py): 6.5 / 5 bytes per T x V at n = 8"),
    # Liger's fused linear cross entropy computes the input and weight gradients inside forward, chunk by chunk
    # (rows c: ops/fused_linear_cross_entropy.py inc_factor = ceil(V / H), c = next_power_of_2(ceil(BT /
    # inc_factor))), and saves those two; the input is not saved (its grad_input, as large, stands in the head's
    # "output projection input"). Nothing T x V is kept.
    "liger": LossRow(
        (("w", "Th", False), ("g", "Vh", False), ("w", "cV", False)), (("g", "Vh", False),), 0, "",
        "liger-kernel 0.8.5 ops/fused_linear_cross_entropy.py fused_linear_cross_entropy_forward, "
        "LigerFusedLinearCrossEntropyFunction", "the code (Triton: not run on the CPU)"),
    # cut-cross-entropy: logits only as on-chip tiles; saves its input, the fp32 lse and the targets; backward
    # allocates the input and classifier gradients in the input's dtype (cce_backward.py).
    "cut": LossRow(
        (), (("w", "Th", False), ("w", "Vh", False)), 0, "",
        "cut-cross-entropy 25.1.1 cce.py LinearCrossEntropyFunction, cce_backward.py cce_backward_kernel",
        "the code (Triton: not run on the CPU)"),
    # torchtitan's ChunkedLossWrapper runs each chunk's head, loss and backward inside forward, accumulating the
    # input gradient in fp32 and the head's gradient; backward hands the accumulated gradient to the decoder.
    "torchtitan-chunked": LossRow(
        (("w", "TV/n", False), (32, "TV/n", False), (32, "TV/n", False), (32, "TV/n", False), ("g", "Vh", False),
         (32, "Th", False), ("w", "Th", False)), (("g", "Vh", False),), 0, "",
        "torchtitan 0.3.0 components/loss.py ChunkedLossWrapper, _DecoderOutputGradientBackProp",
        "CPU: torchtitan's own loss code (tests/measure/loss_peaks.py): (w + 12) / n bytes per T x V"),
    # A compiled loss (torchtitan compile.components "loss", torchtune compile): Inductor saves the bf16 logits
    # (its input) and per-row statistics, no fp32 T x V; its backward allocates only the logits' gradient.
    "compiled": LossRow(
        (), (("w", "TV", False),), "w", "loss: logits kept by the compiled loss",
        "torch 2.13 Inductor, default partitioner, on logits.float() + cross_entropy",
        "CPU: saved-tensor hooks on the compiled function (tests/measure/compiled_saves.py)"),
    # torchtune's unchunked output upcasts in the model (modules/transformer.py unembed: self.output(h).float()),
    # so its compiled loss keeps fp32 logits; the bf16 ones live only until the upcast, and backward makes the
    # fp32 gradient and its cast back for the projection.
    "compiled, fp32 logits": LossRow(
        (("w", "TV", True),), ((32, "TV", False), ("w", "TV", True)), 32, "loss: fp32 logits kept by the compiled loss",
        "torchtune 0.6.1 modules/transformer.py unembed, training/_compile.py compile_loss",
        "from the compiled-loss measurement (compiled_saves.py: the loss keeps its input) and torchtune's code"),
    # torchtune's chunked loss with compile: True compiles compute_cross_entropy per chunk (training/_compile.py
    # compile_loss), which then keeps each bf16 chunk (its input) instead of an fp32 log-softmax; backward makes
    # one chunk's bf16 gradient at a time.
    "chunked, compiled": LossRow(
        (), (("w", "TV/n", False),), "w", "loss: bf16 logit chunks kept by the compiled loss",
        "torchtune 0.6.1 training/_compile.py compile_loss, modules/loss/ce_chunked_output_loss.py",
        "from the compiled-loss measurement (compiled_saves.py) and torchtune's code; not measured chunked"),
    # verl 0.9.1 (workers/engine/fsdp/transformer_impl.py prepare_model_outputs, utils/torch_functional.py
    # logprobs_from_logits): the bf16 logits go to flash-attn's Triton cross_entropy_loss with inplace_backward=True
    # (no entropy in the update: entropy_coeff 0). The autograd Function saves the logits themselves (no copy) and
    # per-row fp32 lse; its backward writes the gradient into the saved logits (dlogits = logits). Nothing else T x V.
    "flash-ce": LossRow(
        (), (), "w", "loss: logits kept by flash-attn's cross entropy",
        "verl 0.9.1 utils/torch_functional.py logprobs_from_logits_flash_attn; flash-attn ops/triton/cross_entropy.py "
        "CrossEntropyLoss @058ad35a (save_for_backward(logits, lse, labels); dlogits = logits if inplace_backward)",
        "the code (Triton: not run on the CPU); the logits are the ones every other row measures"),
    # OpenRLHF 0.11.2 (models/actor.py Actor.forward): output["logits"].to(torch.float32), then flash-attn's
    # cross_entropy_loss without inplace_backward (models/utils.py log_probs_from_logits): the fp32 logits are saved,
    # the bf16 ones die at the upcast; backward allocates an fp32 gradient (empty_like) beside them, and the cast's
    # backward turns it into the logits' dtype once the saved logits are released.
    "flash-ce, fp32 logits": LossRow(
        (("w", "TV", True),), ((32, "TV", False),), 32, "loss: fp32 logits kept by flash-attn's cross entropy",
        "openrlhf 0.11.2 models/actor.py Actor.forward, models/utils.py log_probs_from_logits; flash-attn "
        "ops/triton/cross_entropy.py CrossEntropyLoss @058ad35a (dlogits = torch.empty_like(logits))",
        "the code (Triton: not run on the CPU)"),
    # Without flash-attn, verl's logprobs_from_logits_v2 (and TRL's selective_log_softmax off CUDA, OpenRLHF's bf16
    # path) loops over the rows: under CUDA autocast each row's log_softmax runs in fp32 (AT_FORALL_FP32_SET_OPT_DTYPE)
    # and saves its fp32 output, so every row's stays saved; the per-row copies and gradients come and go one row
    # at a time, and backward's peak is its start. The logits live through forward (the model's output) and are
    # not saved: gone by backward.
    "rowwise": LossRow(
        (("w", "TV", False),), (), 32, "loss log-softmax rows (fp32)",
        "verl 0.9.1 utils/torch_functional.py logprobs_from_logits_v2; trl 1.16.0 trainer/utils.py "
        "selective_log_softmax (bf16 branch)",
        "CPU: verl's function under CUDA autocast's policies (tests/measure/rl_logprobs.py): saved 4 bytes per "
        "T x V, forward and backward peaks within 1 % of it"),
    # TRL 1.16.0's fused LM head (trainer/utils.py add_fused_lm_head, kernels/chunked_logprob.py
    # ChunkedLogProbFunction): the head runs in [4,096 x 32,768] tiles of one reused buffer, folded into per-token
    # statistics; it saves its compact input (the scored positions' hidden states: the head's "output projection
    # input") and per-token fp32 vectors, no T x V. Backward recomputes each tile into the same buffer and
    # accumulates fp32 input and weight gradients, cast to their dtypes at the end (both casts alive at the return).
    "trl-fused": LossRow(
        (("w", "tile", False),), ((32, "Th", False), (32, "Vh", False), ("w", "Th", False), ("w", "Vh", False),
                                  ("w", "tile", False)), 0, "",
        "trl 1.16.0 trainer/utils.py add_fused_lm_head (_CHUNKED_LOGPROB_CHUNK_SIZE 32768), kernels/"
        "chunked_logprob.py ChunkedLogProbFunction (TOKEN_CHUNK_SIZE 4096)",
        "the code (Triton on CUDA; its CPU fallback folds whole fp32 tiles, so a CPU run is not the GPU's)"),
}
LOSS_NAMES = {"chunked": "torchtune's chunked cross entropy", "liger": "Liger's fused linear cross entropy",
              "cut": "cut-cross-entropy", "torchtitan-chunked": "torchtitan's chunked loss",
              "compiled": "a compiled loss", "compiled-fp32": "a compiled loss over fp32 logits (torchtune)",
              "flash-ce": "flash-attn's cross entropy, in-place backward (verl's log-probs)",
              "flash-ce-fp32": "flash-attn's cross entropy over fp32 logits (OpenRLHF's log-probs)",
              "trl-fused": "TRL's fused LM head (chunked log-probs)",
              "rowwise": "row-by-row fp32 log-softmax (verl without flash-attn)"}
LOSS_CHOICES = ("auto", "chunked", "liger", "cut", "torchtitan-chunked", "compiled", "compiled-fp32", "flash-ce",
                "flash-ce-fp32", "trl-fused", "rowwise")
TILE_TOKENS, TILE_COLUMNS = 4096, 32768     # trl kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, trainer/utils.py


def loss_row(workload) -> LossRow:
    if workload.loss == "compiled-fp32":
        return LOSSES["compiled, fp32 logits"]
    if workload.loss == "flash-ce-fp32":
        return LOSSES["flash-ce, fp32 logits"]
    if workload.loss == "chunked" and workload.compile:
        return LOSSES["chunked, compiled"]          # torchtune's compile: True compiles each chunk's loss too
    if workload.loss != "auto":
        return LOSSES[workload.loss]
    if workload.implementation == "megatron":
        return LOSSES["megatron, fused" if workload.loss_fusion else "megatron"]
    if workload.layout.tp > 1 and workload.layout.loss_parallel:
        return LOSSES["huggingface, loss parallel"]
    versions = workload.finetune.versions
    if applies(versions, MASKED_COPY, family_of(workload.arch)):
        return LOSSES["huggingface, transformers < 4.46"]           # the mask's index copies at any batch size
    if model_upcasts_logits(workload):
        return LOSSES["huggingface, transformers < 4.46" + ("" if workload.micro_batch > 1 else ", one sequence")]
    if applies(versions, "shifted logits copy") and workload.micro_batch > 1:
        return LOSSES["huggingface, transformers < 4.49"]
    return LOSSES["huggingface"]


# The parts a loop's references keep (step/peak.py names them, timeline.py replays them as one lump)
HELD = "model output held by the loop"      # Workload.holds_output / holds_graph: held_output_bytes
GRAPH = "graph held by the loop (bitsandbytes inputs)"     # activations.graph_held, while the loop keeps the loss
PREVIOUS = "last step's logits and graph, held by the loop"  # Workload.holds_graph: into the next forward
# Under full recompute, backward's two moments (the loss's transients with the head's saved tensors; the last
# block rebuilt) are summed in the peak, but only the larger is live at once: the smaller is this part, in
# max_memory_reserved and nvidia-smi, not in max_memory_allocated (step/peak.py _split_moments)
CACHED_MOMENT = "smaller backward moment (cached, not live)"


def returned_logits_bytes(workload, shape) -> int:
    """The logits the model returns, which a loop may keep: Hugging Face's with its own loss (fp32 where
    transformers < 4.46 upcast them in the model, else the logits' own width), the chunked loss's list of logit
    chunks (torchtune's and LitGPT's heads run in chunks) in their own width; none where the loss takes the head's
    input instead (fused and Megatron losses)."""
    if not shape.logits_elements:
        return 0
    if workload.loss == "chunked":
        return bytes_of(shape.logits_elements, shape.act_bits)
    if workload.loss != "auto" or workload.implementation != "huggingface":
        return 0
    upcast = model_upcasts_logits(workload)
    return bytes_of(shape.logits_elements, 32 if upcast else shape.act_bits)


# versions.py rows under which the model's forward replaces its logits by their fp32 upcast (and returns those):
# transformers < 4.46 for every model, and the vision families that kept their own loss longer
MASKED_COPY = "Gemma 3 logits upcast and masked copy"
UPCAST_ROWS = ("logits upcast in the model", "Qwen-VL logits upcast in the model", MASKED_COPY)


def model_upcasts_logits(workload) -> bool:
    versions, family = workload.finetune.versions, family_of(workload.arch)
    return any(applies(versions, key, family) for key in UPCAST_ROWS)


def held_output_bytes(workload, shape) -> int:
    """The logits a loop that keeps the model's output (holds_output) or its last loss (holds_graph) holds through
    backward and the optimizer step: the tensor the model returns (returned_logits_bytes). CPU, transformers 5.24
    Llama + peft, with and without recompute: 2 bytes per T x V more at backward's peak and after it, bf16
    (tests/test_held_output.py)."""
    return returned_logits_bytes(workload, shape) if workload.holds_output or workload.holds_graph else 0


def liger_chunk_rows(tokens: int, vocab: int, hidden: int) -> int:
    """Liger's chunk rows: next_power_of_2(ceil(BT / ceil(V / H))), at most BT."""
    rows = -(-tokens // -(-vocab // hidden))
    return min(1 << (rows - 1).bit_length(), tokens)


def extents(workload, tokens: int) -> Dict[str, int]:
    vocab, hidden, n = workload.vocab_columns, workload.arch.hidden, workload.loss_chunks
    return {"TV": tokens * vocab, "TV/n": -(-tokens // n) * vocab, "Th": tokens * hidden, "Vh": vocab * hidden,
            "cV": liger_chunk_rows(tokens, vocab, hidden) * vocab,
            "tile": min(tokens, TILE_TOKENS) * min(vocab, TILE_COLUMNS)}


def loss_tensors(workload, shape, grad_dtype: str = "bf16") -> Dict[str, Tuple[int, ...]]:
    """The loss's transients at each phase on the last stage (none elsewhere), one size per tensor in the row's
    order (the allocator's model replays them as tensors: timeline.py)."""
    if not shape.logits_elements:
        return {"forward": (), "backward": ()}
    w, row = shape.act_bits, loss_row(workload)
    size = extents(workload, shape.logits_elements // workload.vocab_columns)
    width = {"w": w, "g": DTYPE_BITS[grad_dtype]}
    return {phase: tuple(bytes_of(size[over], width.get(bits, bits)) for bits, over, narrow in terms
                         if not narrow or w != 32)
            for phase, terms in (("forward", row.forward), ("backward", row.backward))}


def loss_transients(workload, shape, grad_dtype: str = "bf16") -> Dict[str, int]:
    """The loss's transients at each phase on the last stage, summed (loss_tensors)."""
    return {phase: sum(sizes) for phase, sizes in loss_tensors(workload, shape, grad_dtype).items()}
