"""Lab results are written through ``engine.paths.replace_text`` (issue 31, defect 10; its own tests are in
tests/engine/test_paths.py)."""

from __future__ import annotations

from engine.lab.results import ExperimentResult, write_csv, write_json


def test_lab_results_go_through_the_same_replacement(tmp_path):
    result = ExperimentResult(key="demo", title="Demo", columns=("name", "value"), rows=(("=cmd", 1.5),))
    path = write_csv(result, tmp_path / "out" / "demo.csv")
    assert path.read_bytes().startswith("\ufeff".encode("utf-8")) and "'=cmd" in path.read_text(encoding="utf-8-sig")
    json_path = write_json({"nan": float("nan")}, tmp_path / "out" / "results.json")
    assert json_path.read_text(encoding="utf-8").replace(" ", "").replace("\n", "") == '{"nan":null}'
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["demo.csv", "results.json"]
