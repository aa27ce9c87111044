"""The search space: checked and counted before anything runs, and widened where the winner touches its edge."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import invoke
from test_planning import KIMI, LIMITS, SHORT

from simulator.config import loader
from simulator.errors import InputError
from simulator.planning import space as spaces
from simulator.planning.backends import Backend
from simulator.planning.search import plan
from simulator.planning.slo import SLO


@pytest.mark.parametrize(
    "given, says",
    [
        ("deployment.prefill.instance", "did you mean 'deployment.prefill.instances'"),
        ("prefill.instance", "did you mean 'deployment.prefill.instances'"),
        ("arrivals", "did you mean 'traffic.arrival'"),
        ("sweep.x", "cannot be searched"),
    ],
)
def test_search_paths_are_checked_against_the_schema(given: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        spaces.parse([f"{given}=1,2"])


def test_short_names_are_the_full_paths() -> None:
    dims = spaces.parse(["prefill.instances=1..2", "rate=1,2"]).branches[0].dims
    assert list(dims) == ["deployment.prefill.instances", "traffic.rate"]


def test_a_huge_search_is_refused_by_its_count(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("plan", str(KIMI), "--rate", "1", "--search", "seed=1..20000000")
    code, out, err = invoke(monkeypatch, capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and "20,000,000 candidates" in err
    args = ("plan", str(KIMI), "--rate", "1", "--search", "deployment.prefill.instances=1..20000000")
    code, out, err = invoke(monkeypatch, capsys, *args)  # past the field's own range: refused by it first
    assert code == 2 and err.count("\n") == 1 and "20,000,000 is out of range" in err
    code, out, err = invoke(monkeypatch, capsys, "plan", str(KIMI), "--rate", "1", "--search", "decode.kvcache=bf16")
    assert code == 2 and "did you mean 'deployment.decode.kv_cache'" in err


def _plan(search: list[str], runners_up: int = 0) -> dict:
    sc, raw = loader.load(KIMI, SHORT)
    with Backend("local", 1) as b:
        return plan(
            raw,
            sc,
            str(KIMI),
            KIMI.parent,
            rate=1.0,
            slo=SLO.parse(LIMITS, sc),
            space=spaces.parse(search),
            objective="gpus",
            runners_up=runners_up,
            backend=b,
        )


def test_a_winner_at_the_top_of_a_range_widens_it() -> None:
    """At 1 req/s two decode instances are the fewest that hold 24 ms (test_planning); searched 1..2, the winner
    sits on the top edge, so the range doubles and the search runs again, reusing the trials it ran."""
    res = _plan(["deployment.decode.instances=1..2"])
    assert res["winner"]["overrides"]["deployment.decode.instances"] == 2
    assert res["widened"] == ["deployment.decode.instances widened to 1..4 (the winner has 2, at the edge of 1..2)"]
    assert res["searched"][0]["dims"]["deployment.decode.instances"] == "1..4"
    assert res["simulations_run"] == res["simulated"]  # nothing ran twice


def test_a_winner_at_the_bottom_of_a_range_widens_it_down() -> None:
    res = _plan(["deployment.decode.instances=3..4"])
    assert res["winner"]["overrides"]["deployment.decode.instances"] == 2
    assert res["widened"][0].startswith("deployment.decode.instances widened to 1..4")


def test_a_list_is_not_widened_but_its_edge_is_named() -> None:
    res = _plan(["deployment.decode.instances=1,2"])
    assert res["widened"] == [] and any("largest value searched (2)" in e for e in res["edges"])


def test_no_winner_names_the_bound_and_the_count_that_passes_it() -> None:
    """At 6 req/s the study's two prefill instances cannot compute the offered prompt tokens by the analytic
    bound, whatever the decode pool; the answer says how many would pass the bound."""
    sc, raw = loader.load(KIMI, SHORT)
    with Backend("local", 1) as b:
        res = plan(
            raw,
            sc,
            str(KIMI),
            KIMI.parent,
            rate=6.0,
            slo=SLO.parse(LIMITS, sc),
            space=spaces.parse(["deployment.decode.instances=1,2"]),
            objective="gpus",
            runners_up=0,
            backend=b,
        )
    assert res["winner"] is None
    hint = next(h for h in res["hints"] if h.startswith("deployment.prefill.instances"))
    fewest = int(hint.split("passes from ")[1].split()[0])
    assert fewest > 2 and "not searched" in hint
    sets = (*SHORT, "traffic.concurrency=null", "traffic.rate=6")
    from simulator.planning.bounds import Bounds

    for n, passes in ((fewest - 1, False), (fewest, True)):
        sc_n, _ = loader.load(KIMI, [*sets, f"deployment.prefill.instances={n}"])
        pool = sc_n.deployment.pools()["prefill"]
        assert (
            Bounds(SLO.parse(LIMITS, sc_n)).pool_reason(sc_n, KIMI.parent, "prefill", pool, False) is None
        ) == passes


def test_a_space_names_each_field_once() -> None:
    """A dimension of both pools' weights at once reads `weights=int4`, not `weights=int4 weights=int4`."""
    path = Path(__file__).resolve().parents[1] / "scenarios" / "glm-5.2-weight-formats.yaml"
    sc, raw = loader.load(path, [])
    text = spaces.default(sc, raw).describe()
    assert "weights=int4" in text and "weights=int4 weights=int4" not in text
