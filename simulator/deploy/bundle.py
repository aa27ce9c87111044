"""What `plan --out` and `max-rate --out` leave behind: the answer as files a person can deploy and re-check.

* `<name>.yaml`: the answer as a complete scenario (the study with the plan's choices, rate and SLO written in),
  which `phaseplan run` accepts and which reproduces the answer's figures exactly (the same validated Scenario
  the plan simulated: the mapping it was built from, with the files it names made absolute);
* `commands.sh`: the command that asked, and the run of the answer;
* `launch-sglang.sh`, `launch-sglang-router.sh`, `launch-vllm.sh`: engine launch commands for the layout
  (`simulator.deploy.sglang`, `.vllm`; the router where there is one),
  checked against the chosen releases' flags (`simulator.deploy.flags`; the newest known by default);
* `bench.sh`: the benchmark that replays the planned traffic against the deployment and feeds `phaseplan
  calibrate` (`simulator.deploy.bench`);
* `k8s-sglang.yaml`, `k8s-vllm.yaml`: where an instance spans nodes, LeaderWorkerSet manifests of the same
  commands (`simulator.deploy.k8s`);
* `answer.json`: the plan's (or max-rate's) JSON.

Written all or nothing by the caller (`simulator.atomic.write_files`).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from simulator.config.scenario import Scenario
from simulator.deploy import bench, flags, k8s, sglang, vllm
from simulator.deploy.command import comment, render
from simulator.deploy.layout import one_line
from simulator.workload.lengths import resolve

NAMES = (
    "commands.sh",
    "launch-sglang.sh",
    "launch-sglang-router.sh",
    "launch-vllm.sh",
    "bench.sh",
    "k8s-sglang.yaml",
    "k8s-vllm.yaml",
    "answer.json",
)


class _NoAliases(yaml.SafeDumper):
    """Every value written out where it is used: the scenario reader limits aliases, and a person reads better
    without them."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


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
    lines = [f"# {comment(one_line(sc))}", *(f"# {comment(h)}" for h in header)]
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
    versions: dict[str, str] | None = None,
) -> dict[Path, str]:
    """The files to write into `folder` (see the module doc); `asked` is the argv that asked the question;
    `versions`: engine -> release whose flags the commands are written for (`--engine-version`; else the newest)."""
    name = f"{stem}.yaml"
    chosen = versions or {}
    release = {e: flags.release(e, chosen.get(e)) for e in ("sglang", "sglang-router", "vllm")}
    clients = {e: flags.release(f"{e}-bench", _bench_version(e, chosen.get(e))) for e in ("sglang", "vllm")}
    commands = [
        "#!/usr/bin/env bash",
        f"# {comment(one_line(sc))}",
        "# Reproduce the answer: the question as it was asked, then the answer's scenario run on its own (the same",
        "# figures: modeled, priced by the scenario's profile).",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        " ".join(shlex.quote(a) for a in asked),
        f"phaseplan run {shlex.quote(name)}",
    ]
    title = f"{one_line(sc)} ({sc.name})"
    servers, router = sglang.split(sglang.launch(sc, release["sglang"], release["sglang-router"]))
    out = {
        folder / name: scenario_yaml(mapping, sc, base_dir, header),
        folder / "commands.sh": "\n".join(commands) + "\n",
        folder / "launch-sglang.sh": render(servers, title),
        folder / "launch-vllm.sh": render(vllm.launch(sc, release["vllm"]), title),
        folder / "bench.sh": bench.script(sc, name, clients["sglang"], clients["vllm"], json.loads(answer_json)),
        folder / "answer.json": answer_json + "\n",
    }
    if router is not None:  # SGLang's router: a package of its own, its flags checked against its own file
        out[folder / "launch-sglang-router.sh"] = render(router, title)
    if k8s.needed(sc):
        out[folder / "k8s-sglang.yaml"] = k8s.manifest(sc, "sglang", release["sglang"], release["sglang-router"], title)
        out[folder / "k8s-vllm.yaml"] = k8s.manifest(sc, "vllm", release["vllm"], None, title)
    return out


def _bench_version(engine: str, version: str | None) -> str | None:
    """The benchmark client of the chosen release where its flags are known, else the newest."""
    known = flags.versions(f"{engine}-bench")
    return version if version is not None and version.removeprefix("v") in known else None
