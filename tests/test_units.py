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


def test_a_share_says_100_percent_only_of_the_whole():
    # issue 22: a fix that fits was shown at "100.0% of 80.00 GB"
    from zerocalc.units import percent_text
    assert percent_text(79_968, 80_000) == "99.96%" and percent_text(80_032, 80_000) == "100.04%"
    assert percent_text(80_000, 80_000) == "100.0%" and percent_text(40_000, 80_000) == "50.0%"
    assert percent_text(79_600, 80_000, 0) == "99.5%" and percent_text(87_200, 80_000, 0) == "109%"
    assert percent_text(79_999_999_999, 80_000_000_000) == "99.999999%"
