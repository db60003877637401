"""The worst inputs a visitor can send each surface of a hosted zerocalc, under the page's own limits (1 MB
uploads and pastes, 64-character link values, every field at the end of its range): shared by
tests/test_budgets.py (each must finish within BUDGET_S of one core) and benchmarks/run.py's budget rows.

Each case is (surface, name, a function that runs the surface once and returns what it returned). A case that
raises a FieldError (a refusal naming the field and the bound) counts as answered: a refusal is the point.
"""

from __future__ import annotations

import json
import string

BUDGET_S = 2.0
LIMIT = 999_000                    # just under the 1 MB upload cap


def _keys(n_chars: int, prefix: str = "k", value: str = "1", sep=",", colon=":", quote='"'):
    """As many distinct short keys as fit in about n_chars characters of a mapping."""
    out, size, i = [], 2, 0
    digits = string.digits + string.ascii_lowercase
    while True:
        k, n = "", i
        while True:
            n, r = divmod(n, 36)
            k = digits[r] + k
            if not n:
                break
        item = f"{quote}{prefix}{k}{quote}{colon}{value}"
        if size + len(item) + 1 > n_chars:
            return out
        out.append(item)
        size += len(item) + 1
        i += 1


def _deepspeed():
    from zerocalc.frameworks import import_config
    top = "{" + ",".join(['"zero_optimization":{"stage":2}'] + _keys(LIMIT - 40)) + "}"
    sections = "{" + ",".join(['"zero_optimization":{"stage":2}'] + _keys(LIMIT - 40, value='{"a":1}')) + "}"
    deep = '{"zero_optimization":' * 100_000 + "1" + "}" * 100_000
    long_string = json.dumps({"zero_optimization": {"stage": "x" * (LIMIT - 40)}})
    big_int = '{"train_micro_batch_size_per_gpu": ' + "9" * 4_000 + ', "zero_optimization": {"reduce_bucket_size": ' \
        + "9" * 4_000 + '}, "gradient_clipping": ' + "9" * 4_000 + "}"
    comments = "{" + "/*" + "c" * (LIMIT - 10) + "*/}"
    return {name: (lambda t=text: import_config("deepspeed", t, {"hidden_size": 4096})) for name, text in (
        ("95,000 unknown top-level keys", top), ("unknown sections", sections), ("100,000 levels deep", deep[:LIMIT]),
        ("a 1 MB string value", long_string), ("a 4,000-digit integer", big_int), ("1 MB of comments", comments))}


def _accelerate():
    from zerocalc.frameworks import import_config
    keys = "\n".join(_keys(250_000, quote="", colon=": ")) + "\n"
    return {name: (lambda t=text: import_config("accelerate", t)) for name, text in (
        ("10,000 values", keys), ("256 KB scalar", "distributed_type: " + "x" * 262_000),
        ("flow nesting", "a: " + "[" * 50_000), ("1 MB of blank lines", "\n" * LIMIT),
        ("an alias bomb", "a: &a [x]\nb: &b [*a, *a, *a, *a]\n" * 10), ("1 MB of JSON keys", "{" + ",".join(
            _keys(LIMIT)) + "}"))}


def _torchtitan():
    from zerocalc.frameworks import import_config
    keys = "[training]\n" + "\n".join(_keys(LIMIT - 20, quote="", colon=" = ")) + "\n"
    sections = "".join(f"[s{i}]\na = 1\n" for i in range(LIMIT // 16))
    return {name: (lambda t=text: import_config("torchtitan", t)) for name, text in (
        ("keys of one section", keys), ("60,000 sections", sections[:LIMIT]),
        ("inline nesting", "a = " + "[" * 100_000), ("a long string", 'x = "' + "y" * (LIMIT - 10) + '"'))}


def _hf_config():
    from zerocalc.model.hf_config import architecture_from_config, parse_config

    def run(text):
        return architecture_from_config(parse_config(text))
    base = {"model_type": "llama", "num_hidden_layers": 10_000, "hidden_size": 8192, "num_attention_heads": 64,
            "intermediate_size": 28672, "vocab_size": 128256}
    return {name: (lambda t=text: run(t)) for name, text in (
        ("a 990,000-character model_type", json.dumps({"model_type": "x" * 990_000})),
        ("95,000 unknown keys", "{" + ",".join(['"model_type":"llama"'] + _keys(LIMIT - 30)) + "}"),
        ("mlp_only_layers of 150,000 entries", json.dumps({**base, "model_type": "qwen2_moe", "num_experts": 64,
                                                          "mlp_only_layers": list(range(150_000))})[:LIMIT] + "]}"),
        ("deep nesting", "[" * 200_000), ("largest legal model", json.dumps(base)),
        ("4,000-digit integers", '{"model_type": "llama", "num_hidden_layers": ' + "9" * 4_000 +
         ', "attention_dropout": ' + "9" * 4_000 + "}"))}


def _calibration():
    from zerocalc.answers.calibrate.parse import parse
    rows = {
        "nvidia-smi rows": "memory.used [MiB], memory.total [MiB]\n" + "81000 MiB, 81559 MiB\n" * 45_000,
        "plain labels": "max_memory_allocated: 123456789\n" * 30_000,
        "DeepSpeed lines": "[see_memory_usage] MA 1.23 GB  Max_MA 2.34 GB  CA 3.45 GB  Max_CA 4 GB\n" * 13_000,
        "garbage": ("MA Max_MA CA GB GiB | : = 1.5 7 {'a': 1} \n" * 25_000),
        "memory_stats keys": "{" + ",".join(_keys(LIMIT, prefix="allocated_bytes.all.peak")) + "}",
        "one long line": "x" * LIMIT,
    }
    return {name: (lambda t=text[:LIMIT]: parse(t)) for name, text in rows.items()}


def _link():
    from ui.state.convert import from_query, resolve
    keys = {f"k{i}": "1" for i in range(20_000)}
    every = {"workers": "10000000", "tp": "4096", "pp": "4096", "cp": "4096", "seq_len": "100000000"}
    return {"20,000 unknown keys": lambda: resolve(from_query(keys)[0]),
            "every field at its limit": lambda: resolve(from_query({"model": "custom", **every})[0]),
            "64-character values everywhere": lambda: from_query({k: "9" * 64 for k in
                                                                 ("workers", "layers", "hidden", "seq_len", "ffn")})}


def _reports():
    """The core's answers for the largest states a link can hold (the app asks them of every state)."""
    from ui.state.convert import from_query, resolve
    from zerocalc.answers.fixes import fixes
    from zerocalc.answers.ranges import ranges, ranges_dict
    from zerocalc.output.report import full_report
    from zerocalc.step.formulas import formulas_for

    def answers(query, layouts=False):
        def run():
            r = resolve(from_query(query)[0])
            report = full_report(r.scenario, r.workload, r.state["buffer_factor"], layouts=layouts)
            if r.workload is not None:
                ranges_dict(ranges(r.scenario, r.workload))
                formulas_for(r.scenario, r.workload)
                fixes(r.scenario, r.workload, r.state["stage"], layouts=layouts)
            return report
        return run
    huge = dict(model="custom", layers="4096", hidden="65536", heads="1024", kv_heads="1024", ffn="65536",
                seq_len="8192")
    return {
        "the issue's link, searched": answers({**huge, "workers": "1048576", "tp": "1024", "pp": "4096",
                                               "cp": "4096"}, layouts=True),
        "4,096 layers, 2^17 GPUs, searched": answers({**huge, "workers": "131072"}, layouts=True),
        "1,024 layers, 2^20 GPUs, searched": answers({"model": "custom", "layers": "1024", "hidden": "8192",
                                                      "heads": "64", "kv_heads": "64", "ffn": "32768",
                                                      "workers": "1048576", "seq_len": "65536"}, layouts=True),
        "4,096 layers, 2^20 GPUs of 1,024 a node, searched": answers({**huge, "workers": "1048576",
                                                                      "gpus_per_node": "1024"}, layouts=True),
        "Qwen3-235B, 2^20 GPUs, searched": answers({"model": "qwen3-235b-a22b", "workers": "1048576",
                                                    "seq_len": "65536"}, layouts=True),
        "Qwen3-235B, 4,096 GPUs, searched": answers({"model": "qwen3-235b-a22b", "workers": "4096",
                                                     "seq_len": "65536"}, layouts=True),
        "10,000 layers interleaved": answers({**huge, "layers": "10000", "pp": "100", "vpp": "100",
                                              "schedule": "interleaved", "micro_batches": "100000",
                                              "workers": "1000"}),
        "100,000 experts": answers({"model": "custom", "experts": "100000", "experts_per_token": "8",
                                    "expert_ffn": "2048", "workers": "64", "ep": "64"}),
        "10^7 workers, 10^8 tokens": answers({"model": "llama-3-70b", "workers": "10000000", "seq_len": "100000000",
                                              "recompute": "full"}),
    }


def _rl_uploads():
    """The RL section's uploader (ui/imports/rl.py): each reader on the largest file the page takes."""
    from zerocalc.rl.configs import READERS, guess_format
    verl_script = "python3 -m verl.trainer.main_ppo " + " ".join(_keys(LIMIT - 40, prefix="actor_rollout_ref.k",
                                                                         quote="", colon="=", sep=" "))
    verl_yaml = "actor_rollout_ref:\n" + "\n".join("  " + k for k in _keys(200_000, quote="", colon=": "))
    trl_json = "{" + ",".join(_keys(LIMIT)) + "}"
    openrlhf = "python3 -m openrlhf.cli.train_ppo_ray " + " ".join(f"--flag{i} {i}" for i in range(55_000))
    quotes = "python3 -m verl.trainer.main_ppo " + "'" * (LIMIT - 40)
    nested = "actor_rollout_ref:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 400))

    def read(text):
        def run():
            data = text.encode()
            return READERS[guess_format(data)](data)
        return run
    return {"verl: 1 MB of overrides": read(verl_script), "verl: 200 KB of YAML keys": read(verl_yaml),
            "TRL: 1 MB of JSON keys": read(trl_json), "OpenRLHF: 55,000 flags": read(openrlhf),
            "verl: 1 MB of quotes": read(quotes), "verl: 400 levels of YAML": read(nested)}


def _rl():
    """The RL view's report (plan, phases, solvers) for the largest plans a link can describe."""
    from ui.state.rl import from_query as rl_query, settings_of
    from ui.state.convert import from_query, resolve
    from zerocalc.rl.build import build_plan
    from zerocalc.rl.report import rl_report

    def plan(query, rl):
        def run():
            r = resolve(from_query(query)[0])
            return rl_report(build_plan(r.scenario, r.workload, settings_of(rl_query(rl)[0], r.state["stage"])))
        return run
    every = {"algorithm": "ppo", "reference": "same", "reward": "same", "critic": "same",
             "response_length": "10000000", "prompt_length": "10000000", "group_size": "100000",
             "prompts_per_step": "10000000"}
    return {
        "Qwen3-235B on 2^20 GPUs, every model": plan({"model": "qwen3-235b-a22b", "workers": "1048576"}, every),
        "DeepSeek-V3, 2^16 x tp 8 x ep 8, split": plan({"model": "deepseek-v3", "workers": "65536", "tp": "8",
                                                        "ep": "8"}, {"placement": "split", "rollout_gpus": "524288",
                                                                     "rollout_tp": "1024"}),
        "4,096 layers on 2^20 GPUs": plan({"model": "custom", "layers": "4096", "hidden": "65536", "heads": "1024",
                                           "kv_heads": "1024", "ffn": "65536", "workers": "1048576"}, every),
    }


def cases():
    """(surface, name, run) for every worst case."""
    out = []
    for surface, make in (("DeepSpeed upload", _deepspeed), ("accelerate upload", _accelerate),
                          ("torchtitan upload", _torchtitan), ("config.json upload", _hf_config),
                          ("calibration paste", _calibration), ("link", _link), ("report", _reports),
                          ("RL view", _rl), ("RL config upload", _rl_uploads)):
        out += [(surface, name, run) for name, run in make().items()]
    return out
