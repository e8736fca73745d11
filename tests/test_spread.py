"""cnnlab.profiling.spread: a measured value within its noise interval, and the layering it stands for: the
measurement layer does not depend on judging (no module under cnnlab/profiling/ imports cnnlab.claims)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cnnlab
from cnnlab.profiling.spread import TIME_NOISE, Spread


def _imported(node: ast.AST, package: str) -> list[str]:
    """The dotted names an import statement in ``package`` brings in (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
    module = ".".join(base + ([node.module] if node.module else []))
    return [module] + [f"{module}.{a.name}" for a in node.names]


def test_the_measurement_layer_imports_nothing_from_the_claims():
    root = Path(cnnlab.__file__).parent
    files = sorted((root / "profiling").rglob("*.py"))
    offenders = []
    for path in files:
        package = ".".join(("cnnlab",) + path.relative_to(root).parent.parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if any(n == "cnnlab.claims" or n.startswith("cnnlab.claims.") for n in _imported(node, package)):
                offenders.append(f"{path.name}:{node.lineno}")
    assert len(files) > 10 and not offenders, f"cnnlab.profiling imports cnnlab.claims at {offenders}"


def test_the_claims_re_export_the_same_spread():
    from cnnlab import claims, profiling

    assert claims.Spread is Spread is profiling.Spread


def test_a_ratio_of_spreads_takes_the_extremes():
    r = Spread(4.0, 3.0, 5.0) / Spread(2.0, 1.0, 2.5)
    assert (r.value, r.low, r.high) == (2.0, 1.2, 5.0)
    assert Spread(2.0, 1.0, 4.0).inverse().low == 0.25
    with pytest.raises(ValueError, match="low <= value <= high"):
        Spread(1.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="finite"):
        Spread(float("nan"), 0.0, 1.0)


def test_a_product_of_spreads_multiplies_the_ends_and_a_range_reads_min_max_or_low_high_columns():
    p = Spread(2.0, 1.0, 3.0) * Spread(4.0, 2.0, 5.0)
    assert (p.value, p.low, p.high) == (8.0, 2.0, 15.0)
    assert Spread(2.0, 1.0, 3.0) * 2 == Spread(4.0, 2.0, 6.0)
    with pytest.raises(ValueError, match="positive"):
        Spread(2.0, 0.0, 3.0) * Spread(1.0, 1.0, 1.0)
    row = {"t": 2.0, "t_min": 1.5, "t_max": 3.0, "m": 5.0, "m_low": 6.0, "m_high": float("nan")}
    assert Spread.of_range(row, "t") == Spread(2.0, 1.5, 3.0)
    assert Spread.of_range(row, "m", ("low", "high")) == Spread.exact(5.0)  # widened to hold the value; NaN: value
    assert Spread.of_range(row, "m") == Spread.exact(5.0)  # no m_min / m_max: the value alone
    with pytest.raises(KeyError):
        Spread.of_range(row, "m", required=True)
    with pytest.raises(ValueError, match="finite"):
        Spread.of_range({"t": float("nan"), "t_min": 1.0, "t_max": 2.0}, "t")


def test_a_time_is_never_known_closer_than_the_noise_floor():
    narrow = Spread.timed(10.0, 9.9, 10.2)  # a few percent between rounds: widened to the floor
    assert (narrow.value, narrow.low, narrow.high) == (10.0, 10.0 / TIME_NOISE, 10.0 * TIME_NOISE)
    assert Spread.timed(10.0, 5.0, 30.0) == Spread(10.0, 5.0, 30.0)  # wider rounds keep their own range
    row = {"latency_ms_median": 4.0, "latency_ms_p10": 3.9, "latency_ms_p90": 9.0}
    assert Spread.of(row, "latency_ms") == Spread(4.0, 4.0 / TIME_NOISE, 9.0)
    # two identical-looking times a little apart overlap; apart by more than TIME_NOISE squared they do not
    assert (Spread.timed(1.0, 1.0, 1.0) / Spread.timed(1.5, 1.5, 1.5)).high > 1
    assert (Spread.timed(1.0, 1.0, 1.0) / Spread.timed(1.6, 1.6, 1.6)).high < 1


def test_repeated_times_keep_their_range_beyond_the_floor_and_get_the_floor_within_it():
    row = {"epoch_s": 10.0, "epoch_s_min": 9.5, "epoch_s_max": 20.0}
    assert Spread.timed_range(row, "epoch_s") == Spread(10.0, 10.0 / TIME_NOISE, 20.0)
    assert Spread.timed_range({"t": 2.0, "t_low": 1.0, "t_high": 2.1}, "t", ("low", "high")) == \
        Spread(2.0, 1.0, 2.0 * TIME_NOISE)
    assert Spread.timed_samples([3.0, 1.0, 2.0]) == Spread(2.0, 1.0, 3.0)
    assert Spread.timed_samples([2.0, 2.0]) == Spread(2.0, 2.0 / TIME_NOISE, 2.0 * TIME_NOISE)
