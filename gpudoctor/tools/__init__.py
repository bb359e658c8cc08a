"""Developer commands over a source checkout, beside the CLI at the top of the layers:
``python -m gpudoctor.tools.regenerate`` rewrites the files made from the reading catalogue."""
