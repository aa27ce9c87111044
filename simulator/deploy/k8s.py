"""Kubernetes manifests for layouts whose instances span nodes: one LeaderWorkerSet per pool (the form llm-d and
SGLang's OME deploy multi-node engines in), its replicas the pool's instances, its group size the nodes one
instance spans.

The containers run the very commands `launch-*.sh` holds, made by the same functions (`sglang.server`,
`vllm.server`) for the leader (node 0) and for a worker, with the hosts and ranks LeaderWorkerSet gives each pod:
`LWS_LEADER_ADDRESS` where the nodes meet, `LWS_WORKER_INDEX` as the node rank. The YAML is written by a YAML
dumper, so every value is quoted for YAML; the shell line a container runs is quoted for the shell by the
launch scripts' own quoting.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml

from simulator.config.scenario import Pool, Scenario
from simulator.deploy import flags, sglang, vllm
from simulator.deploy.command import Command, Slot, comment, roles, shell_words

LEADER, WORKER_INDEX = "LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"
# The engines' published container images, tagged by release (lmsysorg/sglang:v0.5.23, vllm/vllm-openai:v0.34.0).
IMAGES = {"sglang": "lmsysorg/sglang:v{}", "vllm": "vllm/vllm-openai:v{}"}


def needed(sc: Scenario) -> bool:
    """Whether any instance spans nodes: the layouts a manifest is written for."""
    return any(p.nodes > 1 for p in sc.deployment.pools().values())


def _slot(sc: Scenario, role: str, pool: Pool, node: int) -> Slot:
    per = pool.tp // pool.nodes
    return Slot(role, 1, pool.instances, LEADER, 0, per, 0, node, pool.nodes, LEADER)


def _script(c: Command, start_rank: int | None) -> str:
    """The shell line a container runs: the command, its node rank the pod's worker index."""
    argv = list(c.argv)
    for flag in ("--node-rank",):
        if flag in argv and argv[argv.index(flag) + 1] != "0":
            argv[argv.index(flag) + 1] = "${" + WORKER_INDEX + "}"
    prefix = ""
    if start_rank is not None and "--data-parallel-start-rank" in argv:  # vLLM: the first DP rank of this node
        argv[argv.index("--data-parallel-start-rank") + 1] = "${START_RANK}"
        prefix = f"START_RANK=$(({WORKER_INDEX} * {start_rank})); "
    return prefix + "exec " + shell_words(argv)


def _container(engine: str, version: str, sc: Scenario, pool: Pool, script: str, port: int) -> dict[str, Any]:
    env = [{"name": "MODEL_PATH", "value": sc.model.checkpoint or sc.model.name}]
    return {
        "name": engine,
        "image": IMAGES[engine].format(version),
        "command": ["/bin/sh", "-c", script],
        "env": env,
        "ports": [{"containerPort": port}],
        "resources": {"limits": {"nvidia.com/gpu": pool.tp // pool.nodes}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def _pod(container: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"labels": dict(labels)},  # copies: a dumped document repeats them rather than aliasing
        "spec": {"containers": [container], "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]},
    }


def _lws(
    engine: str,
    release: flags.Release,
    sc: Scenario,
    role: str,
    pool: Pool,
    make: Callable[[Slot], Command],
    port: int,
) -> dict[str, Any]:
    name = f"{_dns(sc.name)}-{role}"
    labels = {"app.kubernetes.io/name": _dns(sc.name), "phaseplan/role": role}
    local = pool.dp // pool.nodes if pool.dp > 1 else None
    leader = _container(engine, release.version, sc, pool, _script(make(_slot(sc, role, pool, 0)), local), port)
    spec: dict[str, Any] = {
        "size": pool.nodes,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": _pod(leader, {**labels, "phaseplan/leader": "true"}),
    }
    if pool.nodes > 1:
        worker = _container(engine, release.version, sc, pool, _script(make(_slot(sc, role, pool, 1)), local), port)
        spec["workerTemplate"] = _pod(worker, labels)
    else:
        spec["workerTemplate"] = _pod(dict(leader), labels)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"replicas": pool.instances, "leaderWorkerTemplate": spec},
    }


def _dns(text: str) -> str:
    """A DNS-1123 label of the scenario's name (lower-case letters, digits and dashes)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40] or "phaseplan"


def _router(sc: Scenario, router: flags.Release) -> list[dict[str, Any]]:
    """SGLang's router, finding the pods by their labels (its service discovery), and the rights to list them."""
    name = f"{_dns(sc.name)}-router"
    app = _dns(sc.name)
    argv = ["python", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(sglang.ROUTER_PORT)]
    argv += ["--policy", sglang.POLICY[sc.routing.policy], "--service-discovery"]
    argv += ["--service-discovery-port", str(sglang.PORT)]
    if sc.deployment.mode == "disaggregated":
        argv += ["--pd-disaggregation"]
        for role in ("prefill", "decode"):
            argv += [
                f"--{role}-selector",
                f"app.kubernetes.io/name={app}",
                f"phaseplan/role={role}",
                "phaseplan/leader=true",
            ]
    else:
        argv += ["--selector", f"app.kubernetes.io/name={app}", "phaseplan/leader=true"]
    problems = router.problems(argv)
    if problems:
        return []
    pod = {
        "metadata": {"labels": {"app.kubernetes.io/name": name}},
        "spec": {
            "serviceAccountName": name,
            "containers": [
                {
                    "name": "router",
                    "image": IMAGES["sglang"].format(flags.release("sglang").version),
                    "command": argv,
                    "ports": [{"containerPort": sglang.ROUTER_PORT}],
                }
            ],
        },
    }
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": name}}, "template": pod},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {
                "selector": {"app.kubernetes.io/name": name},
                "ports": [{"port": sglang.ROUTER_PORT, "targetPort": sglang.ROUTER_PORT}],
            },
        },
    ]


def manifest(sc: Scenario, engine: str, release: flags.Release, router: flags.Release | None, title: str) -> str:
    """The manifest of one engine: a LeaderWorkerSet per pool it can run, SGLang's router in front."""
    disagg = sc.deployment.mode == "disaggregated"
    docs: list[dict[str, Any]] = []
    notes: list[str] = []
    for role, pool in roles(sc).items():
        if engine == "vllm" and (why := vllm.expressible(release, pool)) is not None:
            notes.append(f"{role} pool: {why}")
            continue
        if engine == "sglang":
            make = lambda s, role=role, pool=pool: sglang.server(sc, release, pool, s, role, disagg)  # noqa: E731
            port = sglang.PORT
        else:
            make = lambda s, role=role, pool=pool: vllm.server(sc, release, pool, s, role, disagg)  # noqa: E731
            port = vllm.PORT
        bad = [p for node in (0, 1)[: pool.nodes] for p in release.problems(make(_slot(sc, role, pool, node)).argv)]
        if bad:
            notes.append(f"{role} pool: not written: {'; '.join(dict.fromkeys(bad))}")
            continue
        docs.append(_lws(engine, release, sc, role, pool, make, port))
    if engine == "sglang" and router is not None and docs:
        docs += _router(sc, router)
    elif engine == "vllm" and disagg:
        notes.append("vLLM serves no prefill/decode router itself: put a disaggregation proxy in front")
    head = [
        f"# {comment(title)}",
        f"# Kubernetes manifest for {release.label}: a LeaderWorkerSet (leaderworkerset.x-k8s.io) per pool, each",
        "# group one instance over its nodes, running the commands of the launch script with the hosts and ranks",
        f"# LeaderWorkerSet gives each pod ({LEADER}, {WORKER_INDEX}). Images: the engine's published ones, by tag.",
        *(f"# note: {comment(n)}" for n in notes),
    ]
    body = yaml.safe_dump_all(docs, sort_keys=False, width=120) if docs else ""
    return "\n".join(head) + "\n" + body
