"""Developer commands over a source checkout, beside the CLI at the top of the layers:
``python -m gpudoctor.tools.regenerate`` rewrites the files made from the reading catalogue;
``python -m gpudoctor.tools.typecheck`` runs mypy over gpudoctor/ and probes/ as they are installed."""
