"""vLLM launch commands for a scenario's layout (`vllm serve` per instance, per node where an instance spans nodes),
and what vLLM cannot express of it.

vLLM's parallel layout is attention TP x DP with experts over all of them (`--enable-expert-parallel`: EP = TP x DP),
so the simulator's `tp` GPUs per instance are `--tensor-parallel-size tp/dp --data-parallel-size dp`. Each command
is checked against the release's flags (`simulator.deploy.flags`); where a release lacks a flag the layout needs
(`--all2all-backend` before it existed: the environment variable of those releases), the file says so instead of a
command. (An instance spans nodes only by its DP ranks: the simulator keeps attention TP within a node.)
"""

from __future__ import annotations

import json

from simulator.config.scenario import Pool, Scenario
from simulator.deploy import flags
from simulator.deploy.command import Command, Launch, Slot, checked, host, memory, roles, slots, weights_source

PORT = 8000  # vllm serve's default port
DP_RPC_PORT = 13345  # where the DP ranks of one instance spanning nodes meet

# --kv-cache-dtype: "auto" is the model's own dtype (BF16 activations for these checkpoints).
KV_DTYPE = {"bf16": ("auto",), "fp8_e4m3": ("fp8_e4m3", "fp8")}
ONLINE = {"fp8": "fp8"}  # as for SGLang: FP8 quantized from a BF16 checkpoint as it loads
# The all-to-all the model prices under DP attention with EP: DeepEP's throughput kernels for prefill (a token sent
# once per node), its low-latency ones for decode and colocated batches.
ALL2ALL = {"prefill": "deepep_high_throughput", "decode": "deepep_low_latency", "server": "deepep_low_latency"}


def expressible(r: flags.Release, pool: Pool) -> str | None:
    """Why vLLM cannot run this pool's layout, or None when it can."""
    if pool.ep not in (1, pool.tp):
        return (
            f"ep {pool.ep} of tp {pool.tp}: vLLM's expert parallelism spans every GPU of the instance "
            "(EP = TP x DP) or none; no vLLM command is written for this pool"
        )
    return None


def _parallel(r: flags.Release, pool: Pool, s: Slot, role: str) -> tuple[list[str], list[tuple[str, str]]]:
    argv = ["--tensor-parallel-size", str(pool.tp // pool.dp)]
    env: list[tuple[str, str]] = []
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
        if pool.dp > 1:  # the model prices DeepEP's all-to-alls wherever DP attention meets EP
            if r.has("--all2all-backend"):
                argv += ["--all2all-backend", ALL2ALL[role]]
            else:  # releases before the flag read the backend from the environment
                env.append(("VLLM_ALL2ALL_BACKEND", ALL2ALL[role]))
    if pool.two_batch_overlap:
        argv += ["--enable-dbo"]  # vLLM's dual-batch overlap: the same micro-batch overlap of all-to-alls
    if pool.redundant_experts:
        argv += ["--enable-eplb", "--eplb-config", json.dumps({"num_redundant_experts": pool.redundant_experts})]
    return argv, env


def server(sc: Scenario, r: flags.Release, pool: Pool, s: Slot, role: str, disagg: bool) -> Command:
    argv = ["vllm", "serve", host("MODEL_PATH")]
    if sc.model.trust_remote_code:
        argv += ["--trust-remote-code"]
    argv += ["--host", "0.0.0.0", "--port", str(PORT + s.slot)]
    parallel, env = _parallel(r, pool, s, role)
    argv += parallel
    if pool.weights != sc.model.release and pool.weights in ONLINE:
        argv += ["--quantization", ONLINE[pool.weights]]
    argv += ["--kv-cache-dtype", r.first_choice("--kv-cache-dtype", KV_DTYPE[pool.kv_cache]) or "auto"]
    # vLLM's --gpu-memory-utilization covers its whole process (weights, activations, CUDA graphs, KV cache); the
    # plan's budget is the KV cache alone, which --kv-cache-memory-bytes sets exactly (utilization then unused).
    mem = memory(sc, pool)
    if r.has("--kv-cache-memory-bytes"):
        argv += ["--kv-cache-memory-bytes", str(mem.kv_bytes)]
    else:
        argv += ["--gpu-memory-utilization", f"{mem.static_fraction:.4g}"]
    # Each DP rank of vLLM schedules on its own: the instance's limits split over dp, as the simulator splits them.
    argv += ["--max-num-seqs", str(max(1, pool.max_running // pool.dp))]
    argv += ["--max-num-batched-tokens", str(max(1, pool.max_batch_tokens // pool.dp))]
    # chunk_size -> --long-prefill-token-threshold: the most prompt tokens one request computes in a step.
    argv += ["--long-prefill-token-threshold", str(pool.chunk_size)]
    argv += ["--block-size", str(pool.page_size)]
    argv += ["--enable-prefix-caching"] if sc.prefix_cache.enabled else ["--no-enable-prefix-caching"]
    spec = pool.speculative
    if spec is not None:
        cfg: dict[str, object] = {"num_speculative_tokens": spec.draft_tokens}
        cfg |= (
            {"method": "mtp"} if spec.method == "mtp" else {"method": "draft_model", "model": host("DRAFT_MODEL_PATH")}
        )
        argv += ["--speculative-config", json.dumps(cfg)]
    if disagg:  # NIXL moves the KV cache between prefill and decode instances
        argv += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
    if s.per_node < sc.hardware_of(pool).gpus_per_node:  # an instance sharing its node: name its GPUs
        env.append(("CUDA_VISIBLE_DEVICES", ",".join(str(s.first_gpu + g) for g in range(s.per_node))))
    return Command(s.what, tuple(argv), tuple(env), s.host)


def launch(sc: Scenario, release: flags.Release | None = None) -> Launch:
    """Every `vllm serve` process the layout needs, with notes for what vLLM does not express; the release
    defaults to the newest known."""
    r = release or flags.release("vllm")
    disagg = sc.deployment.mode == "disaggregated"
    commands: list[Command] = []
    notes = [weights_source(sc)]
    for role, pool in roles(sc).items():
        why = expressible(r, pool)
        if why is not None:
            notes.append(f"{role} pool: {why}")
            continue
        if pool.recv_interval > 1:
            notes.append(
                f"{role} pool: recv_interval {pool.recv_interval} is SGLang's --scheduler-recv-interval; vLLM's "
                "scheduler takes new requests every step, as the plan does not"
            )
        if pool.attention_backend == "triton":
            notes.append(
                f"{role} pool: attention_backend triton is priced as SGLang's Triton kernels; vLLM's own Triton "
                "backends are other kernels, so the command keeps vLLM's default attention"
            )
        if pool.dp > 1 and pool.nodes == 1 and pool.tp < sc.hardware_of(pool).gpus_per_node:
            notes.append(f"{role} pool: DP ranks of instances that share a node need distinct --data-parallel-rpc-port")
        commands += [server(sc, r, pool, s, role, disagg) for s in slots(sc, role, pool)]
    if disagg:
        notes.append(
            "vLLM serves no prefill/decode router itself: put a disaggregation proxy in front of the instances "
            "above (vLLM's repository has example proxies); none is generated here"
        )
    elif sum(p.instances for p in roles(sc).values()) > 1:
        notes.append("several instances: put a load balancer in front (vLLM serves each instance on its own)")
    kept, refused = checked(commands, lambda _: r)
    return Launch(r.label, kept, tuple(n for n in notes if n) + refused, (r,), sc.model.checkpoint)
