"""The ledger's verdict cases (tools/validation_verdicts.py, validation/verdicts.json; issue 31): reported
out-of-memory or ran outcomes against the report's own verdict. The figures in docs/validation.md are checked by
tests/test_validation_ledger.py (--check); here, the cases' form and the rule that reads them."""

import pytest

from tools.validation_verdicts import OUTCOMES, evaluate_verdict, load_verdicts, summarise_verdicts

CASES = load_verdicts()


def test_every_case_is_sourced_quoted_and_expressed():
    assert len(CASES) >= 12 and len({c["id"] for c in CASES}) == len(CASES)
    for c in CASES:
        assert c["outcome"] in OUTCOMES, c["id"]
        assert c["source"]["url"].startswith("https://"), c["id"]
        assert c["quoted"].strip() and c["assumptions"], c["id"]
        assert c["stage"] in (0, 1, 2, 3) and c["argv"][0].startswith("--"), c["id"]
    assert {c["outcome"] for c in CASES} == set(OUTCOMES)


def _case(outcome, gpu):
    return {"id": "T", "outcome": outcome, "stage": 0,
            "argv": ["--model", "llama-3.2-1b", "--gpus", "1", "--gpu", gpu, "--micro-batch", "1", "--seq-len",
                     "1024", "--recompute", "full", "--attention", "flash"]}


@pytest.mark.parametrize("outcome, gpu, agrees, dangerous", [
    ("ran", "H100-SXM-80GB", True, False), ("oom", "H100-SXM-80GB", False, True),
    ("oom", "T4-16GB", True, False), ("ran", "T4-16GB", False, False)])
def test_the_verdict_is_the_reports_fits_at_the_stage(outcome, gpu, agrees, dangerous):
    # Llama-3.2-1B full training in fp32-master mixed precision: ~20 GB, over a T4's 15 GiB, well under an H100's
    got = evaluate_verdict(_case(outcome, gpu))
    assert got["fits"] == (gpu == "H100-SXM-80GB")
    assert (got["agrees"], got["dangerous"]) == (agrees, dangerous)
    assert got["band_bytes"][0] <= got["peak_bytes"] <= got["band_bytes"][1]


def test_the_summary_counts_agreements_and_the_unsafe_side():
    rows = [{**_case(o, g), "id": f"T{i}", "result": evaluate_verdict(_case(o, g))}
            for i, (o, g) in enumerate([("ran", "H100-SXM-80GB"), ("oom", "H100-SXM-80GB"), ("oom", "T4-16GB")])]
    s = summarise_verdicts(rows)
    assert (s["expressed"], s["agree"], s["oom"], s["ran"]) == (3, 2, 2, 1)
    assert s["dangerous"] == s["disagree"] == ["T1"]
    with pytest.raises(ValueError, match="outcome"):
        evaluate_verdict({**_case("ran", "T4-16GB"), "outcome": "maybe"})
