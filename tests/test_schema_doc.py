"""docs/schema.md is generated from the schema and must not go stale; every field says what it means."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import invoke

from simulator.config import bounds, schema_doc
from simulator.config.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]


def test_docs_schema_md_is_up_to_date() -> None:
    on_disk = (ROOT / "docs" / "schema.md").read_text(encoding="utf-8")
    assert on_disk == schema_doc.render(), (
        "docs/schema.md is stale: run .venv/bin/python -m simulator.config.schema_doc"
    )


def test_every_field_of_every_model_has_a_meaning() -> None:
    missing = [
        f"{m.__name__}.{n}" for m in schema_doc._models() for n, f in m.model_fields.items() if not f.description
    ]
    assert missing == []


def test_the_doc_names_every_field_and_every_range() -> None:
    text = schema_doc.render()
    for model in schema_doc._models():
        assert f"\n## {model.__name__}\n" in text
        for name in model.model_fields:
            assert f"| `{name}` |" in text, f"{model.__name__}.{name}"
    for (cls, name), (lo, hi, _) in bounds.BOUNDS.items():
        if any(m.__name__ == cls for m in schema_doc._models()):
            assert f"{bounds.format_number(lo)} to {bounds.format_number(hi)}" in text, (cls, name)
    assert set(Scenario.model_fields) <= {line.split("`")[1] for line in text.splitlines() if line.startswith("| `")}


def test_phaseplan_schema_prints_it(monkeypatch, capsys) -> None:
    code, out, _ = invoke(monkeypatch, capsys, "schema")
    assert code == 0 and out == schema_doc.render()


def test_check_mode_says_whether_it_is_fresh(capsys) -> None:
    assert schema_doc.main(["--check"]) == 0 and "up to date" in capsys.readouterr().out
