"""Issue 22 in a real browser: the link opens the view it was shared from (with the sweep chart and the checked
stage's edge), the total-GPU input sets dp, the plan's own out-of-memory turns its card red, and a plan no single
change fixes still gets advice."""

from playwright.sync_api import expect

from tests.e2e.conftest import wait_ready
from tests.e2e.test_browser import core_report, open_app, open_tab, query_dict, view_button
from tests.test_calibrate_verdict import oom
from ui.state.convert import from_query, resolve
from zerocalc.answers.sweep import sweep


def test_a_shared_view_opens_on_its_view_with_the_sweep_one_click_away(page, server):
    query = "?model=llama-3-8b&workers=8&seq_len=8192&view=peak-and-step"
    open_app(page, server, query, charts=False)
    expect(view_button(page, "Peak and step")).to_be_checked()
    open_tab(page, "Sweep: the peak along one input", "[data-testid=stExpander] summary")   # one chart a view (issue 36)
    r = resolve(from_query({k: v for k, v in query_dict(query).items() if k != "view"})[0])
    edge = sweep(r.scenario, r.workload, "seq_len", 3)["edge"]["3"]
    expect(page.get_by_text(f"ZeRO-3 fits up to sequence length {edge:,}", exact=False)).to_be_visible(
        timeout=30_000)
    expect(page.locator(".js-plotly-plot .gtitle", has_text="Peak against sequence length")).to_be_attached()
    page.locator("[data-testid=stMain]").get_by_role("radio", name="micro-batch", exact=True).click()
    wait_ready(page)
    expect(page.locator(".js-plotly-plot .gtitle", has_text="Peak against micro-batch")).to_be_attached(
        timeout=30_000)
    assert "view=peak-and-step" in page.url
    assert page.console_errors == []


def test_total_gpus_sets_the_workers(page, server):
    open_app(page, server, "?model=llama-3-70b&workers=4&tp=8&pp=2&micro_batches=8", charts=False)
    box = page.get_by_role("spinbutton", name="Total GPUs (sets dp)", exact=True)
    expect(box).to_have_value("64")
    box.fill("128")
    box.press("Enter")
    wait_ready(page)
    expect(page.get_by_role("spinbutton", name="Data-parallel workers (dp)", exact=True)).to_have_value(
        "8", timeout=30_000)
    expect(page.get_by_text("world 128 GPUs = dp 8 x tp 8 x pp 2", exact=False)).to_be_visible()
    assert "workers=" not in page.url            # 8 is the default, so the link leaves it out


def test_the_plans_own_out_of_memory_turns_its_card_red(page, server):
    query = "?model=llama-3-8b&workers=8&seq_len=4096&stage=1"
    report = core_report(query_dict(query))
    peak = report["peak"][1]
    assert peak["fits"]                          # green from the estimate alone
    tensors = sum(v for k, v in peak["phases"][peak["peak_phase"]].items()
                  if k not in ("allocator reserve", "CUDA context", "NCCL buffers"))
    open_app(page, server, query, charts=False)
    open_tab(page, "Calibrate")
    box = page.get_by_role("textbox", name="Measured output")
    box.fill(oom(allocated=tensors / 2**30 - 0.5, request=2.0, unallocated=1.5))
    box.press("Control+Enter")
    wait_ready(page)
    expect(page.locator("[data-testid=zc-verdict]", has_text="does not fit (measured)")).to_be_visible(
        timeout=30_000)
    assert page.console_errors == []


def test_advice_when_no_single_change_is_enough(page, server):
    open_app(page, server, "?model=llama-3-70b&workers=1&gpu=A100-40GB&stage=0", charts=False)
    expect(page.get_by_text("no single change is enough", exact=False)).to_be_visible(timeout=30_000)
    expect(page.get_by_role("button", name="Apply").first).to_be_visible()
