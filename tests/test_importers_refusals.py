"""The refusals of issue 38's own cases, and the words they use: a verl script multiplying text by a billion, a
float where a count belongs, a list where a dtype belongs, OpenRLHF's --zero_stage 2.0, 5,000-digit integers in
YAML, TOML and JSON, hex integers; every refusal says what was given in words (zerocalc/values.py describe), never
in Python's (its digit-limit message) nor as quoted text. The fuzz over every key is test_importers_fuzz.py."""

import time
import tracemalloc

import pytest

from zerocalc.frameworks import import_accelerate, import_deepspeed, import_torchtitan
from zerocalc.model.hf_config import architecture_from_config
from zerocalc.rl.configs import read_openrlhf, read_trl, read_verl
from zerocalc.scenario import FieldError
from zerocalc.values import count, describe

HUGE = "9" * 5000
CASE_SECONDS = 1.0


def refusal(importer, text):
    with pytest.raises(FieldError) as err:
        importer(text)
    return err.value


def test_a_verl_script_multiplying_text_by_a_billion_is_refused_fast_and_small():
    script = "python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=x trainer.nnodes=1000000000\n"
    tracemalloc.start()
    start = time.process_time()
    err = refusal(read_verl, script)
    spent, (_, peak) = time.process_time() - start, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert err.field == "trainer.n_gpus_per_node" and "got the text 'x'" in str(err)
    assert spent < CASE_SECONDS and peak < 10 * 2**20          # it grew by 2 GB before (text x 10**9)
    err = refusal(read_verl, "python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=8 trainer.nnodes=10000000\n")
    assert err.field == "trainer.nnodes" and "GPUs in all" in err.allowed


@pytest.mark.parametrize("text, field, given", [
    ("trainer:\n  n_gpus_per_node: 8.5\n", "trainer.n_gpus_per_node", "the number 8.5"),
    ("actor_rollout_ref:\n  rollout:\n    dtype: [bfloat16, float16]\n", "actor_rollout_ref.rollout.dtype",
     "a list of 2 items"),
    ("data:\n  train_batch_size: [64]\n", "data.train_batch_size", "a list of 1 item"),
    ("actor_rollout_ref:\n  rollout:\n    gpu_memory_utilization: .nan\n",
     "actor_rollout_ref.rollout.gpu_memory_utilization", "NaN (not a number)"),
])
def test_verl_values_of_the_wrong_kind_are_refused_by_key_in_words(text, field, given):
    err = refusal(read_verl, text)
    assert err.field == field and f"got {given};" in str(err)


def test_trl_values_of_the_wrong_kind_are_refused_by_key_in_words():
    err = refusal(read_trl, "num_generations: {a: 1}\n")
    assert err.field == "num_generations" and "got a mapping of 1 key;" in str(err)


@pytest.mark.parametrize("flags, field", [("--zero_stage 2.0", "zero_stage"), ("--ds.zero_stage", "ds.zero_stage"),
                                          ("--actor.num_nodes 0x10", "actor.num_nodes")])
def test_openrlhf_counts_are_integers_as_argparse_reads_them(flags, field):
    # train_ppo_ray.py: parser.add_argument("--zero_stage", type=int): int("2.0") and int("0x10") raise
    err = refusal(read_openrlhf, flags)
    assert err.field == field
    assert "decimal" in err.allowed if "0x" in flags else "0, 1, 2 or 3" in err.allowed


HUGE_FILES = [
    (import_accelerate, f"distributed_type: MULTI_GPU\nnum_processes: {HUGE}\n", 2),
    (read_verl, f"data:\n  train_batch_size: {HUGE}\n", 2),
    (read_trl, f"num_generations: {HUGE}\n", 1),
    (import_torchtitan, f"[training]\nlocal_batch_size = {HUGE}\n", 2),
    (import_deepspeed, f'{{"train_batch_size": {HUGE}}}', 1),
    (architecture_from_config, f'{{"model_type": "llama", "hidden_size": {HUGE}}}', 1),
    (read_verl, f"python3 -m verl.trainer.main_ppo data.train_batch_size={HUGE}\n", None),
    (read_openrlhf, f"--rollout.batch_size {HUGE}", None),
]


@pytest.mark.parametrize("importer, text, line", HUGE_FILES)
def test_a_5000_digit_integer_is_named_in_words_not_pythons(importer, text, line):
    err = refusal(importer, text)
    message = str(err)
    assert "an integer of 5,000 digits" in message and "4300" not in message and "Exceeds" not in message
    assert "'an integer" not in message                     # described, not quoted as if it were text
    if line is not None:                                     # the loaders' refusal, where the number stands
        assert err.field == "config" and err.line == line


def test_hex_integers_read_as_their_format_reads_them():
    # YAML 1.1 (PyYAML) and TOML read unquoted 0x10 as the integer 16: a count of 16, as the framework reads it
    assert import_accelerate("distributed_type: MULTI_GPU\nnum_processes: 0x10\n").layout["gpus"] == 16
    titan = import_torchtitan("[parallelism]\ntensor_parallel_degree = 0x2\ndata_parallel_shard_degree = 4\n")
    assert titan.layout["tp"] == 2
    # as text it is never a number, not even where pydantic reads "16" (DeepSpeed's lax int refuses "0x10" too)
    err = refusal(import_deepspeed, '{"train_micro_batch_size_per_gpu": "0x10"}')
    assert err.field == "train_micro_batch_size_per_gpu" or "decimal" in err.allowed


DESCRIBED = [
    (10**5000, "an integer of 5,001 digits"), (10**29, "the integer 1" + "0" * 29), (10**30, "an integer of 31 digits"), (8.5, "the number 8.5"),
    ("x", "the text 'x'"), ("", "empty text"), ([1, 2], "a list of 2 items"), ({"a": 1}, "a mapping of 1 key"),
    (float("nan"), "NaN (not a number)"), (float("-inf"), "minus infinity"), (True, "the boolean true"),
    (None, "null"),
]


@pytest.mark.parametrize("value, words", DESCRIBED, ids=[w[:20] for _, w in DESCRIBED])
def test_values_are_described_truthfully(value, words):
    assert describe(value) == words
    with pytest.raises(FieldError) as err:
        count("k", value, 1, 8)
    assert str(err.value).startswith(f"k: got {words};")
