"""Answers to the planner's question: the highest rate within the SLO, the fewest GPUs for a rate, Pareto
frontiers, error bars, and the parallel backends that run many simulations (local processes or Ray)."""
