"""No uncaught error on any upload (issue 38): hostile files to each uploader end in a message on the visitor's
page, never an exception (AppTest's at.exception is Streamlit's "This app has encountered an error" page). The
inputs are the kinds the attack pass found: binary, deep nesting, huge integers, an empty file, a wrong format."""

import pytest

from tests.app_helpers import alerts, run_app
from tests.test_app_imports import uploader

HOSTILE = {
    "binary": bytes(range(256)) * 8,
    "empty": b"",
    "NUL bytes": b"\x00" * 1000,
    "a UTF-8 BOM and JSON": b"\xef\xbb\xbf{}",
    "deep JSON nesting": b"[" * 100_000,
    "deep YAML nesting": b"a: " + b"[" * 50_000,
    "4,000-digit integer": b'{"train_micro_batch_size_per_gpu": ' + b"9" * 4_000 + b"}",
    "lone surrogate escape": b'{"model_type": "\\ud800", "zero_optimization": {"stage": "\\udfff"}}',
    "a list at the top": b"[1, 2, 3]",
    "verl nnodes 10^9": b"python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=8 trainer.nnodes=1000000000",
    # issue 38's crashes: 5,000-digit integers in YAML or TOML, hex integers, a float GPU count, a list for a
    # dtype, OpenRLHF's --zero_stage 2.0, and text times 10^9 (a gigabyte: the worker's memory limit stops it)
    "5,000 digits in YAML": b"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: " + b"9" * 5_000 +
                            b"\n  gradient_accumulation_steps: " + b"9" * 5_000 + b"\nnum_processes: " + b"9" * 5_000,
    "5,000 digits in TOML": b"[training]\nlocal_batch_size = " + b"9" * 5_000 + b"\nseq_len = " + b"9" * 5_000,
    "hex integers": b"[training]\nlocal_batch_size = 0xff\n[parallelism]\ntensor_parallel_degree = 0x2\n",
    "verl float GPUs": b"trainer:\n  n_gpus_per_node: 8.5\n  nnodes: 1\nactor_rollout_ref:\n  actor:\n"
                       b"    ppo_micro_batch_size_per_gpu: 2\n",
    "a list for a dtype": b"actor_rollout_ref:\n  actor:\n    fsdp_config:\n      model_dtype: [1, 2]\n"
                          b"      param_dtype: [bf16]\n",
    "OpenRLHF --zero_stage 2.0": b"deepspeed --module openrlhf.cli.train_ppo_ray --pretrain x --zero_stage 2.0",
    "text times 10^9": b"python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=x trainer.nnodes=1000000000",
}
UPLOADERS = (("Hugging Face config.json", "config.json", "sec_load"),
             ("Training config", "ds_config.json", "sec_load"),
             ("Training config", "accelerate.yaml", "sec_load"),
             ("Training config", "torchtitan.toml", "sec_load"),
             ("verl / TRL / OpenRLHF config", "run.sh", "sec_rl"))


@pytest.mark.parametrize("label, name, section", UPLOADERS, ids=[u[1] for u in UPLOADERS])
def test_every_hostile_file_ends_in_a_message(label, name, section):
    at = run_app({"model": "llama-3-8b"}, sections=[section])
    for kind, data in HOSTILE.items():
        uploader(at, label).upload(name, data, "application/octet-stream")
        at.run()
        assert not at.exception, (kind, at.exception)
        said = alerts(at, "error") + alerts(at, "success")
        assert said, kind
        assert not any("Traceback" in a for a in said), kind


@pytest.mark.parametrize("kind, said", [("verl float GPUs", "trainer.n_gpus_per_node: got the number 8.5"),
                                        ("OpenRLHF --zero_stage 2.0", "zero_stage: got the number 2.0")])
def test_a_decimal_count_in_an_rl_file_is_refused_by_name(kind, said):
    at = run_app({"model": "llama-3-8b"}, sections=["sec_rl"])
    uploader(at, "verl / TRL / OpenRLHF config").upload("run.sh", HOSTILE[kind], "application/octet-stream")
    at.run()
    assert not at.exception
    assert any(said in a and "refused" in a for a in alerts(at, "error")), alerts(at, "error")
