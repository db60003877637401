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
    assert dict(at.query_params)["recompute"] == "full"


def test_selective_under_flash_says_it_changes_nothing():
    at = run_app({"model": "llama-3-8b", "recompute": "selective"})
    assert any("under flash it changes nothing" in c.value for c in at.caption)
    eager = run_app({"model": "llama-3-8b", "recompute": "selective", "attention": "eager"})
    assert not any("under flash it changes nothing" in c.value for c in eager.caption)
