"""SGLang launch commands for a scenario's layout: `python -m sglang.launch_server` per instance (per node where
an instance spans nodes) and, for more than one instance or disaggregated pools, the SGLang router in front.

Flags are those of SGLang 0.5.14 and sglang-router 0.3.2 (the releases whose argument parsers are vendored in
tests/fixtures/engines; tests/test_launch_flags.py checks every flag written in this module against them).
Where a scenario field maps to a flag by judgement rather than by name, the comment says why.
"""

from __future__ import annotations

from simulator.config.scenario import Pool, Scenario
from simulator.deploy.command import Command, Launch, Slot, host, roles, slots

ENGINE = "SGLang 0.5.14 (router: sglang-router 0.3.2)"
PORT = 30000  # launch_server's default port
BOOTSTRAP_PORT = 8998  # --disaggregation-bootstrap-port's default: where decode finds a prefill's KV
DIST_PORT = 20000  # where the nodes of one multi-node instance meet (--dist-init-addr)
ROUTER_PORT = 8000

# --kv-cache-dtype: SGLang 0.5.14 names both of the simulator's cache formats among its choices.
KV_DTYPE = {"bf16": "bf16", "fp8_e4m3": "fp8_e4m3"}
# --quantization: how the engine gets the pool's weight format. None: from the checkpoint itself (an INT4
# checkpoint's config names its scheme, e.g. Kimi K2.6's INT4 QAT release; SGLang has no online INT4).
# fp8 quantizes a BF16 checkpoint online and agrees with an FP8 checkpoint's own config; w4a8, nvfp4 and mxfp4
# need a checkpoint in that format, whose method these name.
QUANTIZATION: dict[str, str | None] = {
    "bf16": None,
    "fp8": "fp8",
    "int4": None,
    "w4a8": "w4afp8",
    "nvfp4": "modelopt_fp4",
    "mxfp4": "mxfp4",
}
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


def _server(sc: Scenario, pool: Pool, s: Slot, mode: str | None) -> Command:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", host("MODEL_PATH")]
    argv += ["--host", "0.0.0.0", "--port", str(PORT + s.slot)]
    argv += ["--tp-size", str(pool.tp)]
    if s.slot or s.first_gpu:
        argv += ["--base-gpu-id", str(s.first_gpu)]
    if pool.nodes > 1:
        argv += ["--nnodes", str(pool.nodes), "--node-rank", str(s.node)]
        argv += ["--dist-init-addr", f"{host(s.head)}:{DIST_PORT}"]
    if pool.dp > 1:  # DP attention: dp attention ranks; the experts over all tp GPUs (ep = tp) or split (ep = 1)
        argv += ["--dp-size", str(pool.dp), "--enable-dp-attention"]
        if pool.ep > 1:
            argv += ["--moe-a2a-backend", "deepep"]  # the wide-EP model prices DeepEP-style all-to-alls
    if pool.ep > 1:
        argv += ["--ep-size", str(pool.ep)]
    if pool.two_batch_overlap:
        argv += ["--enable-two-batch-overlap"]
    if pool.redundant_experts:  # EPLB places the replicas
        argv += ["--ep-num-redundant-experts", str(pool.redundant_experts), "--enable-eplb"]
    quant = QUANTIZATION[pool.weights]
    if quant is not None:
        argv += ["--quantization", quant]
    argv += ["--kv-cache-dtype", KV_DTYPE[pool.kv_cache]]
    # mem_fraction -> --mem-fraction-static: SGLang's is (weights + KV pool) / GPU memory, the share the capacity
    # model gives weights and cache before its own reserve.
    argv += ["--mem-fraction-static", f"{pool.mem_fraction:g}"]
    # max_running counts the instance, as --max-running-requests does (SGLang divides it by dp under DP attention).
    argv += ["--max-running-requests", str(pool.max_running)]
    argv += ["--chunked-prefill-size", str(pool.chunk_size)]
    argv += ["--max-prefill-tokens", str(pool.max_batch_tokens)]  # the token budget of one prefill batch
    argv += ["--page-size", str(pool.page_size)]
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
    if mode is not None:
        argv += ["--disaggregation-mode", mode]
        # RDMA KV transfer (the scenario's deployment.transfer link); mooncake is SGLang's default backend
        argv += ["--disaggregation-transfer-backend", "mooncake"]
        if mode == "prefill":
            argv += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT + s.slot)]
    return Command(s.what, tuple(argv), where=s.host)


def _url(s: Slot) -> str:
    return f"http://{host(s.host)}:{PORT + s.slot}"


def launch(sc: Scenario) -> Launch:
    """Every server process of the layout, then the router."""
    disagg = sc.deployment.mode == "disaggregated"
    commands: list[Command] = []
    heads: dict[str, list[Slot]] = {}
    for role, pool in roles(sc).items():
        for s in slots(sc, role, pool):
            commands.append(_server(sc, pool, s, role if disagg else None))
            if s.node == 0:
                heads.setdefault(role, []).append(s)
    router = ["python", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    policy = POLICY[sc.routing.policy]
    router += ["--policy", policy]
    if policy == "cache_aware":  # the thresholds the simulation routed by (docs/routing.md)
        r = sc.routing
        router += [
            "--cache-threshold",
            f"{r.cache_threshold:g}",
            "--balance-abs-threshold",
            str(r.balance_abs_threshold),
        ]
        router += ["--balance-rel-threshold", f"{r.balance_rel_threshold:g}"]
    notes = [
        f"routing.policy {sc.routing.policy} runs as the router's --policy {policy}",
        f"deployment.transfer ({sc.deployment.transfer.bandwidth_gbs:g} GB/s per decode instance) is the "
        "network the mooncake backend uses; pass --disaggregation-ib-device where the NICs need naming"
        if disagg
        else "",
    ]
    if disagg:
        router.append("--pd-disaggregation")
        for s in heads["prefill"]:
            router += ["--prefill", _url(s), str(BOOTSTRAP_PORT + s.slot)]
        for s in heads["decode"]:
            router += ["--decode", _url(s)]
        commands.append(Command("router (prefill/decode disaggregation)", tuple(router)))
    elif len(heads["server"]) > 1:
        router += ["--worker-urls", *(_url(s) for s in heads["server"])]
        commands.append(Command("router", tuple(router)))
    return Launch(ENGINE, tuple(commands), tuple(n for n in notes if n))
