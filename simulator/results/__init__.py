"""Results: the Result document, its metrics, the step anatomy and the reports printed from it."""
