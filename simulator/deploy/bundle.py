"""What `plan --out` and `max-rate --out` leave behind: the answer as files a person can deploy and re-check.

* `<name>.yaml`: the answer as a complete scenario (the study with the plan's choices, rate and SLO written in),
  which `phaseplan run` accepts and which reproduces the answer's figures exactly (the same validated Scenario
  the plan simulated: the mapping it was built from, with the files it names made absolute);
* `commands.sh`: the command that asked, and the run of the answer;
* `launch-sglang.sh`, `launch-vllm.sh`: engine launch commands for the layout (`simulator.deploy.sglang`, `.vllm`);
* `answer.json`: the plan's (or max-rate's) JSON.

Every name from the user's files is written for where it goes: quoted words and one-line comments in the scripts
(`simulator.deploy.command`), the scenario through the YAML emitter. Written all or nothing by the caller
(`simulator.atomic.write_files`).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from simulator.config.scenario import Scenario
from simulator.deploy import sglang, vllm
from simulator.deploy.command import comment, render
from simulator.deploy.layout import one_line
from simulator.workload.lengths import resolve

NAMES = ("commands.sh", "launch-sglang.sh", "launch-vllm.sh", "answer.json")


class _NoAliases(yaml.SafeDumper):
    """Every value written out where it is used: the scenario reader limits aliases, and a person reads better
    without them. A string holding a line break or another character that does not print is written double-quoted
    with escapes, on the line of its key (the emitter's default folds it over several lines)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def represent_str(self, data: str) -> yaml.ScalarNode:
        if data.isprintable():
            return super().represent_str(data)
        return self.represent_scalar("tag:yaml.org,2002:str", data, style='"')


_NoAliases.add_representer(str, _NoAliases.represent_str)


def absolute_files(mapping: dict[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """The mapping with every file it names (profile, trace, length files) resolved as the loaders resolve them,
    so the scenario runs from wherever it is written."""
    out = dict(mapping)
    profile = out.get("profile")
    if isinstance(profile, str) and profile != "roofline":
        p = Path(profile).expanduser()
        if not p.is_absolute() and base_dir is not None and (base_dir / p).is_file():
            p = base_dir / p
        out["profile"] = str(p.resolve())
    traffic = out.get("traffic")
    if isinstance(traffic, dict):
        traffic = out["traffic"] = dict(traffic)
        if isinstance(traffic.get("trace"), str):
            traffic["trace"] = str(resolve(traffic["trace"], base_dir).resolve())
        for key in ("prompt_tokens", "output_tokens"):
            length = traffic.get(key)
            if isinstance(length, dict) and isinstance(length.get("file"), str):
                traffic[key] = {**length, "file": str(resolve(length["file"], base_dir).resolve())}
    return out


def scenario_yaml(mapping: dict[str, Any], sc: Scenario, base_dir: Path | None, header: list[str]) -> str:
    body = yaml.dump(absolute_files(mapping, base_dir), Dumper=_NoAliases, sort_keys=False, allow_unicode=True)
    lines = [comment(one_line(sc)), *(comment(h) for h in header)]
    return "\n".join(lines) + "\n" + body


def files(
    folder: Path,
    stem: str,
    mapping: dict[str, Any],
    sc: Scenario,
    base_dir: Path | None,
    asked: list[str],
    header: list[str],
    answer_json: str,
) -> dict[Path, str]:
    """The files to write into `folder` (see the module doc); `asked` is the argv that asked the question."""
    name = f"{stem}.yaml"
    commands = [
        "#!/usr/bin/env bash",
        comment(one_line(sc)),
        "# Reproduce the answer: the question as it was asked, then the answer's scenario run on its own (the same",
        "# figures: modeled, priced by the scenario's profile).",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        " ".join(shlex.quote(a) for a in asked),
        f"phaseplan run {shlex.quote(name)}",
    ]
    title = f"{one_line(sc)} ({sc.name})"
    return {
        folder / name: scenario_yaml(mapping, sc, base_dir, header),
        folder / "commands.sh": "\n".join(commands) + "\n",
        folder / "launch-sglang.sh": render(sglang.launch(sc), title),
        folder / "launch-vllm.sh": render(vllm.launch(sc), title),
        folder / "answer.json": answer_json + "\n",
    }
