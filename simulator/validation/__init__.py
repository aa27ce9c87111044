"""The validation corpus: published end-to-end measurements, what the model predicts for each, its error with its
whole source left out of the fit, and the bands beside answers that say how sure they are."""
