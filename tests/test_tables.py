"""cnnlab.tables: numbers shown rounded by the unit in their column's name, reasons beside the status."""

import math
import re

import pandas as pd
import pytest

from cnnlab import report, tables


@pytest.mark.parametrize("column, value, text", [
    ("latency_ms_median", 23.190336, "23.2"),
    ("latency_ms_p10", 0.00123456, "0.00123"),
    ("latency_ms_p90", 1234.56, "1235"),
    ("total_time_s", 1.0012, "1.00"),
    ("throughput_items_per_s", 10799.39, "10799"),
    ("throughput_samples_per_s", 3.14159, "3.14"),
    ("peak_mem_alloc_mib", 116.0874, "116.1"),
    ("avg_mem_mib_low", 67.5312, "67.53"),
    ("gpu_util_pct", 22.04166, "22.0"),
    ("accuracy_change_pp", -0.0312, "0.0"),
    ("time_change_pct_vs_fp32", -41.2871, "-41.3"),
    ("speedup_vs_gemm", 1.98765, "1.99"),
    ("rel_error_vs_native", 1.2345e-7, "1.23e-07"),
    ("cpu_memory_bytes", 123456.0, "123456"),
])
def test_each_unit_has_its_rounding(column, value, text):
    # two rows so that the column is not all whole numbers by chance
    shown = tables.readable(pd.DataFrame({column: [value, 0.5]}))
    assert shown[column].iloc[0] == text


def test_counts_read_as_whole_numbers_even_with_a_missing_value():
    shown = tables.readable(pd.DataFrame({"images": [1024.0, math.nan], "calls_total": [12, 7]}))
    assert list(shown["images"]) == ["1024", ""] and list(shown["calls_total"]) == ["12", "7"]


def test_reason_sits_beside_status_and_empty_columns_go():
    df = pd.DataFrame({"precision": ["fp32", "fp16"], "batch_size": [8, 8], "status": ["ok", "skipped"],
                       "latency_ms_median": [23.190336, math.nan], "gpu_util_pct": [math.nan, math.nan],
                       "dtype": ["float32", None], "error": [None, "fp16 needs a CUDA device"]})
    shown = tables.readable(df)
    assert list(shown.columns) == ["precision", "batch_size", "status", "error", "latency_ms_median", "dtype"]
    assert list(shown.loc[1]) == ["fp16", "8", "skipped", "fp16 needs a CUDA device", "", ""]
    assert df["latency_ms_median"].iloc[0] == 23.190336  # the table itself is not changed


def test_report_show_displays_rounded_numbers(capsys):
    report.show(pd.DataFrame({"batch_size": [1, 2], "latency_ms_median": [23.190336, 86.123456],
                              "status": ["ok", "failed"], "error": [None, "RuntimeError: boom"]}))
    out = capsys.readouterr().out
    assert "23.2" in out and "23.19" not in out and "86.1" in out
    header = out.splitlines()[0].split()
    assert header.index("error") == header.index("status") + 1


def test_report_shows_a_long_reason_in_full_left_aligned_beside_its_status():
    reason = "fp16 on a CPU is timed only at cpu_fp16_batch_sizes (slow emulation): batch 32 is not"
    df = pd.DataFrame({"batch_size": [8, 32], "status": ["ok", "skipped"], "latency_ms_median": [2.5, math.nan],
                       "error": [None, reason]})
    page = report._Table(*report.compact(df))._repr_html_()
    assert reason in page  # pandas' own HTML cut it at 50 characters
    style = page[: page.index("</style>")]
    rules = re.findall(r"([^{}]+)\{([^}]*)\}", style.split(">", 1)[1])
    left = {int(c) for sel, props in rules if "text-align: left" in props for c in re.findall(r"col(\d+)", sel)}
    assert left == {1, 2}  # status and error (text) left-aligned; batch size and latency (numbers) not
    assert "&lt;script&gt;" in tables.to_html(pd.DataFrame({"status": ["<script>x</script>"]}))  # escaped
