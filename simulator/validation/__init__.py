"""The validation suite: published end-to-end measurements, what the model predicts for each, its error."""
