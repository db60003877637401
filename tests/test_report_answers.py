"""The report without its answers (what the page's first screen asks for) is the full report less ANSWER_KEYS, key
for key and in the same order; the one-level field dicts equal dataclasses.asdict's."""

from dataclasses import asdict

from hypothesis import given, settings
from hypothesis import strategies as st

from ui.state.convert import from_query, resolve
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.output.report import ANSWER_KEYS, full_report, plain


@settings(max_examples=30, deadline=None)
@given(model=st.sampled_from(["gpt2", "llama-3-8b", "mixtral-8x7b", "deepseek-v3", "params-only"]),
       workers=st.sampled_from(["1", "8", "64"]), tp=st.sampled_from(["1", "2"]), pp=st.sampled_from(["1", "2"]),
       finetune=st.sampled_from(["full", "lora", "qlora"]), buffer_factor=st.sampled_from(["1", "1.5"]))
def test_the_report_without_answers_is_the_full_report_less_them(model, workers, tp, pp, finetune, buffer_factor):
    state, _ = from_query({"model": [model], "workers": [workers], "tp": [tp], "pp": [pp], "finetune": [finetune],
                           "buffer_factor": [buffer_factor], "micro_batches": ["4"]})
    r = resolve(state)
    full = full_report(r.scenario, r.workload, r.state["buffer_factor"])
    light = full_report(r.scenario, r.workload, r.state["buffer_factor"], answers=False)
    assert list(light) == [k for k in full if k not in ANSWER_KEYS]
    assert light == {k: v for k, v in full.items() if k not in ANSWER_KEYS}
    if r.workload is not None:
        assert {"scaling", "deepspeed_estimator", "solve", "fits_on"} <= set(full)
        assert not set(ANSWER_KEYS) & set(light)
        # layouts asks for the solvers: they come back even without the other answers
        assert "layouts" in full_report(r.scenario, r.workload, answers=False, layouts=True)["solve"]


def test_plain_equals_asdict_for_every_record_the_report_flattens():
    for model in MODEL_PRESETS:
        state, _ = from_query({"model": [model], "finetune": ["qlora"], "tp": ["2"]})
        r = resolve(state)
        for record in (r.scenario, r.workload.arch, r.workload.finetune):
            assert plain(record) == asdict(record)
            assert not any(isinstance(v, (list, dict)) for v in plain(record).values())   # nothing mutable shared
        skip = ("arch", "layout", "finetune")
        assert plain(r.workload, skip) == {k: v for k, v in asdict(r.workload).items() if k not in skip}
