"""SGLang's benchmark client's random dataset: the lengths `python -m sglang.bench_serving --dataset-name random`
sends, in its order.

A published run of it is reproducible request by request: the client seeds numpy's global generator with its
`--seed` (default 1) and draws every input length, then every output length (sglang/bench_serving.py,
`sample_random_requests`, as released in sglang 0.5.6.post1 on PyPI):

    input_lens = np.random.randint(max(int(input_len * range_ratio), 1), input_len + 1, size=num_prompts)
    output_lens = np.random.randint(int(output_len * range_ratio), output_len + 1, size=num_prompts)

Later clients (`compute_random_lens`, sglang 0.5.8 on PyPI; the published runs place the change at 0.5.6.post2,
whose outputs print one token a request more) draw the outputs from max(..., 1) like the inputs: at range ratio 0
the same stream, one token longer each. So a run's lengths follow from its flags alone.
The SGLang cookbook's DeepSeek-R1 page (0.5.6.post1) prints "Total input tokens: 41941" and "Total generated
tokens: 4210" for `--random-input-len 8000 --random-output-len 1000 --num-prompts 10`; these draws sum to exactly
that (tests/test_bench_random.py).
"""

from __future__ import annotations

import numpy as np

from simulator.config.scenario import BenchRandom


def lengths(b: BenchRandom, requests: int) -> tuple[list[int], list[int]]:
    """The prompt and output lengths of the run's `requests` requests, in the order the client sends them (an
    output drawn as 0, possible with `zero_outputs`, is served as 1 token: every request here generates one)."""
    draw = np.random.RandomState(b.seed)  # the legacy generator numpy's global `np.random.seed` seeds
    p, o = b.prompt_tokens(), b.output_tokens()  # the uniform ranges it draws from (outputs from 1)
    prompts = draw.randint(p.low, p.high + 1, size=requests)
    outputs = draw.randint(int(b.output_len * b.range_ratio) if b.zero_outputs else o.low, o.high + 1, size=requests)
    return prompts.tolist(), np.maximum(outputs, 1).tolist()
