"""The replay executor: a small inference engine's model runner for one tensor-parallel rank, driven step by
step by the simulator's own scheduler, page cache and integrity tracker (the real clock of ARCHITECTURE.md).

Modules by concept: `device` (the device, its timer and op-family clock), `weights` (random weights in a pool's
formats), `paged_kv` (the KV cache tensor laid out by the allocator's block tables), `attention` (MLA and GQA
over it), `moe` (a real top-k router and expert GEMMs), `runner` (one rank's forward pass), `step` (a plan turned
into the runner's inputs), `integrity` (the page check on device tensors), `clock` (the step timer: execute,
bucket, reuse, budget), `replay` and `compare` (the two CLI verbs), `gpu_replay` (`make gpu-replay`).

Not done: CUDA graphs for decode steps (each step launches its kernels one by one), and the KV transfer's data
movement (the link is priced; the decode side's pages of a transferred prompt are not filled).
"""
