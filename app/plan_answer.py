"""The Plan view's arithmetic without Streamlit: the editable search space, the rejected candidates by reason,
and the files `phaseplan plan --out` writes for the answer, so the page offers the same deployable files.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.scenario_io import Study
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.deploy.bundle import files
from simulator.planning import space as spaces
from simulator.planning.search import winner_mapping
from simulator.planning.slo import SLO, reason_kind


def search_items(sc: Scenario, raw: dict[str, Any]) -> list[str]:
    """The CLI's default space for the study's own mode as `--search` items: the dimensions `--search` can
    express (instance counts, KV formats, a colocated pool's weights); layouts and a disaggregated deployment's
    one weight format are coupled dimensions, which only the default search varies."""
    own = sc.deployment.mode
    branch = next(b for b in spaces.default(sc, raw).branches if b.fixed.get("deployment.mode") == own)
    return [f"{path}={_values(v)}" for path, v in branch.dims.items() if _plain(v)]


def _plain(values: Sequence[Any]) -> bool:
    return isinstance(values, range) or not any(isinstance(v, dict) for v in values)


def _values(values: Sequence[Any]) -> str:
    if isinstance(values, range):
        return f"{values.start}..{values.stop - 1}"
    return ",".join(str(v) for v in values)


def rejected_by_reason(res: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The listed rejected candidates grouped by what rejected them (`TTFT p95 over the limit`, ...), the
    largest group first."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for e in res["rejected"]:
        groups.setdefault(reason_kind(e["reason"]), []).append(e)
    return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def deploy_files(study: Study, raw: dict[str, Any], res: dict[str, Any], command: str) -> dict[str, str]:
    """What `phaseplan plan … --out DIR` writes for the winner (simulator/deploy/bundle.py), by file name:
    the winner as a scenario, commands.sh, the SGLang and vLLM launch commands and the answer's JSON."""
    q = res["question"]
    data = winner_mapping(raw, res)
    sc = loader.validate(data, study.path)
    stem = f"{Path(study.path).stem}-plan"
    slo = SLO(**q["slo"])
    header = [f"plan's winner at {q['rate']:g} {q['rate_unit']} within {slo.describe()} (modeled)"]
    answer = json.dumps(res, indent=2, allow_nan=False)
    out = files(Path("."), stem, data, sc, study.base_dir, shlex.split(command), header, answer)
    return {p.name: text for p, text in out.items()}
