"""Units: GB = 10^9 bytes, GiB = 2^30 bytes (DESIGN.md section 2); counts parse exactly."""

import pytest

from zerocalc.units import auto_unit, format_bytes, parse_count


def test_gb_and_gib_are_labelled_for_what_they_are():
    assert format_bytes(16 * 10**9, "GB") == "16.00 GB"
    assert format_bytes(16 * 10**9, "GiB") == "14.90 GiB"
    assert format_bytes(2**30, "GiB") == "1.00 GiB"
    assert format_bytes(2**30, "GB") == "1.07 GB"
    assert format_bytes(80 * 2**30, "binary") == "80.00 GiB"
    assert format_bytes(1536, "binary") == "1.50 KiB" and format_bytes(999, "decimal") == "999 B"


def test_automatic_units_and_huge_values_without_scientific_notation():
    assert auto_unit(28_672 * 10**9) == "TB"
    assert auto_unit(28_672 * 10**9, "binary") == "TiB"
    assert format_bytes(16 * 10**18, "decimal") == "16.00 EB"
    assert format_bytes(10**24, "TB", 0) == "1,000,000,000,000 TB"
    assert "e" not in format_bytes(10**30, "GB").lower().replace("gb", "")


def test_rounding_is_half_even_on_exact_values():
    assert format_bytes(1_250_000_000, "GB", 1) == "1.2 GB"
    assert format_bytes(1_350_000_000, "GB", 1) == "1.4 GB"


@pytest.mark.parametrize("text, value", [
    ("1e9", 10**9), ("7B", 7 * 10**9), ("1.5T", 1_500_000_000_000), ("350M", 350_000_000),
    ("124439808", 124_439_808), ("7b", 7 * 10**9), ("1_000", 1000), ("1.5e3K", 1_500_000), (" 2K ", 2000),
])
def test_parse_count_accepts_the_documented_spellings(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.5", "1e400", "nan", "inf", "-inf", "7X", "1e-3", "0x10", "B"])
def test_parse_count_rejects_with_a_message(text):
    with pytest.raises(ValueError) as err:
        parse_count(text)
    assert "not a" in str(err.value)
