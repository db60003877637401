"""The newcomer's tasks again (issue 33, "A newcomer again"), in Chromium, with other files, models and GPUs than the
issue names: each of the issue's defects (items 1-7 of its "Why") is checked on the page as a visitor sees it, and
the CLI's answer beside it where the issue compared them. Prints one line per defect: PASS or FAIL, and the evidence.

    python benchmarks/newcomer.py [--only NAME ...]

It starts its own `streamlit run serve.py` on 127.0.0.1 (tests/e2e/server.py) and drives /usr/bin/chromium with
Playwright. About 3-6 minutes on a loaded 2-core machine."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect, sync_playwright  # noqa: E402

from tests.e2e.server import CHROMIUM, CHROMIUM_ARGS, READY, start, stop  # noqa: E402
from zerocalc.cli.main import run as cli_run  # noqa: E402
from zerocalc.units import format_bytes  # noqa: E402

FRAMEWORKS = ROOT / "tests" / "fixtures" / "frameworks"
GIB = 2**30
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def ready(page, timeout=60_000):
    page.wait_for_selector(READY, timeout=timeout)
    page.wait_for_timeout(300)
    page.wait_for_selector(READY, timeout=timeout)


def open_page(page, base, query=""):
    page.goto(f"{base}/{query}")
    ready(page)
    page.locator("[data-testid=zc-verdict]").first.wait_for(timeout=60_000)


def cards(page) -> dict:
    """{stage or GPU class: (fits, text)} from the verdict block."""
    out = {}
    for card in page.locator("[data-testid=zc-verdict] [data-fits]").all():
        key = card.get_attribute("data-stage") or card.get_attribute("data-gpu")
        out[key] = (card.get_attribute("data-fits") == "true", card.inner_text())
    return out


def answer(page) -> str:
    return page.locator("[data-testid=zc-answer]").first.inner_text()


def query(page) -> dict:
    return {k: v[-1] for k, v in parse_qs(urlsplit(page.url).query).items()}


def view(page, name):
    page.locator("[data-testid=stMain]").get_by_role("radio", name=name, exact=True).click()
    ready(page)


def section(page, pill):
    page.locator("[data-testid=stSidebar]").get_by_role("button", name=pill, exact=True).click()
    ready(page)


def paste(page, text):
    box = page.get_by_label("Measured output", exact=True)
    box.fill(text)
    box.press("Control+Enter")
    ready(page)
    page.wait_for_timeout(1_000)
    ready(page)


def upload(page, path, index=0):
    """A file into the sidebar's n-th uploader of the "Load a config" section; waits for the page's new message."""
    before = page.locator("[data-testid^=zc-alert]").all_inner_texts()
    drop = page.locator("[data-testid=stSidebar] [data-testid=stFileUploaderDropzoneInput]").nth(index)
    drop.wait_for(state="attached")
    drop.set_input_files(str(path))
    ready(page)
    page.wait_for_function("(before) => JSON.stringify(Array.from(document.querySelectorAll('[data-testid^=zc-alert]'))"
                           ".map(e => e.innerText)) !== JSON.stringify(before)", arg=before, timeout=30_000)
    ready(page)


def cli_json(*flags) -> dict:
    return json.loads(cli_run([*flags, "--json"]))


# --- 1. Calibrate follows the checked stage --------------------------------------------------------------------

@check
def calibrate_follows_the_checked_stage(page, base):
    """Qwen2.5-7B on 8 x L40S: the radio follows the sidebar's stage both ways; an OOM pasted from this card, after a
    paste compared at another stage, turns the checked card red."""
    open_page(page, base, "?model=qwen2.5-7b&gpu=L40S-48GB&workers=8&stage=2&view=calibrate")
    radio = page.get_by_role("radiogroup", name="Compare with (the ZeRO stage to check)")
    assert radio.get_by_role("radio", name="ZeRO-2").is_checked(), "radio not at the checked stage 2"
    paste(page, "max_memory_allocated: 20000000000")
    radio.get_by_text("ZeRO-3", exact=True).click()
    ready(page)
    assert query(page).get("stage") in (None, "3"), page.url      # 3 is the page default for 8 workers or set
    stage = "3"
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.10 GiB. GPU 0 has a total capacity of "
           "44.39 GiB of which 1.12 MiB is free. Including non-PyTorch memory, this process has 44.38 GiB memory in "
           "use. Of the allocated memory 40.87 GiB is allocated by PyTorch, and 1.98 GiB is reserved by PyTorch "
           "but unallocated.")
    paste(page, oom)
    fits, text = cards(page)[stage]
    assert not fits, f"ZeRO-{stage} card still green after the OOM: {text}"
    return f"radio followed ZeRO-2 -> ZeRO-3; after the OOM the ZeRO-3 card reads: {text.splitlines()[0]}"


# --- 2. host RAM too small turns the verdict red ---------------------------------------------------------------

@check
def host_ram_too_small_is_red(page, base):
    q = "?model=mistral-7b&gpu=A100-40GB&workers=8&stage=3&offload_optimizer=cpu&offload_params=cpu" \
        "&host_ram_gb=32"
    open_page(page, base, q)
    fits, text = cards(page)["3"]
    said = answer(page)
    assert not fits and "host RAM" in said, said
    core = cli_json("--model", "mistral-7b", "--gpu", "A100-40GB", "--workers", "8", "--check-stage", "3",
                    "--offload-optimizer", "cpu", "--offload-params", "cpu", "--host-ram", "32GB")
    v = core["verdicts"][3]
    assert v["fits"] is False and v["deciding"] == "host RAM per node", v
    return f"ZeRO-3 card red; headline: {said[:160]}...; CLI deciding: {v['deciding']}"


# --- 3. an import after an import gives the fresh page's plan --------------------------------------------------

@check
def import_after_import_is_the_fresh_plan(page, base):
    ds, tt = FRAMEWORKS / "llamafactory_ds_z2_offload_config.json", FRAMEWORKS / "torchtitan_llama3_8b.toml"
    open_page(page, base, "?model=qwen2.5-7b&gpu=RTX-4090-24GB&workers=4")
    section(page, "Load a config")
    upload(page, ds, index=1)
    upload(page, tt, index=1)
    after_two = (query(page), answer(page))
    open_page(page, base, "?model=qwen2.5-7b&gpu=RTX-4090-24GB&workers=4")
    section(page, "Load a config")
    upload(page, tt, index=1)
    fresh = (query(page), answer(page))
    assert after_two == fresh, f"after two imports {after_two[0]} vs fresh {fresh[0]}"
    assert after_two[0].get("model", "").startswith("llama-3"), after_two[0]
    return f"DeepSpeed then torchtitan == torchtitan on a fresh page: {after_two[0]}"


# --- 4. RL: one verdict, real engine fields --------------------------------------------------------------------

@check
def rl_one_verdict(page, base):
    open_page(page, base, "?model=qwen2.5-7b&gpu=A100-80GB&workers=8&view=rl&rl.algorithm=grpo")
    shown = cards(page)
    assert shown and all(not k.isdigit() for k in shown), f"cards {list(shown)} are not the RL plan's"
    text = page.locator("[data-testid=stMain]").inner_text()
    low = re.search(r"Lowest gpu_memory_utilization[^:]*: ([\d.]*\d)", text)
    high = re.search(r"Highest gpu_memory_utilization[^:]*: ([\d.]*\d)", text)
    assert low and high, "the engine's utilization range is not shown"
    section(page, "RL")
    used = page.locator("[data-testid=stSidebar]").get_by_text("In use:", exact=False).first.inner_text()
    assert "gpu_memory_utilization 0.5" in used and "engine TP 2" in used, used
    return f"cards: {list(shown)}; range {low.group(1)}-{high.group(1)}; sidebar: {used}"


# --- 5. the CLI and the page: pipelines fill, QLoRA checkpoints -----------------------------------------------

@check
def cli_equals_page_defaults(page, base):
    said = []
    for flags, q in ((["--model", "mistral-7b", "--gpu", "L40S-48GB", "--workers", "2", "--pp", "2",
                       "--check-stage", "1"], "?model=mistral-7b&gpu=L40S-48GB&workers=2&pp=2&stage=1"),
                     (["--model", "qwen2.5-7b", "--gpu", "RTX-4090-24GB", "--workers", "8", "--finetune", "qlora",
                       "--check-stage", "0"], "?model=qwen2.5-7b&gpu=RTX-4090-24GB&workers=8&finetune=qlora&stage=0")):
        core = cli_json(*flags)
        stage = int(flags[-1])
        peak = format_bytes(core["peak"][stage]["peak_bytes"], "GB")
        open_page(page, base, q)
        assert f"peak {peak}" in answer(page), f"{q}: CLI {peak}, page: {answer(page)}"
        said.append(f"{q[1:]}: {peak} on both")
    return "; ".join(said)


# --- 6. misleading: the OOM's phase, model states as the peak holds them, offload in the header -----------------

@check
def oom_names_the_failing_phase(page, base):
    open_page(page, base, "?model=mistral-7b&gpu=A100-80GB&workers=4&stage=1&view=calibrate")
    oom = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    optimizer.step()\n"
           "  File \"/usr/lib/python3/site-packages/torch/optim/adamw.py\", line 220, in step\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 2.12 GiB is free. Including non-PyTorch memory, this process has 77.02 GiB memory in "
           "use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 1.51 GiB is reserved by PyTorch "
           "but unallocated.")
    paste(page, oom)
    text = page.locator("[data-testid=stMain]").inner_text()
    line = next((s for s in text.splitlines() if "ran out of memory in" in s), "")
    assert "optimizer step" in line, f"the failing phase is not named: {line!r}"
    return line[:300]


@check
def card_model_states_as_the_peak_holds_them(page, base):
    flags = ["--model", "qwen3-8b", "--gpu", "H100-SXM-80GB", "--workers", "8", "--check-stage", "2"]
    core = cli_json(*flags)
    open_page(page, base, "?model=qwen3-8b&workers=8&stage=2")
    said = []
    for p in core["peak"]:
        held = p["phases"][p["peak_phase"]].get("model states")
        if held is None:
            continue
        text = cards(page)[str(p["stage"])][1]
        assert format_bytes(held, "GB") in text, (p["stage"], format_bytes(held, "GB"), text)
        said.append(f"ZeRO-{p['stage']} {format_bytes(held, 'GB')} ({p['peak_phase']})")
    return "cards hold the peak phase's model states: " + ", ".join(said)


@check
def header_mentions_offload(page, base):
    open_page(page, base, "?model=qwen3-8b&gpu=L40S-48GB&workers=4&stage=3&offload_optimizer=cpu")
    head = page.locator("[data-testid=zc-header]").inner_text()
    assert "offload" in head.lower(), head
    return head.replace("\n", " ")[:200]


# --- 7. friction --------------------------------------------------------------------------------------------------

@check
def fixes_that_change_the_job_are_labelled(page, base):
    open_page(page, base, "?model=qwen2.5-7b&gpu=L40S-48GB&workers=8&seq_len=8192&micro_batch=4&stage=2")
    page.get_by_text("What would make", exact=False).first.wait_for(timeout=60_000)
    text = page.locator("[data-testid=stMain]").inner_text()
    start = text.index("What would make")
    fixes = text[start:start + 6000]
    items = [line for line in fixes.splitlines() if "Held:" in line]
    labelled = [i for i, item in enumerate(items) if "Changes the job" in item]
    assert labelled, "no fix labelled as changing the job"
    assert labelled == list(range(len(items) - len(labelled), len(items))), "a job-changing fix before one that keeps it"
    return f"{len(items)} fixes; the last {len(labelled)} labelled 'Changes the job': " + \
        "; ".join(items[i].split(": ")[0] for i in labelled)


@check
def pcie_layout_fixes_say_pcie(page, base):
    """Qwen3-32B on 8 x RTX 4090 (PCIe only), with the layout search on (Layouts and ranks): every layout fix whose
    tp x cp group spans GPUs says it talks over PCIe."""
    open_page(page, base, "?model=qwen3-32b&gpu=RTX-4090-24GB&workers=8&stage=3&seq_len=4096&view=layouts-and-ranks")
    page.get_by_text("Search every tp x pp x cp x dp layout", exact=False).first.click()
    ready(page)
    page.get_by_text("What would make", exact=False).first.wait_for(timeout=120_000)
    text = page.locator("[data-testid=stMain]").inner_text()
    shown = [s for s in text.splitlines() if "Layout dp" in s and not re.search(r"tp 1 x pp \d+ x cp 1\b", s)]
    assert shown, "no layout fix with a tp or cp group offered (nothing to check)"
    assert all("PCIe" in s for s in shown), [s for s in shown if "PCIe" not in s][:1]
    return f"{len(shown)} layout fix(es) with a tp/cp group, each naming PCIe: {shown[0][:250]}"


@check
def labels_point_to_existing_sections(page, base):
    from ui.sidebar.widgets import SECTIONS
    pills = {pill for _, pill, *_ in SECTIONS}
    frameworks = {"Megatron", "DeepSpeed", "FSDP", "ZeRO", "ZeRO-3", "FSDP2", "Hugging", "PyTorch", "Transformer"}
    named = set()
    for path in sorted((ROOT / "ui").rglob("*.py")) + [ROOT / "zerocalc" / "step" / "host.py"]:
        for m in re.finditer(r"\bunder (?:the )?([A-Z][\w-]+)", path.read_text()):
            word = m.group(1).split()[0]
            if word not in frameworks:
                named.add((word, path.name))
    named |= {(m, "page") for m in ("Cluster",) if "under Cluster" in page.content()}
    open_page(page, base, "?model=qwen3-8b&offload_optimizer=cpu")
    text = page.locator("[data-testid=stMain]").inner_text()
    for m in re.finditer(r"\bunder ([A-Z][\w-]+)", text):
        if m.group(1) not in frameworks:
            named.add((m.group(1), "page"))
    missing = sorted(n for n in named if n[0] not in pills)
    assert not missing, f"sections named but not in the sidebar: {missing}"
    return f"'under X' pointers: {sorted(named)}; each X is a sidebar section"


@check
def host_ram_typed_in_gb(page, base):
    open_page(page, base, "?model=qwen3-8b&offload_optimizer=cpu")
    section(page, "Sharding")
    label = page.locator("[data-testid=stSidebar]").get_by_text(re.compile("Host RAM")).first.inner_text()
    assert "GB" in label and "bytes" not in label, label
    return label


@check
def gemma_enter(page, base):
    open_page(page, base, "")
    box = page.locator("[data-testid=stSidebar]").get_by_label("Model (type to search)", exact=True)
    box.click()
    page.keyboard.type("gemma")
    page.wait_for_timeout(500)
    options = page.get_by_role("option").all_inner_texts()
    page.keyboard.press("Enter")
    ready(page)
    return f"'gemma' lists {len(options)} options, first {options[:3]}; Enter picked model={query(page).get('model')}"


@check
def phone_sidebar_toggle_has_a_label(page, base):
    page.set_viewport_size({"width": 400, "height": 800})
    open_page(page, base, "")
    button = page.locator("[data-testid=stExpandSidebarButton] button, [data-testid=stExpandSidebarButton]").first
    button.wait_for(timeout=10_000)
    name = button.get_attribute("aria-label") or button.inner_text() or button.get_attribute("title") or ""
    page.set_viewport_size({"width": 1440, "height": 1800})
    assert name.strip() and name.strip() not in ("»", "keyboard_double_arrow_right"), f"toggle labelled {name!r}"
    return f"toggle labelled {name!r}"


@check
def import_messages_whole(page, base):
    open_page(page, base, "?model=qwen2.5-7b&gpu=A100-40GB&workers=8")
    section(page, "Load a config")
    upload(page, FRAMEWORKS / "realworld" / "fastchat_deepspeed_config_s3.json", index=1)
    text = page.locator("[data-testid=stMain]").inner_text()
    assert not re.search(r"\(\d+ characters\)", text), "a message cut off"
    first = page.locator("[data-testid^=zc-alert]").first.inner_text()
    return f"first message: {first[:200]}"


@check
def compare_one_gpu_one_card(page, base):
    open_page(page, base, "?model=qwen3-8b&gpu=RTX-4090-24GB&workers=1&finetune=qlora")
    shown = cards(page)
    text = answer(page)
    assert len(shown) == 1, f"{len(shown)} cards for one GPU"
    assert "1 data-parallel workers" not in page.locator("[data-testid=stMain]").inner_text()
    view(page, "Compare")
    page.get_by_role("button", name="Pin this view as plan A").click()
    ready(page)
    overlaps = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => {
        const l = p.querySelector('.legend'), t = p.querySelector('.gtitle');
        if (!l || !t) return false; const a = l.getBoundingClientRect(), b = t.getBoundingClientRect();
        return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom; })""")
    assert not any(overlaps), "a legend overlaps its chart's title"
    return f"one card ({text[:80]}...); Compare legends clear of titles: {overlaps}"


@check
def bad_link_warning_above_the_verdict(page, base):
    open_page(page, base, "?model=mistral-7b&workers=lots")
    order = page.evaluate("""() => { const w = document.querySelector('[data-testid^=zc-alert]'),
        v = document.querySelector('[data-testid=zc-verdict]');
        return w && v ? !!(w.compareDocumentPosition(v) & Node.DOCUMENT_POSITION_FOLLOWING) : null; }""")
    assert order is True, f"warning before the verdict: {order}"
    return "the link's warning is drawn above the verdict"


@check
def readme_qlora_example(page, base):
    import subprocess
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/test_readme_examples.py", "-k", "qlora or "
                           "QLoRA or finetune", "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-200:]
    assert done.returncode in (0, 5), last
    return f"tests/test_readme_examples.py (-k qlora): {last}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    chosen = [c for c in CHECKS if not args.only or c.__name__ in args.only]
    proc, base = start("serve.py")
    failed = 0
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for fn in chosen:
                context = browser.new_context(viewport={"width": 1440, "height": 1800})
                page = context.new_page()
                t0 = time.monotonic()
                try:
                    evidence = fn(page, base)
                    print(f"PASS {fn.__name__} ({time.monotonic() - t0:.0f} s): {evidence}", flush=True)
                except (AssertionError, PlaywrightTimeout, StopIteration, KeyError, ValueError) as exc:
                    failed += 1
                    print(f"FAIL {fn.__name__} ({time.monotonic() - t0:.0f} s): {type(exc).__name__}: "
                          f"{str(exc)[:400]}", flush=True)
                context.close()
            browser.close()
    finally:
        stop(proc)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
