"""Host RAM per node is typed in GB on the page (issue 33: "Host RAM is typed in bytes"); the core counts bytes
(GB = 10^9 bytes), and a link written before the field was renamed (host_memory_bytes, in bytes) still opens the
same plan."""

from tests.app_helpers import run_app, warnings_shown
from ui.sidebar.labels import LABELS
from ui.state.convert import canonical, from_query, resolve, to_query


def test_the_field_is_in_gb_and_the_core_gets_bytes():
    assert "GB" in LABELS["host_ram_gb"] and "bytes" not in LABELS["host_ram_gb"]
    state, warnings = from_query({"model": "mistral-7b", "offload_optimizer": "cpu", "host_ram_gb": "512"})
    assert warnings == [] and resolve(state).workload.host_memory_bytes == 512 * 10**9
    assert to_query(canonical(state))["host_ram_gb"] == "512.0"


def test_an_old_link_in_bytes_opens_the_same_plan():
    old, _ = from_query({"model": "mistral-7b", "offload_optimizer": "cpu", "host_memory_bytes": "256000000000"})
    new, _ = from_query({"model": "mistral-7b", "offload_optimizer": "cpu", "host_ram_gb": "256"})
    assert old == new
    _, warnings = from_query({"host_memory_bytes": "lots"})
    assert len(warnings) == 1 and "host_ram_gb='lots' is not allowed (a number from 0 to" in warnings[0]


def test_the_page_judges_the_ram_typed_in_gb():
    query = {"model": "mistral-7b", "workers": "8", "stage": "3", "offload_optimizer": "cpu", "host_ram_gb": "32"}
    at = run_app(query, sections=("sec_cluster",))
    assert at.number_input(key="host_ram_gb").value == 32.0
    assert "does not fit: host RAM per node" in " ".join(h.proto.body for h in at.get("html"))
    assert not warnings_shown(at)
