"""The report's decisions held as arrays and written in pieces: the same JSON, byte for byte."""

from __future__ import annotations

import json

import planner
from planner import report, synth


def test_decisions_in_pieces_are_the_same_json(monkeypatch, tmp_path):
    p = planner.plan(synth.build(layers=3, heads=2), budget="50%")
    d = p.report["decisions"]
    rows = list(d)
    assert len(rows) == len(d) and d == rows and rows[5] == d[5] and d[-1] == rows[-1]
    assert d[2:9] == rows[2:9]
    assert {r["decision"] for r in rows} == {"keep", "recompute"}
    whole = report.dumps(p.report)
    monkeypatch.setattr(report, "DECISION_CHUNK", 7)
    out = tmp_path / "r.json"
    report.write_json(p.report, out)
    assert out.read_text() == whole == report.dumps(p.report)
    assert json.loads(whole)["decisions"] == rows
    assert report.dumps({"decisions": []}) == '{\n "decisions": []\n}\n'
