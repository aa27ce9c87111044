"""Hostile input, round two (issue 23): text from a user's files is printed as text. A scenario name with Rich
markup crashed run, sweep and max-rate (`[/]`, after sweep had written its files) or styled the report
(`[bold]x[/bold]`); raw escape bytes reached the terminal. Each case failed before the fix.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from cli_helpers import invoke

ROOT = Path(__file__).resolve().parents[1]
FLEET = str(ROOT / "scenarios" / "fleet-disaggregated.yaml")
SMALL = "model: llama-3.1-70b\ntraffic: {concurrency: 1, requests: 2, prompt_tokens: 64, output_tokens: 4}\n"


def scenario(tmp_path: Path, name: str, extra: str = "") -> str:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: {name}\n{SMALL}{extra}")
    return str(path)


@pytest.mark.parametrize("name", ['"[/]"', '"[bold]x[/bold]"', '"[link=file:///etc]y[/link]"', '":boom: [red"'])
@pytest.mark.parametrize("verb", ["run", "sweep", "max-rate", "plan"])
def test_a_name_with_markup_prints_as_written(tmp_path, monkeypatch, capsys, name: str, verb: str) -> None:
    path = scenario(tmp_path, name, "sweep: {seed: [1, 2]}\n")
    if verb == "max-rate":  # a study whose SLO some rate misses
        text = (ROOT / "scenarios" / "tiny-cpu.yaml").read_text().replace("name: tiny-cpu", f"name: {name}")
        Path(path).write_text(text.replace("../profiles/", f"{ROOT}/profiles/"))
    args = {
        "run": [],
        "sweep": ["--out", str(tmp_path / "o")],
        "max-rate": ["--jobs", "1"],
        "plan": ["--rate", "0.5", "--jobs", "1", "--search", "deployment.decode.instances=1"],
    }[verb]
    code, out, err = invoke(monkeypatch, capsys, verb, path, *args)
    assert "Traceback" not in err and "MarkupError" not in err, err
    assert code in (0, 1) if verb == "plan" else code == 0, err
    assert name.strip('"') in out


def test_control_characters_in_a_name_are_shown_escaped(tmp_path, monkeypatch, capsys) -> None:
    code, out, err = invoke(monkeypatch, capsys, "run", scenario(tmp_path, '"x\\u001b[31mred\\u0007"'))
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "x\\x1b[31mred\\x07" in out


def test_the_acceptance_case_prints_the_name_literally(monkeypatch, capsys) -> None:
    code, out, err = invoke(monkeypatch, capsys, "run", FLEET, "--set", "name=[bold]x[/bold]")
    assert code == 0, err
    assert out.startswith("[bold]x[/bold]  (32 GPUs")


def test_table_cells_titles_and_styles() -> None:
    """Every string a report hands the console (cells, titles, captions) passes `render_str`; the reports' own
    emphasis is a style, never markup."""
    from rich.table import Table

    from simulator.console import PlainConsole, printable, styled

    buf = io.StringIO()
    console = PlainConsole(file=buf, width=100)
    t = Table("[b]col[/b]", title="[red]title[/]", caption=":boom:")
    t.add_row("[/]", "\x1b[2J")
    console.print(t)
    console.print(styled(("[/]", "bold"), " and ", "\x1b"))
    text = buf.getvalue()
    for literal in ("[b]col[/b]", "[red]title[/]", ":boom:", "[/]", "\\x1b[2J", "[/] and \\x1b"):
        assert literal in text, text
    assert "\x1b" not in text
    assert printable("a\nb\tc\x00") == "a\nb\\tc\\x00"
