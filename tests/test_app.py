"""The first app: AppTest drives the sidebar and reads the table the core computed."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def run_app():
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert not at.exception
    return at


def column(at, name):
    return list(at.dataframe[0].value[name])


def test_default_view_shows_four_stages_for_7b_on_8_workers():
    at = run_app()
    # 7B x 16 bytes = 112 GB unsharded (seed 002); stage 3 over 8 workers = 14 GB.
    assert column(at, "Per worker (GB)") == ["112.00", "38.50", "26.25", "14.00"]


def test_changing_inputs_changes_the_numbers():
    at = run_app()
    at.text_input(key="params").set_value("1B").run()
    at.number_input(key="workers").set_value(4).run()
    assert column(at, "Per worker (GB)") == ["16.00", "7.00", "5.50", "4.00"]  # seed 000
    at.radio(key="units").set_value("GiB").run()
    assert column(at, "Per worker (GiB)")[0] == "14.90"
    at.selectbox(key="convention").set_value("megatron").run()
    assert column(at, "Per worker (GiB)")[0] == "16.76"  # 18 bytes x 1e9 / 2^30


def test_bad_params_show_a_message_not_a_traceback():
    at = run_app()
    at.text_input(key="params").set_value("lots").run()
    assert not at.exception
    assert "not a count" in at.error[0].value
