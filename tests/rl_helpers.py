"""Plans the RL tests share: small real presets, so each builds in milliseconds."""

from zerocalc.model.finetune import FineTune
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.rl.plan import RLModel, RLPlan
from zerocalc.rl.rollout import Rollout
from zerocalc.scenario import Scenario
from zerocalc.step.workload import Workload


def model(name="qwen2.5-0.5b", workers=8, stage=3, seq_len=1536, micro_batch=2, trains=True, convention="fsdp2",
          gpu="H100-SXM-80GB", **flags):
    arch = MODEL_PRESETS[name][0]
    overrides = {} if trains else {"param_dtype": "bf16"}
    scenario = Scenario.from_convention(convention, params=param_count(arch), workers=workers, **overrides)
    finetune = flags.pop("finetune", FineTune() if trains else FineTune(mode="freeze"))
    workload = Workload(arch, micro_batch=micro_batch, seq_len=seq_len, gpu=gpu, finetune=finetune,
                        recompute=flags.pop("recompute", "full" if trains else "none"))
    return RLModel(scenario, workload, stage, **flags)


def grpo(**changes):
    plan = dict(algorithm="grpo", policy=model(), reference=model(trains=False, param_offload=True),
                rollout=Rollout(gpu_memory_utilization=0.5, tp=1), prompt_length=512, response_length=1024)
    plan.update(changes)
    return RLPlan(**plan)
