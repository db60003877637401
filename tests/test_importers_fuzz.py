"""Hostile values through every config importer (issue 38: "168 of 3,493 hostile key x value cases raise, at 16
places"). Every key an importer's reader knows x every hostile value (huge, negative, float, NaN, text, list,
nested, hex, bool, null), each written into a valid file of that format: the import gives an answer or a named
refusal (a FieldError naming a key of the file, or "config" for the file itself, in a short message), never
another exception, and each case costs well under a second (no string repetition or range over a huge count).

The keys are collected, not listed: each importer reads every fixture (and the small base files below) while the
test records every key its reader asks for (Doc.get / Doc.has for the framework readers, KeyReader for the RL
ones), plus the readers' own tables of keys a block is checked against (DeepSpeed's pydantic fields, torchtitan's
dataclass fields, the config.json families' keys). A key a reader learns tomorrow is fuzzed without a test change.
"""

from __future__ import annotations

import json
import math
import time
import tomllib
from functools import lru_cache
from pathlib import Path
from unittest import mock

import pytest
import yaml

from zerocalc.frameworks import (import_accelerate, import_axolotl, import_deepspeed, import_hf_trainer,
                                 import_litgpt, import_llamafactory, import_swift, import_torchtitan,
                                 import_torchtune)
from zerocalc.frameworks.common import Doc
from zerocalc.frameworks.deepspeed import schema as DS
from zerocalc.frameworks.torchtitan.fields import FIELDS as TITAN_FIELDS
from zerocalc.model.families import FAMILIES
from zerocalc.model.hf_config import CONFIG_KEYS, architecture_from_config
from zerocalc.rl.configs import read_openrlhf, read_trl, read_verl
from zerocalc.rl.configs.common import ImportedRL, KeyReader
from zerocalc.scenario import FieldError

FIX = Path(__file__).resolve().parent / "fixtures"
HUGE = "9" * 5000                  # over Python's 4,300-digit int limit: json / yaml / tomllib raise ValueError
MESSAGE_CHARS = 1500
CASE_SECONDS = 1.0                 # process time per case; a healthy one takes milliseconds
PLACE = "@@VALUE@@"

# name -> how the value is written in (json, yaml, toml, a script's word); None: the format cannot say it
HOSTILE = {
    "huge": (HUGE, HUGE, HUGE, HUGE),
    "1e30": ("1" + "0" * 30,) * 4,
    "negative": ("-1",) * 4,
    "zero": ("0",) * 4,
    "8.5": ("8.5",) * 4,
    "2.0": ("2.0",) * 4,
    "nan": ("NaN", ".nan", "nan", "nan"),
    "inf": ("Infinity", ".inf", "inf", "inf"),
    "text": ('"x"', "x", '"x"', "x"),
    "empty": ('""', "''", '""', "''"),
    "list": ("[1, 2]", "[1, 2]", "[1, 2]", "[1,2]"),
    "nested": ('{"a": 1}', "{a: 1}", "{a = 1}", "{a:1}"),
    "hex": ('"0x10"', "0x10", "0x10", "0x10"),
    "bool": ("true", "true", "true", "true"),
    "null": ("null", "null", None, "null"),
}


# --- writing a value into a file ----------------------------------------------------------------------------
def put(data: dict, path: tuple) -> dict:
    """A copy of data with PLACE at path (sections made, a scalar in the way replaced by a section)."""
    out = json.loads(json.dumps(data))
    node = out
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = PLACE
    return out


def toml_text(data: dict, prefix: tuple = ()) -> str:
    """Tables of scalars as TOML (a test writer: the values come from tomllib, so only its types occur)."""
    lines, tables = [], []
    for key, value in data.items():
        if isinstance(value, dict) and value and not prefix[:0]:
            tables.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {toml_value(value)}")
    out = ("[" + ".".join(json.dumps(p) for p in prefix) + "]\n" if prefix and lines else "") + "\n".join(lines)
    for key, value in tables:
        out += "\n" + toml_text(value, prefix + (key,))
    return out + "\n"


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def write(fmt: str, data: dict, path: tuple, literal: str) -> str:
    doc = put(data, path)
    if fmt == "json":
        return json.dumps(doc, indent=1).replace(json.dumps(PLACE), literal)
    if fmt == "yaml":
        return yaml.safe_dump(doc, sort_keys=False).replace(f"'{PLACE}'", literal)
    return toml_text(doc).replace(json.dumps(PLACE), literal)


# --- the importers, their base files and the keys their readers ask for ---------------------------------------
def _fixtures(folder: str, *suffixes) -> list:
    return sorted(p for p in (FIX / folder).rglob("*") if p.suffix in suffixes)


VERL_BASE = {"algorithm": {"adv_estimator": "gae", "use_kl_in_reward": True},
             "data": {"max_prompt_length": 512, "max_response_length": 512, "train_batch_size": 64},
             "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-7B", "lora_rank": 8, "target_modules": "all-linear",
                                             "enable_gradient_checkpointing": True, "use_remove_padding": True},
                                   "actor": {"use_kl_loss": True, "use_dynamic_bsz": True, "strategy": "fsdp",
                                             "ppo_micro_batch_size_per_gpu": 4, "entropy_coeff": 0.01},
                                   "rollout": {"name": "vllm", "n": 4, "dtype": "bfloat16",
                                               "tensor_model_parallel_size": 2, "gpu_memory_utilization": 0.5},
                                   "ref": {"fsdp_config": {"param_offload": True}}},
             "critic": {"model": {"path": "Qwen/Qwen2.5-7B"}, "use_dynamic_bsz": True},
             "reward_model": {"enable": True, "model": {"path": "Qwen/Qwen2.5-7B"}},
             "trainer": {"n_gpus_per_node": 8, "nnodes": 1}}
TRL_BASE = {"model_name_or_path": "Qwen/Qwen2.5-1.5B", "num_generations": 8, "per_device_train_batch_size": 8,
            "use_vllm": True, "vllm_mode": "colocate", "use_peft": True, "beta": 0.04, "generation_batch_size": 64,
            "model_init_kwargs": {"torch_dtype": "bfloat16"}, "vllm_max_model_length": 2048}
OPENRLHF_BASE = {"actor.model_name_or_path": "meta-llama/Llama-3-8b", "reward.model_name_or_path": "x/rm",
                 "train.colocate_all": True, "vllm.num_engines": 8, "vllm.tensor_parallel_size": 1,
                 "train.dynamic_batch_enable": True, "data.max_len": 2048, "data.prompt_max_len": 1024,
                 "ds.zero_stage": 3, "algo.kl.init_coef": 0.01}


def flags_text(items: dict, key=None, literal=None) -> str:
    words = ["python3 -m openrlhf.cli.train_ppo_ray"]
    for name, value in {**items, **({key: PLACE} if key else {})}.items():
        text = literal if value == PLACE else ("" if value is True else str(value))
        words.append(f"--{name} {text}".rstrip())
    return " \\\n  ".join(words) + "\n"


def verl_script(items: dict, key=None, literal=None) -> str:
    pairs = {**items, **({key: PLACE} if key else {})}
    words = [f"{k}={literal if v == PLACE else json.dumps(v) if isinstance(v, str) else str(v).lower()}"
             for k, v in pairs.items()]
    return "python3 -m verl.trainer.main_ppo \\\n  " + " \\\n  ".join(words) + "\n"


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _frameworks_keys(importer, texts) -> dict:
    """path -> the smallest base (data) whose reading asked for it."""
    asked, found = [], {}
    real_get, real_has = Doc.get, Doc.has

    def get(self, *path, **kw):
        asked.append(path)
        return real_get(self, *path, **kw)

    def has(self, *path):
        asked.append(path)
        return real_has(self, *path)

    for fmt, text, data in sorted(texts, key=lambda t: len(t[1])):
        asked.clear()
        with mock.patch.object(Doc, "get", get), mock.patch.object(Doc, "has", has):
            try:
                importer(text)
            except FieldError:
                continue
        for path in asked:
            if path and all(isinstance(p, str) for p in path):
                found.setdefault(path, (fmt, data))
    return found


def _rl_keys(importer, texts) -> dict:
    asked, found = [], {}
    real = KeyReader.__call__

    def call(self, key, default=None):
        asked.append(key)
        return real(self, key, default)

    for fmt, text, data in sorted(texts, key=lambda t: len(t[1])):
        asked.clear()
        with mock.patch.object(KeyReader, "__call__", call):
            importer(text)
        for key in asked:
            found.setdefault(key, (fmt, data))
    return found


def _load(path: Path):
    text = path.read_text()
    if path.suffix == ".json":
        return "json", text, json.loads(text)
    if path.suffix == ".toml":
        return "toml", text, tomllib.loads(text)
    return "yaml", text, yaml.safe_load(text)


@lru_cache(maxsize=None)
def cases(importer_name: str) -> tuple:
    """(key, fmt, base, writer) for every key the importer's reader knows."""
    if importer_name == "deepspeed":
        texts = [_load(p) for p in _fixtures("frameworks", ".json")]
        found = _frameworks_keys(import_deepspeed, texts)
        base = min((t for t in texts), key=lambda t: len(t[1]))[::2]
        blocks = {("zero_optimization",): {**DS.ZERO_FIELDS, **{a: 0 for _, (a, _, _) in DS.ZERO_FIELDS.items() if a}},
                  ("zero_optimization", "offload_param"): DS.OFFLOAD_PARAM_FIELDS,
                  ("zero_optimization", "offload_optimizer"): DS.OFFLOAD_OPTIMIZER_FIELDS,
                  ("fp16",): DS.FP16_FIELDS, ("bf16",): DS.BF16_FIELDS}
        for prefix, names in blocks.items():
            for name in names:
                found.setdefault(prefix + (name,), base)
        return tuple((path, fmt, data) for path, (fmt, data) in found.items())
    if importer_name == "accelerate":
        texts = [_load(p) for p in _fixtures("frameworks", ".yaml") if "accelerate" in p.read_text()
                 or "distributed_type" in p.read_text()]
        found = _frameworks_keys(import_accelerate, texts)
        return tuple((path, fmt, data) for path, (fmt, data) in found.items())
    if importer_name == "torchtitan":
        texts = [_load(p) for p in _fixtures("frameworks", ".toml")]
        found = _frameworks_keys(import_torchtitan, texts)
        base = min(texts, key=lambda t: len(t[1]))[::2]
        for section, names in TITAN_FIELDS.items():
            for name in names:
                found.setdefault((section, name), base)
        return tuple((path, fmt, data) for path, (fmt, data) in found.items())
    if importer_name in LAUNCHERS:       # the launchers' real files (tests/fixtures/launchers), by name prefix
        texts = [_load(p) for p in _fixtures("launchers", ".yaml", ".yml")
                 if (p.name.split("_", 1)[0] if p.name.split("_", 1)[0] in LAUNCHERS else "hf_trainer")
                 == importer_name]
        found = _frameworks_keys(IMPORTERS[importer_name], texts)
        return tuple((path, fmt, data) for path, (fmt, data) in found.items())
    if importer_name == "verl-yaml":
        found = _rl_keys(read_verl, [("yaml", yaml.safe_dump(VERL_BASE), VERL_BASE)])
        return tuple((tuple(k.split(".")), fmt, data) for k, (fmt, data) in found.items())
    if importer_name == "verl-script":
        scripts = [("script", p.read_text(), None) for p in _fixtures("rl", ".sh") if "verl" in p.name]
        scripts.append(("script", verl_script(_flat(VERL_BASE)), _flat(VERL_BASE)))
        found = _rl_keys(read_verl, scripts)
        return tuple((k, "script", _flat(VERL_BASE)) for k in found)
    if importer_name in ("trl-yaml", "trl-json"):
        fmt = importer_name[4:]
        found = _rl_keys(read_trl, [("yaml", yaml.safe_dump(TRL_BASE), TRL_BASE)] +
                         [_load(p) for p in _fixtures("rl", ".yaml")])
        return tuple(((k,), fmt, TRL_BASE) for k in found)
    if importer_name == "openrlhf":
        found = _rl_keys(read_openrlhf, [("flags", flags_text(OPENRLHF_BASE), OPENRLHF_BASE)] +
                         [("flags", p.read_text(), None) for p in _fixtures("rl", ".sh") if "openrlhf" in p.name])
        return tuple((k, "flags", OPENRLHF_BASE) for k in found)
    if importer_name == "config.json":
        out = []
        for model_type, family in FAMILIES.items():
            base = {"model_type": model_type}
            for key in {k for k in family["keys"].values() if k} | {"n_shared_experts", "layer_types", "model_type"}:
                out.append(((key,), "json", base))
        out += [((key,), "json", {"model_type": "gpt2"}) for key in CONFIG_KEYS["gpt2"].values()]
        out += [(("text_config", key), "json", {"model_type": "gemma3", "text_config": {}})
                for key in FAMILIES["gemma3_text"]["keys"].values() if key]
        return tuple(out)
    raise AssertionError(importer_name)


IMPORTERS = {"deepspeed": import_deepspeed, "accelerate": import_accelerate, "torchtitan": import_torchtitan,
             "llamafactory": import_llamafactory, "hf_trainer": import_hf_trainer, "axolotl": import_axolotl,
             "torchtune": import_torchtune, "litgpt": import_litgpt,
             "swift": import_swift,
             "verl-yaml": read_verl, "verl-script": read_verl, "trl-yaml": read_trl, "trl-json": read_trl,
             "openrlhf": read_openrlhf, "config.json": architecture_from_config}
LAUNCHERS = ("llamafactory", "hf_trainer", "axolotl", "torchtune", "litgpt", "swift")
COLUMN = {"json": 0, "yaml": 1, "toml": 2, "script": 3, "flags": 3}


def case_text(fmt, data, key, literal) -> str:
    if fmt == "script":
        return verl_script(data, key, literal)
    if fmt == "flags":
        return flags_text(data, key, literal)
    return write(fmt, data, key, literal)


COUNT_FLAGS = ("--gpus", "--micro-batch", "--micro-batches", "--lora-rank")


def untyped(result) -> str:
    """What in an answer is not the type it must be ("" when all is): a count flag that is not a decimal count
    (verl's "x" x 8 GPUs was one), a number that is not finite, a stage outside 0-3."""
    if isinstance(result, ImportedRL):
        for flag in COUNT_FLAGS:
            value = result.policy.get(flag)
            if value is not None and not (isinstance(value, str) and value.isdigit() and len(value) <= 12):
                return f"{flag} = {value!r:.60}"
        settings = {**result.settings, **{f"rollout.{k}": v for k, v in result.settings.get("rollout", {}).items()}}
        for key, value in settings.items():
            if isinstance(value, float) and not math.isfinite(value) or isinstance(value, (list, dict)) and \
                    key != "rollout":
                return f"setting {key} = {value!r:.60}"
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
                return f"setting {key}: an integer of {len(str(value))} digits"
        if result.settings.get("policy_stage", 0) not in (0, 1, 2, 3) or \
                isinstance(result.settings.get("policy_stage"), (bool, float)):
            return f"policy_stage = {result.settings['policy_stage']!r}"
    elif hasattr(result, "to_dict"):
        json.dumps(result.to_dict(), allow_nan=False)            # plain, finite, JSON-ready data
    return ""


@lru_cache(maxsize=None)
def base_refusal(name: str, fmt: str, data_json: str) -> str:
    """The field the base file alone is refused on ("" if it imports): such a refusal is not the value's doing."""
    data = json.loads(data_json)
    writers = {"script": verl_script, "flags": flags_text, "json": json.dumps, "yaml": yaml.safe_dump,
               "toml": toml_text}
    text = writers[fmt](data)
    try:
        IMPORTERS[name](text)
    except FieldError as exc:
        return exc.field
    return ""


def run_case(name: str, key, fmt: str, data, literal: str):
    """None when the importer answered or refused by name; else what went wrong, in words."""
    text = case_text(fmt, data, key, literal)
    start = time.process_time()
    try:
        problem = untyped(IMPORTERS[name](text))
        if problem:
            return f"an answer holding {problem}"
    except FieldError as exc:
        message = str(exc)
        dotted = key if isinstance(key, str) else ".".join(key)
        if not exc.field:
            return "a refusal without a field"
        if len(message) >= MESSAGE_CHARS:
            return f"a message of {len(message):,} characters"
        words = {dotted, *dotted.split("."), "config"}
        named = any(w and w in exc.field for w in words) or exc.field.split(".")[-1].strip("[]") in text
        if not named and exc.field != base_refusal(name, fmt, json.dumps(data)):
            return f"a refusal naming {exc.field!r}, not a key of the file"
    except Exception as exc:                        # noqa: BLE001 - what the test is for
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    spent = time.process_time() - start
    if spent > CASE_SECONDS:
        return f"{spent:.2f} s of CPU"
    return None


def failures(name: str, value: str) -> list:
    out = []
    literal = HOSTILE[value][COLUMN[cases(name)[0][1]]]
    if literal is None:
        return out
    for key, fmt, data in cases(name):
        problem = run_case(name, key, fmt, data, literal)
        if problem:
            out.append((key, problem))
    return out


@pytest.mark.parametrize("value", list(HOSTILE))
@pytest.mark.parametrize("name", list(IMPORTERS))
def test_every_known_key_with_a_hostile_value_is_answered_or_refused_by_name(name, value):
    found = failures(name, value)
    assert not found, f"{len(found)} of {len(cases(name))} keys: {found[:8]}"


@pytest.mark.parametrize("name", list(IMPORTERS))
def test_the_keys_are_collected_from_the_readers(name):
    # enough keys that a broken collector (nothing recorded) fails loudly; the readers know more than these
    assert len(cases(name)) >= {"deepspeed": 60, "accelerate": 15, "torchtitan": 40, "config.json": 100,
                                "litgpt": 15}.get(name, 20)

