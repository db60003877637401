"""Time one full model-state report (target: median under 50 microseconds) next to the seed's own loop, the
peak solvers (target: each under 5 ms), the full report under a 3D layout (target: 2 ms) and the search over every
layout of 4,096 GPUs (target: 100 ms). Reports are cached per distinct input; every timed call starts uncached.

Run: python benchmarks/model_states.py   (prints a table; no assertion: speed targets live here, not in tests)
"""

import platform
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zerocalc import Scenario  # noqa: E402
from zerocalc.states.zero import model_states
from zerocalc.model.inventory import param_count  # noqa: E402
from zerocalc.model.finetune import FineTune  # noqa: E402
from zerocalc.model.presets import MODEL_PRESETS  # noqa: E402
from zerocalc.layout import Layout  # noqa: E402
from zerocalc.parallel.search import search_layouts  # noqa: E402
from zerocalc.parallel.ranks import peaks  # noqa: E402
from zerocalc.output.report import full_report  # noqa: E402
from zerocalc.answers.solve import lowest_stage, max_micro_batch, min_workers  # noqa: E402
from zerocalc.step.workload import Workload  # noqa: E402

_ARCH = MODEL_PRESETS["llama-3-70b"][0]
_SC = Scenario(params=param_count(_ARCH), workers=64, param_dtype="bf16", grad_dtype="bf16")
_WL = Workload(_ARCH, micro_batch=2, seq_len=4096)
_SMALL = MODEL_PRESETS["gpt2"][0]
_SC_SMALL = Scenario(params=param_count(_SMALL), workers=8)
_WL_SMALL = Workload(_SMALL, seq_len=1024, gpu="B200-180GB")
_SC_3D = Scenario.from_convention("megatron", params=param_count(_ARCH), workers=8)
_WL_3D = Workload(_ARCH, micro_batch=2, seq_len=4096,
                  layout=Layout(tp=8, pp=4, sequence_parallel=True, micro_batches=16))
_SC_4096 = Scenario.from_convention("megatron", params=param_count(_ARCH), workers=4096)
_V3 = MODEL_PRESETS["deepseek-v3"][0]
_SC_V3 = Scenario.from_convention("megatron", params=param_count(_V3), workers=64)
_WL_V3 = Workload(_V3, seq_len=4096, layout=Layout(ep=64))
_L8 = MODEL_PRESETS["llama-3-8b"][0]
_SC_QLORA = Scenario.from_convention("pure-bf16", params=param_count(_L8), workers=8)
_WL_QLORA = Workload(_L8, seq_len=2048, finetune=FineTune(mode="qlora", lora_rank=16, lora_targets=("all-linear",)))


def _zerocalc_caches():
    """Every lru_cache in the core's modules (reports, activations, holdings, one-copy sums...)."""
    return [f for name, module in sorted(sys.modules.items()) if name.split(".")[0] == "zerocalc"
            for f in vars(module).values() if callable(getattr(f, "cache_clear", None))]


def uncached(fn):
    """fn with every cache in the core emptied first, so each call computes from scratch."""
    def run():
        for cached in _zerocalc_caches():
            cached.cache_clear()
        return fn()
    return run


def layout_cases() -> dict:
    """name -> (callable, target in ms): shared with benchmarks/run.py."""
    return {
        "full report, 3D layout (llama-3-70b, dp 8 x tp 8 x pp 4, SP, 16 micro-batches)":
            (uncached(lambda: full_report(_SC_3D, _WL_3D)), 2.0),
        "layout search, every layout of 4,096 GPUs (llama-3-70b)":
            (uncached(lambda: search_layouts(_SC_4096, _WL)), 100.0),
        "full report, DeepSeek-V3, ep 64 (64 GPUs)":
            (uncached(lambda: full_report(_SC_V3, _WL_V3)), 2.0),
        "full report, QLoRA r16 all-linear (llama-3-8b, 8 GPUs; with the plain-base comparison)":
            (uncached(lambda: full_report(_SC_QLORA, _WL_QLORA)), 2.0),
    }


def seed_loop():
    # The seed's example (../shared/seeds/000), verbatim in logic: floats, three categories, four stages.
    parameters, workers = 1_000_000_000, 4
    bytes_per_parameter = {"parameters": 2, "gradients": 2, "optimizer": 4 + 4 + 4}
    partitioned = {0: set(), 1: {"optimizer"}, 2: {"optimizer", "gradients"},
                   3: {"optimizer", "gradients", "parameters"}}
    totals = []
    for stage in range(4):
        parts = {}
        for name, width in bytes_per_parameter.items():
            divisor = workers if name in partitioned[stage] else 1
            parts[name] = parameters * width / divisor / 1_000_000_000
        totals.append(sum(parts.values()))
    return totals


def measure(fn, repeat=15, number=2000):
    runs = [t / number * 1e6 for t in timeit.repeat(fn, repeat=repeat, number=number)]
    return statistics.median(runs), min(runs), max(runs)


def main():
    cases = {
        "seed loop (1B, 4 workers, floats)": seed_loop,
        "model_states: seed scenario": lambda s=Scenario(params=10**9, workers=4): model_states(s),
        "model_states: deepspeed, 70B, 1024 workers, offload": lambda s=Scenario.from_convention(
            "deepspeed", params=70 * 10**9, workers=1024, offload_optimizer="cpu"): model_states(s),
        "model_states: adam-8bit, hybrid shard": lambda s=Scenario(
            params=7 * 10**9, workers=512, shard_group=8, optimizer="adam-8bit"): model_states(s),
        "Scenario + model_states (uncached ledger)": lambda: model_states(
            Scenario(params=10**9, workers=4, factored_dim=1 + (id(object()) % 10**6), optimizer="adafactor")),
    }
    solver_cases = {
        "peaks, 4 stages (llama-3-70b, 64 x H100)": uncached(lambda: peaks(_SC, _WL)),
        "solver: max micro-batch, 4 stages": uncached(lambda: max_micro_batch(_SC, _WL)),
        "solver: min workers, 4 stages": uncached(lambda: min_workers(_SC, _WL)),
        "solver: lowest stage": uncached(lambda: lowest_stage(_SC, _WL)),
        "solver: max micro-batch (gpt2 on B200: large answers)": uncached(lambda: max_micro_batch(_SC_SMALL,
                                                                                                  _WL_SMALL)),
        "solver: min workers (gpt2 on B200)": uncached(lambda: min_workers(_SC_SMALL, _WL_SMALL)),
    }
    print(f"machine: {platform.machine()}, {platform.processor() or 'unknown cpu'}, "
          f"Python {platform.python_version()}")
    print(f"{'case':55} {'median us':>10} {'min us':>8} {'max us':>8}")
    for name, fn in cases.items():
        med, lo, hi = measure(fn)
        print(f"{name:55} {med:10.2f} {lo:8.2f} {hi:8.2f}")
    print("target: model_states median < 50 us")
    print()
    print(f"{'case':55} {'median ms':>10} {'min ms':>8} {'max ms':>8}")
    for name, fn in solver_cases.items():
        med, lo, hi = measure(fn, repeat=7, number=20)
        print(f"{name:55} {med / 1000:10.3f} {lo / 1000:8.3f} {hi / 1000:8.3f}")
    print("target: each solver median < 5 ms")
    print()
    for name, (fn, target) in layout_cases().items():
        med, lo, hi = measure(fn, repeat=7, number=5)
        print(f"{name:55.55} {med / 1000:10.3f} {lo / 1000:8.3f} {hi / 1000:8.3f}  target < {target:g} ms")


if __name__ == "__main__":
    main()
