"""Invariants of the model-state accounting, over random valid scenarios (hypothesis)."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from zerocalc import Scenario, build_ledger
from zerocalc.states.zero import model_states
from zerocalc.scenario import DTYPE_FIELDS, OPTIONAL_DTYPE_FIELDS
from zerocalc.tables import CONVENTIONS, DTYPE_BITS, OFFLOAD_TARGETS, OPTIMIZERS

dtypes = st.sampled_from(sorted(DTYPE_BITS))


@st.composite
def scenarios(draw):
    workers = draw(st.integers(1, 4096))
    divisors = [d for d in range(1, min(workers, 4096) + 1) if workers % d == 0]
    return Scenario(
        params=draw(st.integers(1, 10**15)),
        workers=workers,
        shard_group=draw(st.one_of(st.none(), st.sampled_from(divisors))),
        param_dtype=draw(dtypes), grad_dtype=draw(dtypes),
        master_dtype=draw(st.one_of(st.none(), dtypes)), grad_accum_dtype=draw(st.one_of(st.none(), dtypes)),
        optimizer=draw(st.sampled_from(sorted(OPTIMIZERS))), optimizer_dtype=draw(dtypes),
        comm_dtype=draw(st.one_of(st.none(), dtypes)),
        offload_optimizer=draw(st.sampled_from(OFFLOAD_TARGETS)), offload_params=draw(st.sampled_from(OFFLOAD_TARGETS)),
        gpus_per_node=draw(st.integers(1, 16)), factored_dim=draw(st.integers(1, 10**5)),
        convention=draw(st.sampled_from(sorted(CONVENTIONS))),
    )


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_per_worker_totals_never_grow_with_the_stage(s):
    totals = [r.per_worker_total for r in model_states(s).stages]
    assert totals == sorted(totals, reverse=True)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_cluster_total_is_workers_times_per_worker_and_redundancy_is_never_negative(s):
    for r in model_states(s).stages:
        assert r.cluster_total == s.workers * r.per_worker_total
        assert r.redundant_bytes >= 0 and r.redundancy_factor >= 1
        assert r.gpu_bytes + r.cpu_bytes + r.nvme_bytes == r.per_worker_total
        assert sum(r.per_worker_by_category.values()) == r.per_worker_total == sum(r.per_worker_by_entry)


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.integers(1, 10**12))
def test_stage_3_over_all_workers_with_divisible_params_holds_exactly_one_copy(s, k):
    # Divisible so that every entry's element count (params x num / den) splits evenly across the workers.
    dens = 1
    for e in build_ledger(s):
        dens = dens * e.den
    # x 8 so that sub-byte dtypes (4-bit) fill whole bytes in every shard.
    s = replace(s, shard_group=None, params=s.workers * dens * 8 * (k % 1000 + 1))
    report = model_states(s)
    assert report.stage(3).cluster_total == report.unique_total
    assert report.stage(3).redundant_bytes == 0


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.sampled_from(DTYPE_FIELDS), dtypes)
def test_changing_one_dtype_changes_only_the_entries_that_use_it(s, field, new):
    old = getattr(s, field)
    if old is None and field in OPTIONAL_DTYPE_FIELDS or old == new:
        return  # adding an optional entry changes the ledger's shape; covered in test_ledger
    before, after = model_states(s), model_states(replace(s, **{field: new}))
    assert [e.name for e in before.ledger] == [e.name for e in after.ledger]
    for i, (old_entry, new_entry) in enumerate(zip(before.ledger, after.ledger)):
        if old_entry.source == field:
            assert new_entry.dtype == new  # the entry follows its field ...
            for a in after.stages:       # ... and its bytes are its elements at the new width, rounded up
                assert a.per_worker_by_entry[i] in (new_entry.nbytes(new_entry.elements(s.params)),
                                                    new_entry.nbytes(-(-new_entry.elements(s.params) // s.group)))
        else:
            assert new_entry == old_entry
            assert all(a.per_worker_by_entry[i] == b.per_worker_by_entry[i]
                       for a, b in zip(before.stages, after.stages))
