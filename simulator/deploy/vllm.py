"""vLLM launch commands for a scenario's layout (`vllm serve` per instance, per node where DP ranks span nodes),
and what vLLM cannot express of it.

Flags are those of vLLM 0.33.0 (its argument parser is vendored in tests/fixtures/engines;
tests/test_launch_flags.py checks every flag written in this module against it). vLLM's parallel layout is
attention TP x DP with experts over all of them (`--enable-expert-parallel`: EP = TP x DP), so the
simulator's `tp` GPUs per instance are `--tensor-parallel-size tp/dp --data-parallel-size dp`.
"""

from __future__ import annotations

import json

from simulator.config.scenario import Pool, Scenario
from simulator.deploy.command import Command, Launch, Slot, host, roles, slots

ENGINE = "vLLM 0.33.0"
PORT = 8000  # vllm serve's default port
DP_RPC_PORT = 13345  # where the DP ranks of one instance spanning nodes meet

# --kv-cache-dtype: "auto" is the model's own dtype (BF16 for these checkpoints).
KV_DTYPE = {"bf16": "auto", "fp8_e4m3": "fp8_e4m3"}
# --quantization as for SGLang (simulator/deploy/sglang.py): None reads the method from the checkpoint.
QUANTIZATION: dict[str, str | None] = {
    "bf16": None,
    "fp8": "fp8",
    "int4": None,
    "w4a8": None,
    "nvfp4": "modelopt_fp4",
    "mxfp4": "mxfp4",
}


def expressible(pool: Pool) -> str | None:
    """Why vLLM cannot run this pool's layout, or None when it can."""
    if pool.ep not in (1, pool.tp):
        return (
            f"ep {pool.ep} of tp {pool.tp}: vLLM's expert parallelism spans every GPU of the instance "
            "(EP = TP x DP) or none; no vLLM command is written for this pool"
        )
    return None


def _server(sc: Scenario, pool: Pool, s: Slot, disagg: bool) -> Command:
    argv = ["vllm", "serve", host("MODEL_PATH"), "--host", "0.0.0.0", "--port", str(PORT + s.slot)]
    atp = pool.tp // pool.dp
    argv += ["--tensor-parallel-size", str(atp)]
    if pool.dp > 1:
        argv += ["--data-parallel-size", str(pool.dp)]
        if pool.nodes > 1:
            local = pool.dp // pool.nodes
            argv += ["--data-parallel-size-local", str(local)]
            argv += ["--data-parallel-address", host(s.head), "--data-parallel-rpc-port", str(DP_RPC_PORT)]
            if s.node:
                argv += ["--headless", "--data-parallel-start-rank", str(s.node * local)]
    if pool.ep > 1:
        argv += ["--enable-expert-parallel"]
    if pool.two_batch_overlap:
        argv += ["--enable-dbo"]  # vLLM's dual-batch overlap: the same micro-batch overlap of all-to-alls
    if pool.redundant_experts:
        argv += ["--enable-eplb", "--eplb-config", json.dumps({"num_redundant_experts": pool.redundant_experts})]
    quant = QUANTIZATION[pool.weights]
    if quant is not None:
        argv += ["--quantization", quant]
    argv += ["--kv-cache-dtype", KV_DTYPE[pool.kv_cache]]
    # mem_fraction -> --gpu-memory-utilization: vLLM's share covers weights, activations and KV cache; the
    # capacity model's covers weights and cache with the activation reserve apart (close, not the same).
    argv += ["--gpu-memory-utilization", f"{pool.mem_fraction:g}"]
    # Each DP rank of vLLM schedules on its own: the instance's limits split over dp, as the simulator splits them.
    argv += ["--max-num-seqs", str(max(1, pool.max_running // pool.dp))]
    argv += ["--max-num-batched-tokens", str(max(1, pool.max_batch_tokens // pool.dp))]
    # chunk_size -> --long-prefill-token-threshold: the most prompt tokens one request computes in a step.
    argv += ["--long-prefill-token-threshold", str(pool.chunk_size)]
    argv += ["--block-size", str(pool.page_size)]
    if sc.prefix_cache.enabled:
        argv += ["--enable-prefix-caching"]
    spec = pool.speculative
    if spec is not None:
        cfg: dict[str, object] = {"num_speculative_tokens": spec.draft_tokens}
        cfg |= {"method": "mtp"} if spec.method == "mtp" else {"model": host("DRAFT_MODEL_PATH")}
        argv += ["--speculative-config", json.dumps(cfg)]
    if disagg:  # NIXL moves the KV cache between prefill and decode instances
        argv += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
    return Command(s.what, tuple(argv), where=s.host)


def launch(sc: Scenario) -> Launch:
    """Every `vllm serve` process the layout needs, with notes for what vLLM does not express."""
    disagg = sc.deployment.mode == "disaggregated"
    commands: list[Command] = []
    notes: list[str] = []
    for role, pool in roles(sc).items():
        why = expressible(pool)
        if why is not None:
            notes.append(f"{role} pool: {why}")
            continue
        if pool.dp > 1 and pool.nodes == 1 and pool.tp < sc.hardware.gpus_per_node:
            notes.append(f"{role} pool: DP ranks of instances that share a node need distinct --data-parallel-rpc-port")
        for s in slots(sc, role, pool):
            c = _server(sc, pool, s, disagg)
            if s.per_node < sc.hardware.gpus_per_node:  # an instance sharing its node: name its GPUs
                gpus = ",".join(str(s.first_gpu + g) for g in range(s.per_node))
                c = Command(c.what, c.argv, (("CUDA_VISIBLE_DEVICES", gpus),), c.where)
            commands.append(c)
    if disagg:
        notes.append(
            "vLLM serves no prefill/decode router itself: put a disaggregation proxy in front of the instances "
            "above (vLLM's repository has example proxies); none is generated here"
        )
    elif sum(p.instances for p in roles(sc).values()) > 1:
        notes.append("several instances: put a load balancer in front (vLLM serves each instance on its own)")
    if not sc.prefix_cache.enabled:
        notes.append(
            "the scenario has no prefix cache; vLLM caches prefixes by default: turn that off for a like-for-like run"
        )
    return Launch(ENGINE, tuple(commands), tuple(notes))
