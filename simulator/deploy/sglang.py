"""SGLang launch commands for a scenario's layout: `python -m sglang.launch_server` per instance (per node where
an instance spans nodes) and, for more than one instance or disaggregated pools, the SGLang router in front.

Each command is checked against the release's flags (`simulator.deploy.flags`, read from the released package):
where a release spells the layout differently (DP attention is `--attn-dp-size` from 0.5.23, `--dp-size`
with `--enable-dp-attention` before) the release's own spelling is written, and a command the release would
refuse is left out with a note saying why. Where a scenario field maps to a flag by judgement rather than by
name, the comment says why.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.config.scenario import Pool, Scenario
from simulator.deploy import flags
from simulator.deploy.command import Command, Launch, Slot, checked, host, memory, roles, slots, weights_source

PORT = 30000  # launch_server's default port
BOOTSTRAP_PORT = 8998  # --disaggregation-bootstrap-port's default: where decode finds a prefill's KV
DIST_PORT = 20000  # where the nodes of one multi-node instance meet (--dist-init-addr)
ROUTER_PORT = 8000

# --kv-cache-dtype, the release's first choice that names the format (older releases say "auto" for the model's
# BF16, newer ones name bf16).
KV_DTYPE = {"bf16": ("bf16", "auto"), "fp8_e4m3": ("fp8_e4m3",)}
# --quantization where the engine converts a checkpoint as it loads it: FP8 from a BF16 release. Other formats need
# a checkpoint in that format, whose own config names its method (command.weights_source says so).
ONLINE = {"fp8": "fp8"}
# The router's policy for the scenario's routing (judgement where the names differ): cache_aware, power_of_two and
# round_robin are the router's own; least_kv sends work to the less loaded of two workers (power_of_two);
# session_affinity and prefix_aware both keep a conversation where its prefix is cached (cache_aware, SGLang's
# prefix-tree router); scorers, the gateway's endpoint picker, has no SGLang router policy: cache_aware weighs the
# same load and prefix signals.
POLICY = {
    "cache_aware": "cache_aware",
    "power_of_two": "power_of_two",
    "scorers": "cache_aware",
    "round_robin": "round_robin",
    "least_kv": "power_of_two",
    "session_affinity": "cache_aware",
    "prefix_aware": "cache_aware",
}
# DeepEP's mode by role: prefill's big batches take the normal kernels (a token sent once per node: the
# node-deduplicated dispatch the prefill pool is priced with), decode the low-latency ones; colocated: auto.
DEEPEP_MODE = {"prefill": "normal", "decode": "low_latency", "server": "auto"}


def _parallel(r: flags.Release, pool: Pool, role: str) -> list[str]:
    argv = ["--tp-size", str(pool.tp)]
    if pool.dp > 1:  # DP attention: dp attention ranks inside the TP group
        if r.has("--attn-dp-size"):
            argv += ["--attn-dp-size", str(pool.dp)]
        else:
            argv += ["--dp-size", str(pool.dp), "--enable-dp-attention"]
    if pool.ep > 1:
        argv += ["--ep-size", str(pool.ep)]
        if pool.dp > 1:  # the model prices DeepEP's all-to-alls wherever DP attention meets EP
            argv += ["--moe-a2a-backend", "deepep", "--deepep-mode", DEEPEP_MODE[role]]
    if pool.two_batch_overlap:
        argv += ["--enable-two-batch-overlap"]
    if pool.redundant_experts:  # EPLB places the replicas
        argv += ["--ep-num-redundant-experts", str(pool.redundant_experts), "--enable-eplb"]
    return argv


def server(sc: Scenario, r: flags.Release, pool: Pool, s: Slot, role: str, disagg: bool) -> Command:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", host("MODEL_PATH")]
    if sc.model.trust_remote_code:
        argv += ["--trust-remote-code"]
    argv += ["--host", "0.0.0.0", "--port", str(PORT + s.slot)]
    if s.slot or s.first_gpu:
        argv += ["--base-gpu-id", str(s.first_gpu)]
    if pool.nodes > 1:
        argv += ["--nnodes", str(pool.nodes), "--node-rank", str(s.node)]
        argv += ["--dist-init-addr", f"{host(s.head)}:{DIST_PORT}"]
    argv += _parallel(r, pool, role)
    if pool.weights != sc.model.release and pool.weights in ONLINE:
        argv += ["--quantization", ONLINE[pool.weights]]
    kv = r.first_choice("--kv-cache-dtype", KV_DTYPE[pool.kv_cache]) or KV_DTYPE[pool.kv_cache][0]
    argv += ["--kv-cache-dtype", kv]
    # SGLang's static fraction is (weights + KV pool) / GPU memory: the capacity model's budget before its
    # reserve, so the reserve comes off the fraction (memory() converts).
    argv += ["--mem-fraction-static", f"{memory(sc, pool).static_fraction:.4g}"]
    # max_running counts the instance, as --max-running-requests does (SGLang divides it by dp under DP attention).
    argv += ["--max-running-requests", str(pool.max_running)]
    argv += ["--chunked-prefill-size", str(pool.chunk_size)]
    argv += ["--max-prefill-tokens", str(pool.max_batch_tokens)]  # the token budget of one prefill batch
    argv += ["--page-size", str(pool.page_size)]
    if pool.recv_interval > 1:
        argv += ["--scheduler-recv-interval", str(pool.recv_interval)]
    if pool.attention_backend == "triton":
        argv += ["--attention-backend", "triton"]
    if not sc.prefix_cache.enabled:
        argv += ["--disable-radix-cache"]
    spec = pool.speculative
    if spec is not None:
        # MTP drafts with the model's own next-token layers (SGLang's NEXTN); a separate draft model is
        # STANDALONE. One draft chain (topk 1) of draft_tokens steps: draft_tokens + 1 tokens verified per step.
        algo = "NEXTN" if spec.method == "mtp" else "STANDALONE"
        argv += ["--speculative-algorithm", algo, "--speculative-num-steps", str(spec.draft_tokens)]
        argv += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(spec.draft_tokens + 1)]
        if spec.method == "draft":
            argv += ["--speculative-draft-model-path", host("DRAFT_MODEL_PATH")]
    if disagg:
        argv += ["--disaggregation-mode", role]
        # RDMA KV transfer (the scenario's deployment.transfer link); mooncake is SGLang's default backend
        argv += ["--disaggregation-transfer-backend", "mooncake"]
        if role == "prefill":
            argv += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT + s.slot)]
    return Command(s.what, tuple(argv), where=s.host)


def _url(s: Slot) -> str:
    return f"http://{host(s.host)}:{PORT + s.slot}"


def launch(sc: Scenario, release: flags.Release | None = None, router: flags.Release | None = None) -> Launch:
    """Every server process of the layout, then the router; releases default to the newest known."""
    release = release or flags.release("sglang")
    router = router or flags.release("sglang-router")
    disagg = sc.deployment.mode == "disaggregated"
    commands: list[Command] = []
    notes = [weights_source(sc)]
    heads: dict[str, list[Slot]] = {}
    for role, pool in roles(sc).items():
        for s in slots(sc, role, pool):
            commands.append(server(sc, release, pool, s, role, disagg))
            if s.node == 0:
                heads.setdefault(role, []).append(s)
    argv = ["python", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    policy = POLICY[sc.routing.policy]
    argv += ["--policy", policy]
    if policy == "cache_aware":  # the thresholds the simulation routed by (docs/routing.md)
        r = sc.routing
        argv += ["--cache-threshold", f"{r.cache_threshold:g}", "--balance-abs-threshold", str(r.balance_abs_threshold)]
        argv += ["--balance-rel-threshold", f"{r.balance_rel_threshold:g}"]
    notes.append(f"routing.policy {sc.routing.policy} runs as the router's --policy {policy}")
    if disagg:
        notes.append(
            f"deployment.transfer ({sc.deployment.transfer.bandwidth_gbs:g} GB/s per decode instance) is the "
            "network the mooncake backend uses; pass --disaggregation-ib-device where the NICs need naming"
        )
        argv.append("--pd-disaggregation")
        for s in heads["prefill"]:
            argv += ["--prefill", _url(s), str(BOOTSTRAP_PORT + s.slot)]
        for s in heads["decode"]:
            argv += ["--decode", _url(s)]
        commands.append(Command("router (prefill/decode disaggregation)", tuple(argv)))
    elif len(heads["server"]) > 1:
        argv += ["--worker-urls", *(_url(s) for s in heads["server"])]
        commands.append(Command("router", tuple(argv)))
    engine = f"{release.label} (router: {router.label})"
    kept, refused = checked(commands, lambda c: router if "sglang_router.launch_router" in c.argv else release)
    return Launch(engine, kept, tuple(n for n in notes if n) + refused, (release, router), sc.model.checkpoint)


def split(launch: Launch) -> tuple[Launch, Launch | None]:
    """The servers' launch and the router's (its own package, its own script), or None without a router."""
    routers = tuple(c for c in launch.commands if "sglang_router.launch_router" in c.argv)
    servers = tuple(c for c in launch.commands if c not in routers)
    release, router = launch.releases
    ours = replace(launch, engine=release.label, commands=servers, releases=(release,))
    if not routers:
        return ours, None
    notes = tuple(n for n in launch.notes if n.startswith(("routing.policy", "not written: router")))
    return ours, Launch(router.label, routers, notes, (router,), launch.checkpoint)
