"""Slurm time limits: exactly the forms sbatch documents, every field in range."""

from __future__ import annotations

import math

import pytest

from orchestrator.slurm import times


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("90", 90 * 60),
        ("5:30", 5 * 60 + 30),
        ("120:00", 120 * 60),  # MM:SS: minutes lead, so any number of them
        ("01:30:00", 90 * 60),
        ("48:00:00", 48 * 3600),  # HH:MM:SS: hours lead
        ("2-00", 2 * 86400),
        ("1-12", 86400 + 12 * 3600),
        ("1-12:30", 86400 + 12 * 3600 + 30 * 60),
        ("2-00:00:00", 2 * 86400),
        ("0-23:59:59", 86399),
        ("40-00:00:00", 40 * 86400),
    ],
)
def test_slurm_forms(text, expected):
    assert times.seconds(text) == expected
    assert times.is_valid(text) and times.is_finite(text)


@pytest.mark.parametrize("text", ["UNLIMITED", "INFINITE", "unlimited", "Infinite"])
def test_no_limit_words(text):
    assert times.seconds(text) == math.inf
    assert times.is_valid(text) and not times.is_finite(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("25:99:99", "minutes must be below 60"),
        ("1:60:00", "minutes must be below 60"),
        ("1:00:60", "seconds must be below 60"),
        ("10:60", "seconds must be below 60"),
        ("1-24", "hours after a day must be below 24"),
        ("1-24:00:00", "hours after a day must be below 24"),
        ("1-00:60", "minutes must be below 60"),
        ("1-00:00:60", "seconds must be below 60"),
    ],
)
def test_out_of_range_fields_are_rejected(text, why):
    with pytest.raises(ValueError, match=why) as info:
        times.seconds(text)
    assert repr(text) in str(info.value) and times.FORMS_HELP in str(info.value)
    assert not times.is_valid(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        " 10",
        "10 ",
        "2 hours",
        "1:2:3:4",
        "1-2-3",
        "-1",
        "1.5",
        "1e3",
        "1-",
        ":30",
        "1:",
        "\n10",
        "10\n",
        "١٠",  # Arabic-Indic digits: Python's int() reads them, Slurm does not
        "１０",  # fullwidth digits
        "None",
        "INFINITE ",
    ],
)
def test_malformed_is_rejected_naming_the_input_and_the_forms(text):
    with pytest.raises(ValueError) as info:
        times.seconds(text)
    message = str(info.value)
    assert repr(text) in message and "MM:SS" in message and "D-HH:MM:SS" in message
    assert not times.is_valid(text)


def test_huge_numbers_are_rejected_without_reading_thousands_of_digits():
    for text in ["9" * 5000, "9" * 11, "99999999999:00"]:
        with pytest.raises(ValueError, match="is not a Slurm time") as info:
            times.seconds(text)
        assert len(str(info.value)) < 300  # the message quotes a long input cut short
    with pytest.raises(ValueError, match="longer than Slurm can hold"):
        times.seconds("9999999999")


def test_long_input_is_shown_cut_short():
    with pytest.raises(ValueError) as info:
        times.seconds("x" * 3000)
    assert "(3000 characters)" in str(info.value) and len(str(info.value)) < 300


def test_hms():
    assert times.hms(None) == "-"
    assert times.hms(3723) == "1:02:03"
