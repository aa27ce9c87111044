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


def report(tmp_path: Path, monkeypatch, capsys, name: str, verb: str) -> tuple[str, str]:
    """(stdout, stderr) of `verb` on a small study named `name` (a YAML scalar)."""
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
    return out, err


@pytest.mark.parametrize("name", ['"[/]"', '"[bold]x[/bold]"', '"[link=file:///etc]y[/link]"', '":boom: [red"'])
@pytest.mark.parametrize("verb", ["run", "sweep", "max-rate", "plan"])
def test_a_name_with_markup_prints_as_written(tmp_path, monkeypatch, capsys, name: str, verb: str) -> None:
    out, _ = report(tmp_path, monkeypatch, capsys, name, verb)
    assert name.strip('"') in out


@pytest.mark.parametrize("verb", ["run", "sweep", "max-rate", "plan"])
def test_a_line_break_in_a_name_prints_no_line_of_its_own(tmp_path, monkeypatch, capsys, verb: str) -> None:
    """Round three (issue 37): a name "x\\nerror: fake" printed a line reading as the program's own error."""
    out, err = report(tmp_path, monkeypatch, capsys, '"x\\nerror: fake"', verb)
    assert "x\\nerror: fake" in out
    assert not any(line.lstrip().startswith("error: fake") for line in (out + err).splitlines()), out


def test_control_characters_in_a_name_are_shown_escaped(tmp_path, monkeypatch, capsys) -> None:
    code, out, err = invoke(monkeypatch, capsys, "run", scenario(tmp_path, '"x\\u001b[31mred\\u0007"'))
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "x\\x1b[31mred\\x07" in out


def test_the_acceptance_case_prints_the_name_literally(monkeypatch, capsys) -> None:
    code, out, err = invoke(monkeypatch, capsys, "run", FLEET, "--set", "name=[bold]x[/bold]")
    assert code == 0, err
    assert out.startswith("[bold]x[/bold]: 32 H200, ")


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
    assert printable("a\nb\tc\x00\u2028") == "a\\nb\\tc\\x00\\u2028"  # one line: line breaks escaped too
