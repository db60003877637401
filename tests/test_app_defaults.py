"""Honest defaults (issue 22): a pipeline fills with micro-batches and the verdict says how much of the step it
idles; one GPU checks ZeRO-0; QLoRA with peft's kbit preparation checkpoints every block (peft
prepare_model_for_kbit_training, use_gradient_checkpointing=True by default); selective recompute under flash
attention says it changes nothing."""

from tests.app_helpers import answer_text, run_app


def test_raising_pp_fills_the_pipeline_and_the_verdict_names_the_idle_share():
    at = run_app({"model": "llama-3-70b", "workers": "4", "tp": "8"}, sections=["sec_parallel", "sec_step"])
    at.number_input(key="pp").set_value(2).run()
    assert at.number_input(key="micro_batches").value == 8           # 4 x pp: the bubble under a fifth
    assert "The pipeline idles 11% of the step (8 micro-batches per step over 2 stages)" in answer_text(at)
    at.number_input(key="micro_batches").set_value(1).run()          # a user's own choice is kept
    text = answer_text(at)
    assert "idles 50% of the step" in text and "fewer micro-batches than stages" in text


def test_one_gpu_checks_zero_0():
    at = run_app({"model": "llama-3-8b"})
    at.number_input(key="workers").set_value(1).run()
    assert at.button_group(key="stage").value == 0
    assert "Checking ZeRO-0" in answer_text(at)


def test_qlora_checkpoints_every_block_as_peft_prepares_it():
    at = run_app({"model": "llama-3-8b", "workers": "1"}, sections=["sec_finetune"])
    at.selectbox(key="finetune").set_value("qlora").run()
    assert at.button_group(key="recompute").value == "full"
    assert "recompute" not in dict(at.query_params)       # what the defaults policy implies: the link omits it


def test_selective_under_flash_says_it_changes_nothing():
    at = run_app({"model": "llama-3-8b", "recompute": "selective"})
    assert any("under flash it changes nothing" in c.value for c in at.caption)
    eager = run_app({"model": "llama-3-8b", "recompute": "selective", "attention": "eager"})
    assert not any("under flash it changes nothing" in c.value for c in eager.caption)


def test_the_host_ram_a_node_needs_is_shown_and_checked_against_the_nodes_ram():
    # One set of numbers per card: the model states on the card are the GPU's; the offloaded rest is host RAM.
    from tests.app_helpers import core_report, verdict_cards

    query = {"model": "llama-3-8b", "workers": "16", "stage": "3", "offload_optimizer": "cpu", "offload_params": "cpu",
             "convention": "deepspeed"}
    at = run_app(query)
    report = core_report(query)
    row = report["host_memory"][3]
    # the step's offloads of the node's 8 GPUs with DeepSpeed's buffer factor 1.5, or the start-up if larger
    assert row["step_bytes_per_node"] == int(8 * row["per_worker_bytes"] * 1.5) > 0 and row["fits_host"] is None
    assert row["per_node_bytes"] == max(row["step_bytes_per_node"], row["loading_bytes_per_node"])
    assert any("Host RAM per node for ZeRO-3" in c.value and "Give the node's RAM" in c.value for c in at.caption)
    card = next(c for c in verdict_cards(at) if c[0] == 3)
    peak = report["peak"][3]
    gpu_states = peak["phases"][peak["peak_phase"]].get("model states", 0)        # what the peak holds, on the GPU
    assert gpu_states < report["stages"][3]["per_worker_total_bytes"]
    from zerocalc.units import format_bytes
    assert f"model states {format_bytes(gpu_states, 'GB')} per worker in the peak" in card[2]
    small = run_app({**query, "host_memory_bytes": str(row["per_node_bytes"] - 1)})
    assert any("more than" in e.value and "host memory" in e.value for e in small.error)
    big = run_app({**query, "host_memory_bytes": str(row["per_node_bytes"])})
    assert any("within the" in c.value for c in big.caption) and not big.error
