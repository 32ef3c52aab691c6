"""A stranger's profile with a crafted warp timeline (format.WARP_TIMELINE) or crafted warp
statistics: proton-viewer --html leaves the timeline out with a one-line note and writes a
safe page, --warps gives a one-line error; never a traceback, markup from the file, or a page
that loops over a billion warps."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from proton.format import WARP_CYCLES, WARP_EVENTS, WARP_TIMELINE
from proton.viewer import reader
from proton.viewer.cli import viewer
from proton.viewer.timelines import MAX_EVENTS

GOOD = {"device": 0, "clock_khz": 1_755_000, "warps": 2, "scopes": ["k", "k > load"],
        "sm": [3, 3], "cta": [0, 0], "warp": [0, 1], "scope": [0, 1], "start_ns": [0.0, 5.5],
        "cycles": [100, 40]}
SCRIPT = "<img src=x onerror=alert(1)>"


def profile(tmp_path, timeline, scope_metrics=None) -> str:
    """ROOT > step > kern (with `timeline` as its frame key) > scope (with `scope_metrics`)."""
    scope = {"frame": {"name": "scope", "type": "function"}, "metrics": scope_metrics or {},
             "children": []}
    kern = {"frame": {"name": "kern", "type": "function", WARP_TIMELINE: timeline},
            "metrics": {"time (ns)": 1000, "count": 1, "device_id": "0", "device_type": "CUDA"},
            "children": [scope] if scope_metrics else []}
    step = {"frame": {"name": "step", "type": "function"}, "metrics": {}, "children": [kern]}
    root = {"frame": {"name": "ROOT", "type": "function"}, "metrics": {"time (ns)": 0},
            "children": [step]}
    path = tmp_path / "p.hatchet"
    path.write_text(json.dumps([root, {}]))
    return str(path)


def test_a_well_formed_timeline_is_kept_with_its_known_keys_only(tmp_path):
    (t,) = reader.load(profile(tmp_path, json.dumps({**GOOD, "junk": "x" * 1000}))).timelines
    assert t == {**GOOD, "path": ["step", "kern"]}


BAD = {
    "markup in a column": ({**GOOD, "cta": [SCRIPT, 0]}, "cta holds a value"),
    "a billion warps": ({**GOOD, "warps": 10**9}, "warps must be a whole number from 1 to 64"),
    "a warp past warps": ({**GOOD, "warp": [0, 2]}, "index is out of range"),
    "a scope past scopes": ({**GOOD, "scope": [0, 7]}, "index is out of range"),
    "text columns": ({**GOOD, "sm": "ab", "cta": "ab", "warp": "ab", "scope": "ab",
                      "start_ns": "ab", "cycles": "ab"}, "must be lists of one length"),
    "booleans": ({**GOOD, "warp": [True, False]}, "warp holds a value"),
    "scopes not text": ({**GOOD, "scopes": [{"a": 1}, 2]}, "scopes must be a list"),
    "too many events": ({**GOOD, **{k: [0] * (MAX_EVENTS + 1) for k in
                                    ("sm", "cta", "warp", "scope", "start_ns", "cycles")}},
                        f"more than the {MAX_EVENTS:,} drawn"),
    "no clock": ({k: v for k, v in GOOD.items() if k != "clock_khz"}, "no clock_khz"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_crafted_timeline_is_left_out_with_a_one_line_note(tmp_path, case):
    timeline, why = BAD[case]
    prof = reader.load(profile(tmp_path, json.dumps(timeline)))
    assert prof.timelines == []
    (note,) = prof.notes
    assert "warp timeline of 'kern' is left out" in note and why in note and "\n" not in note


@pytest.mark.parametrize("text", [
    json.dumps(GOOD).replace("5.5", "NaN"), json.dumps(GOOD).replace("100", "Infinity"),
    "[" * 900_000 + "]" * 900_000, "not json", "[1, 2]"])  # deep, within the memory bound
def test_non_finite_deep_or_non_object_timelines_are_left_out(tmp_path, text):
    prof = reader.load(profile(tmp_path, text))
    assert prof.timelines == [] and "left out" in prof.notes[0]


def test_the_page_of_a_crafted_timeline_carries_no_markup_and_no_warps_tab_data(tmp_path):
    path = profile(tmp_path, json.dumps({**GOOD, "cta": [SCRIPT, 0]}))
    page = tmp_path / "p.html"
    result = CliRunner().invoke(viewer, ["--html", str(page), path])
    assert result.exit_code == 0, result.output
    assert "left out" in result.output
    text = page.read_text()
    assert "onerror" not in text and '"warps":[]' in text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "abc"])
def test_warps_on_crafted_statistics_is_a_one_line_error(tmp_path, value):
    stats = {WARP_EVENTS: 3, **{k: 10 for k in WARP_CYCLES}}
    key = WARP_EVENTS if isinstance(value, float) else WARP_CYCLES[0]
    path = profile(tmp_path, json.dumps(GOOD), {**stats, key: value})
    result = CliRunner().invoke(viewer, ["--warps", path])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: scope 'scope' has ") and "not a finite number" in line


def test_warps_with_another_view_is_a_one_line_error(tmp_path):
    path = profile(tmp_path, json.dumps(GOOD))
    result = CliRunner().invoke(viewer, ["--warps", "--html", str(tmp_path / "p.html"), path])
    assert result.exit_code == 2 and "give one" in result.output
    assert not (tmp_path / "p.html").exists()
