"""Hostile input, round three (issue 37): every option's value checked by name, and `--backend ray` in one line.

`init --rate nan` blamed "no instance on one node holds its weights"; a `--search` value of 5,000 digits was a
traceback and a mapping or `[1]` ran as an invalid candidate ("no candidate meets the SLO", exit 1); duplicate `--slo`
keys kept the last; `calibrate --engine "{a: 1}"` blamed `--set engine.name`; `RAY_ADDRESS=not-an-address` was a
traceback, and an address nothing answered at hung past a minute, printing Ray's log lines and deaf to SIGTERM.
Each test failed before the fix.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import invoke

from simulator.errors import InputError
from simulator.planning import space

ROOT = Path(__file__).resolve().parents[1]
FLEET = str(ROOT / "scenarios" / "fleet-disaggregated.yaml")
TINY = str(ROOT / "scenarios" / "tiny-cpu.yaml")
KV = str(ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml")
DIGITS = "9" * 5000


def refused(monkeypatch, capsys, *args: str) -> str:
    code, out, err = invoke(monkeypatch, capsys, *args)
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and len(err) < 400, err
    return err


NUMBER_OPTIONS = [  # (args before the option, option): every number option the CLI has
    (["init"], "--rate"),
    (["init"], "--duration-s"),
    (["init"], "--concurrency"),
    (["init"], "--prompt-tokens"),
    (["init"], "--output-tokens"),
    (["run", TINY], "--repeats"),
    (["run", TINY], "--jobs"),
    (["run", TINY], "--max-requests"),
    (["plan", TINY], "--rate"),
    (["plan", TINY, "--rate", "1"], "--runners-up"),
    (["max-rate", TINY], "--start"),
    (["replay", TINY, "--device", "cpu"], "--budget-s"),
    (["bench-sim"], "--hours"),
    (["bench-sim"], "--rate"),
    (["app"], "--port"),
    (["calibrate", "--bench", "x.json", "--scenario", TINY], "--max-requests"),
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", DIGITS, "{a: 1}", "[1]"])
@pytest.mark.parametrize(("args", "option"), NUMBER_OPTIONS)
def test_every_number_option_refuses_a_bad_value_by_name(monkeypatch, capsys, args, option, value) -> None:
    err = refused(monkeypatch, capsys, *args, option, value)
    assert f"'{option}'" in err


def test_init_rate_nan_names_the_option(monkeypatch, capsys) -> None:
    """The acceptance case: the error names --rate, not the deployment it could not size."""
    err = refused(monkeypatch, capsys, "init", "--model", "kimi-k2.6", "--hardware", "h200", "--rate", "nan")
    assert "--rate" in err and "holds its weights" not in err


@pytest.mark.parametrize(
    ("item", "says"),
    [
        (f"deployment.decode.instances={'9' * 4000}", "out of range"),  # an int Python still parses
        (f"deployment.decode.instances={DIGITS}", "integer too long"),
        (f"deployment.decode.instances=1..{DIGITS}", "integer too long"),
        (f"deployment.decode.instances=1..{'9' * 4000}", "out of range"),
        ("deployment.decode.kv_cache={a:1}", "is not one value"),
        ("deployment.decode.kv_cache=[1]", "is not one value"),
        ("deployment.decode.kv_cache=fp9", "'fp8_e4m3'"),
        ("deployment.decode.instances=0..3", "greater than 0"),
        ("traffic.rate=.nan", "traffic.rate"),
        ("traffic.rate=1e400", "inf is out of range"),  # YAML's text, which the field reads as a number
        ("deployment.decode.instances=1,,2", "valid integer"),
        ("model=/etc/passwd", "unknown model preset"),
        ("traffic.rate=1.5..3", "LO..HI takes integers"),
    ],
)
def test_a_search_value_is_checked_alone_before_any_candidate(monkeypatch, capsys, item: str, says: str) -> None:
    with pytest.raises(InputError, match="^--search ") as e:
        space.parse([item])
    assert says in str(e.value) and len(str(e.value)) < 400
    refused(monkeypatch, capsys, "plan", FLEET, "--rate", "3", "--search", item)


def test_legitimate_search_values_still_parse() -> None:
    dims = space.parse(["deployment.decode.kv_cache=bf16,fp8_e4m3", "decode.instances=1..4", "seed=1,2"])
    assert dict(dims.branches[0].dims) == {
        "deployment.decode.kv_cache": ["bf16", "fp8_e4m3"],
        "deployment.decode.instances": range(1, 5),
        "seed": [1, 2],
    }


def test_a_slo_key_given_twice_is_an_error(monkeypatch, capsys) -> None:
    err = refused(monkeypatch, capsys, "plan", TINY, "--rate", "1", "--slo", "ttft_p95_ms=100,ttft_p95_ms=200")
    assert "--slo ttft_p95_ms: given twice" in err
    from simulator.config.scenario import SLO as ScenarioSLO
    from simulator.planning.slo import SLO

    with pytest.raises(InputError, match="--slo tpot_p95_ms: given twice"):  # under its old name too
        SLO.parse("tpot_ms=10,tpot_p95_ms=20", ScenarioSLO(), warn=lambda _: None)


def test_calibrate_engine_is_a_name_or_a_file(monkeypatch, capsys) -> None:
    bench = str(ROOT / "docs/examples/gpustack-glm-5.2-h200/bench/optimized.jsonl")
    deployment = str(ROOT / "docs/examples/gpustack-glm-5.2-h200/deployment.yaml")
    err = refused(monkeypatch, capsys, "calibrate", "--bench", bench, "--scenario", deployment, "--engine", "{a: 1}")
    assert err.startswith("error: --engine {a: 1}: unknown engine preset")


# --- Ray ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address", ["not-an-address", "host:99999", "a b:1", "http://x:1", "x\nerror: fake:1", "[::1", "h:"]
)
def test_a_ray_address_that_is_none_is_one_line(monkeypatch, capsys, address: str) -> None:
    from simulator.planning import ray_cluster

    monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(InputError, match="not a Ray address"):
        ray_cluster.address()
    err = refused(monkeypatch, capsys, "sweep", KV, "--backend", "ray", "--set", "traffic.requests=8")
    assert "error: fake" not in err.splitlines()[0][:12]


@pytest.mark.parametrize("address", ["auto", "local", "10.0.0.1:6379", "ray://head.example:10001", "[::1]:6379"])
def test_ray_addresses_that_are_addresses(monkeypatch, address: str) -> None:
    from simulator.planning import ray_cluster

    monkeypatch.setenv("RAY_ADDRESS", address)
    assert ray_cluster.address() == address


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_ray_address_nothing_listens_at_is_one_line_at_once(monkeypatch, capsys) -> None:
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")
    t0 = time.monotonic()
    err = refused(monkeypatch, capsys, "sweep", KV, "--backend", "ray", "--set", "traffic.requests=8")
    assert "no Ray cluster answers there" in err and time.monotonic() - t0 < 15


@pytest.fixture
def silent_server():
    """A port that accepts connections and never answers (what a wrong service, or a stuck head node, does)."""
    server = socket.create_server(("0.0.0.0", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for s in accepted:
        s.close()
    server.close()


def _phaseplan(address: str) -> subprocess.Popen:
    env = {**os.environ, "RAY_ADDRESS": address}
    cmd = [
        str(Path(sys.executable).parent / "phaseplan"),
        "sweep",
        KV,
        "--backend",
        "ray",
        "--set",
        "traffic.requests=8",
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_a_ray_cluster_that_never_answers_is_one_line_within_the_limit(silent_server) -> None:
    pytest.importorskip("ray")
    from simulator.planning import ray_cluster

    t0 = time.monotonic()
    proc = _phaseplan(f"127.0.0.1:{silent_server}")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert err.strip().splitlines() == [
        f"error: RAY_ADDRESS 127.0.0.1:{silent_server}: no Ray cluster answered within {ray_cluster.CONNECT_S:g} s"
    ], err  # Ray's own log lines kept off
    assert time.monotonic() - t0 < ray_cluster.CONNECT_S + 15


def test_sigterm_while_ray_connects_ends_in_one_line(silent_server) -> None:
    pytest.importorskip("ray")
    proc = _phaseplan(f"127.0.0.1:{silent_server}")
    time.sleep(4.5)  # past Ray's import, inside ray.init's wait for the cluster, before its 5 s warning
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143 and err.strip().splitlines() == ["error: terminated (SIGTERM)"], err
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("address", ["--server.port=1", "a b", "x\nerror: y", ""])
def test_app_address_is_a_host_never_an_option(monkeypatch, capsys, address: str) -> None:
    """`--address` becomes a word of Streamlit's command line: `--server.port=1` there was an option of its own."""
    import phaseplan.app

    monkeypatch.setattr(phaseplan.app.os, "execv", lambda *a: pytest.fail("Streamlit started"))
    err = refused(monkeypatch, capsys, "app", "--address", address)
    assert "not a host name or an IP address" in err
