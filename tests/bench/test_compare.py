"""bench.compare: the two codes' workers and the side-by-side figures."""

from __future__ import annotations

from pathlib import Path

from bench import compare, harness


def test_each_side_runs_from_its_own_checkout_on_its_own_database(tmp_path):
    before = tmp_path / "before"
    server = "postgres://u@127.0.0.1:5432/"
    found = compare.variants(tmp_path, before, server, ["sqlite", "postgres"])
    by_name = {v.name: v for v in found}
    assert list(by_name) == ["sqlite-before", "sqlite-after", "postgres-before", "postgres-after"]
    for name, variant in by_name.items():
        root = before if name.endswith("before") else harness.ROOT
        assert (variant.root, variant.env["PYTHONPATH"]) == (root, str(root))
        assert variant.factory == "bench.variants:AgentOps"
    assert (
        by_name["sqlite-before"].env["AGENTOPS_SQLITE_PATH"]
        != (by_name["sqlite-after"].env["AGENTOPS_SQLITE_PATH"])
    )
    assert (
        by_name["postgres-before"].env["DATABASE_URL"]
        != (by_name["postgres-after"].env["DATABASE_URL"])
    )
    assert all(Path(v.root).is_absolute() for v in found)


def test_the_ratio_is_taken_within_each_round_before_its_median():
    # A drifting machine: each round is slower than the last, and the after side is 0.9 of
    # the before side in every round but one. A ratio of medians would not be 0.9.
    before = [0.010, 0.020, 0.030, 0.040, 0.050]
    after = [0.009, 0.018, 0.027, 0.036, 0.060]
    ((storage, before_ms, after_ms, ratio),) = compare.summary(
        {"sqlite-before": before, "sqlite-after": after}, ["sqlite"]
    )
    assert (storage, before_ms, after_ms) == ("sqlite", 30.0, 27.0)
    assert ratio == "0.900 (0.900-0.900)"
