"""One stage's peak at another sequence length (parallel/ranks.py peaks_at_seq_len with `stage`, what
answers/solve.py max_seq_len asks per candidate) is the same StagePeak as the four-stage tuple's, for layouts whose
ranks differ (pipeline stages) and under the caching allocator's model (fragmentation_percent None), so the
solver's answers are unchanged by asking one stage at a time."""

import pytest

from zerocalc import Scenario
from zerocalc.layout import Layout
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report, peaks_at_seq_len
from zerocalc.step.workload import Workload


@pytest.mark.parametrize("percent", [None, 5])
@pytest.mark.parametrize("layout", [Layout(), Layout(tp=2, pp=2, micro_batches=4)])
def test_one_stage_is_the_tuples_stage(percent, layout):
    arch = MODEL_PRESETS["llama-3.2-1b"][0]
    workers = 8 // (layout.tp * layout.pp)
    scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=workers)
    base = layout_report(scenario, Workload(arch, layout=layout, fragmentation_percent=percent))
    assert len(base.ranks) >= (2 if layout.pp > 1 else 1)
    for seq in (512, 3000, 8192):
        every = peaks_at_seq_len(base, seq)
        assert tuple(peaks_at_seq_len(base, seq, s) for s in range(4)) == every
