"""The serving model both clocks share: sequences, the scheduler, the decode batch, the paged KV cache, block
tables, the prefix index, the integrity tracker, routing, and the rank layer (building an instance's ranks from a
pool, beginning a plan, the transfer queue and hand-off order). Nothing here knows about time: a clock drives it."""
