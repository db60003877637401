"""The seed documents' figures, reproduced exactly (../shared/seeds/)."""

from zerocalc import Scenario
from zerocalc.states.zero import model_states
from zerocalc.units import format_bytes

GB = 10**9


def per_worker(report):
    return [s.per_worker_total for s in report.stages]


def test_one_billion_on_four_workers_gives_16_7_5p5_4_gb():
    # Seed 000 ("ZeRO's Memory Budget, Byte by Byte"): totals == [16.0, 7.0, 5.5, 4.0] and each printed category.
    report = model_states(Scenario(params=10**9, workers=4))
    assert per_worker(report) == [16 * GB, 7 * GB, 5_500_000_000, 4 * GB]
    printed = {  # stage -> (params, grads, optimizer) in GB, as the seed's recorded CPU output
        0: (2.0, 2.0, 12.0), 1: (2.0, 2.0, 3.0), 2: (2.0, 0.5, 3.0), 3: (0.5, 0.5, 3.0),
    }
    for stage, (p, g, o) in printed.items():
        got = report.stage(stage).per_worker_by_category
        assert (got["parameters"], got["gradients"], got["optimizer"]) == (int(p * GB), int(g * GB), int(o * GB))


def test_cluster_64_gb_unsharded_vs_16_gb_fully_partitioned():
    # Seed 000: "four unsharded workers hold 64 GB of model state ... Fully partitioned ... totals 16 GB".
    report = model_states(Scenario(params=10**9, workers=4))
    assert report.stage(0).cluster_total == 64 * GB
    assert report.stage(3).cluster_total == 16 * GB == report.unique_total
    assert report.stage(3).per_worker_total * 4 == report.stage(0).per_worker_total  # the seed's second assert


def test_four_byte_gradients_change_unsharded_total_and_gradient_saving_exactly():
    # Seed 000: "changing gradients from two to four bytes changes both the unsharded total and the savings
    # attributable to gradient partitioning". Unsharded +2 GB; the stage 1 -> 2 saving grows from 1.5 to 3 GB.
    two = model_states(Scenario(params=10**9, workers=4))
    four = model_states(Scenario(params=10**9, workers=4, grad_dtype="fp32"))
    assert four.stage(0).per_worker_total - two.stage(0).per_worker_total == 2 * GB
    saving = lambda r: r.stage(1).per_worker_total - r.stage(2).per_worker_total  # noqa: E731
    assert saving(two) == 1_500_000_000  # 2 - 2/4
    assert saving(four) == 3 * GB        # 4 - 4/4
    # Only the gradients moved: parameters and optimizer are untouched at every stage.
    for stage in range(4):
        a, b = two.stage(stage).per_worker_by_category, four.stage(stage).per_worker_by_category
        assert a["parameters"] == b["parameters"] and a["optimizer"] == b["optimizer"]
        assert b["gradients"] == 2 * a["gradients"]


def test_7b_needs_112_gb_and_70b_needs_1_12_tb():
    # Seed 002 ("The Memory Anatomy of Training"): 16 Psi bytes; "For a 7B model, that is 112 GB. For a 70B model,
    # 1.12 TB."
    assert model_states(Scenario(params=7 * 10**9)).stage(0).per_worker_total == 112 * GB
    seventy = model_states(Scenario(params=70 * 10**9)).stage(0).per_worker_total
    assert seventy == 1_120 * GB
    assert format_bytes(seventy, "TB") == "1.12 TB"


def test_256_workers_on_7b_hold_28_7_tb_of_which_28_6_tb_redundant():
    # Seed 002: "256 x 112 GB = 28.7 TB of model state, of which 28.7 TB - 112 GB ~ 28.6 TB is pure redundancy."
    stage0 = model_states(Scenario(params=7 * 10**9, workers=256)).stage(0)
    assert stage0.cluster_total == 256 * 112 * GB
    assert stage0.redundant_bytes == 256 * 112 * GB - 112 * GB
    assert format_bytes(stage0.cluster_total, "TB", 1) == "28.7 TB"
    assert format_bytes(stage0.redundant_bytes, "TB", 1) == "28.6 TB"
