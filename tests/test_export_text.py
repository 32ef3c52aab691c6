"""The JSON and CSV views' text, written by hand for speed, against the standard library's."""
import csv
import io
import json
import math

from proton.viewer.export import to_csv, to_json

ROWS = [
    {"path": ["ROOT"], "depth": 0, "time (ms)": 443552.307208, "tflop16/s": None},
    {"path": ["ROOT", 'a "quoted" name', "é/ü \\ \n tab\t", ""], "depth": 3,
     "time (ms)": math.inf, "tflop16/s": -0.0},
    {"path": ["ROOT", "kernel<float, 4>"], "depth": 1, "time (ms)": 1e-300,
     "tflop16/s": -math.inf},
    {"path": ["ROOT", "x"], "depth": 1, "time (ms)": math.nan, "tflop16/s": 12.5},
]


def test_json_is_what_json_dumps_writes_with_indent_1_and_null_for_non_finite():
    expected = json.dumps([{k: None if isinstance(v, float) and not math.isfinite(v) else v
                            for k, v in row.items()} for row in ROWS], indent=1)
    assert to_json(ROWS) == expected
    assert json.loads(to_json(ROWS))[1]["path"][2] == "é/ü \\ \n tab\t"
    assert to_json([]) == "[]"


def test_a_row_value_of_another_shape_is_written_as_json_writes_it():
    rows = [{"path": [1, "a", None, 2.5, True], "depth": 0, "flag": False, "empty": []}]
    assert to_json(rows) == json.dumps(rows, indent=1)


def test_csv_is_what_csv_dictwriter_writes():
    buf = io.StringIO()
    fields = ["path", "depth", "time (ms)", "tflop16/s"]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in ROWS:
        writer.writerow({**row, "path": " / ".join(row["path"]),
                         **{k: "" if row[k] is None else row[k] for k in fields[2:]}})
    assert to_csv(ROWS) == buf.getvalue()
    assert to_csv([]) == ""


def test_json_of_more_rows_than_a_batch_is_one_list():
    rows = [{"path": ["ROOT", f"k{i}"], "depth": 1, "time (ms)": i / 7} for i in range(2_345)]
    assert to_json(rows) == json.dumps(rows, indent=1)
