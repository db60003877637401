"""Activation offloading and the optimizer step in backward (zerocalc/step/offload.py, optimizer_in_backward.py),
as torchtune 0.6.1 runs them: the rules from its code (training/_activation_offloading.py OffloadActivations,
recipes/full_finetune_single_device.py), checked on the peak and against torchtune's published table
(validation ledger TUNE-14, TUNE-15)."""

import pytest

from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError, Scenario
from zerocalc.step.workload import Workload
from zerocalc.layout import Layout

ARCH = MODEL_PRESETS["llama-3.2-1b"][0]
SCENARIO = Scenario.from_convention("pure-bf16", params=1_235_814_400)


def peak(**changes):
    work = Workload(ARCH, micro_batch=2, seq_len=4096, recompute="full", **changes)
    report = layout_report(SCENARIO, work)
    return report.peaks[0], report.ranks[0].shape


def test_offloading_moves_all_but_two_checkpoint_inputs_to_pinned_host_memory():
    base, base_shape = peak()
    off, shape = peak(activation_offload=True)
    per_block = 2 * 4096 * ARCH.hidden * 2                      # b x s x h bf16: each block's checkpoint input
    assert shape.offloaded == (ARCH.layers - 2) * per_block
    assert base_shape.activation_bytes - shape.activation_bytes == shape.offloaded
    assert shape.host_bytes == ARCH.layers * (1 << (per_block - 1).bit_length())   # pinned blocks: powers of two
    assert off.peak_bytes < base.peak_bytes


def test_offloading_needs_every_block_checkpointed():
    for changes in ({"recompute": "op"}, {"recompute": "full", "recompute_every": 2}, {"recompute": "none"}):
        with pytest.raises(FieldError, match="activation_offload"):
            Workload(ARCH, activation_offload=True, **changes)


def test_the_optimizer_in_backward_frees_the_gradient_set():
    base, shape = peak(grad_lifetime="step")         # a gradient set kept for the whole step, against none
    fused, _ = peak(optimizer_in_backward=True)
    grads = 2 * sum(g.params for g in shape.groups)              # bf16 gradients of every parameter
    one = 2 * shape.largest_layer_params
    parts = fused.phases["backward"]
    assert parts["one gradient (optimizer in backward)"] == one
    assert base.phases["backward"]["model states"] - parts["model states"] == grads
    assert fused.phases["optimizer_step"].get("fp32 gradient copy", 0) == 0


def test_the_optimizer_in_backward_refuses_gradient_accumulation():
    with pytest.raises(FieldError, match="Gradient accumulation is not supported"):
        Workload(ARCH, optimizer_in_backward=True, layout=Layout(micro_batches=4))


def test_the_recipe_reads_in_words():
    from zerocalc.output.report import recipe_text
    work = Workload(ARCH, recompute="full", compile=True, loss="chunked", activation_offload=True,
                    optimizer_in_backward=True)
    assert recipe_text(work) == ("full recompute, torch.compile'd blocks, activations offloaded to the CPU, "
                                 "optimizer step in backward, torchtune's chunked cross entropy (8 chunks)")


def test_a_user_op_policy_is_checked_and_composes_the_named_rules():
    # torch's create_selective_checkpoint_contexts takes any policy function; zerocalc's "save:" spec names the op
    # kinds it saves. torchtitan's rule written as one equals the named policy.
    from zerocalc.step.activations import activations

    def saved(policy):
        return activations(ARCH, 2, 4096, 16, recompute="op", op_policy=policy).per_layer_total

    assert saved("save:mm/2,addmm,attention,collectives") == saved("torchtitan")
    assert saved("save:mm,addmm,attention,collectives") == saved("matmuls")
    assert saved("save:attention") == saved("attention")
    assert saved("save:") < saved("save:attention") < saved("save:mm,attention")
    for bad in ("save:mm,mm/2", "save:mm,mm", "save:conv", "keep:mm", "x" * 200):
        with pytest.raises(FieldError, match="op_policy"):
            Workload(ARCH, recompute="op", op_policy=bad)


def test_host_memory_puts_the_activation_offload_beside_the_offloaded_states_per_node():
    from zerocalc.output.report import full_report

    scenario = Scenario.from_convention("deepspeed", params=1_235_814_400, workers=16, offload_optimizer="cpu")
    work = Workload(ARCH, micro_batch=2, seq_len=4096, recompute="full", activation_offload=True)
    report = full_report(scenario, work, answers=False)
    acts = report["activation_offload_host_bytes"]
    for row, stage in zip(report["host_memory"], report["stages"]):
        assert row["offload_bytes_per_worker"] == stage["cpu_bytes_per_worker"]    # the ledger's cpu bytes
        assert row["per_worker_bytes"] == row["offload_bytes_per_worker"] + acts
        # gpus_per_node 8 of 16, times DeepSpeed's buffer factor (zerocalc/step/host.py); the node needs the
        # larger of that and the start-up's load
        assert row["step_bytes_per_node"] == int(8 * row["per_worker_bytes"] * 1.5)
        assert row["per_node_bytes"] == max(row["step_bytes_per_node"], row["loading_bytes_per_node"])
    assert report["host_memory"][0]["offload_bytes_per_worker"] == 0               # ZeRO-Offload needs stage >= 1
    assert report["host_memory"][2]["offload_bytes_per_worker"] > 0
