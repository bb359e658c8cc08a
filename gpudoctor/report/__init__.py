"""The runner layer: the report's probe runner (``runner``: picks probes and runs them in child
processes under time limits), the quick report (``quick``) and the comparison against a saved
baseline (``baseline``). Imports the producers and every layer below them."""
