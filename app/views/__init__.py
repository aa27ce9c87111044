"""The page's views, one module each; they draw what `app/` computes."""
