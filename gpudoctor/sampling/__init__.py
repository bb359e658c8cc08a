"""The sampling layer: the one Sampler over time (``sampler``), what the front ends share to
show its snapshots (``presentation``) and the recorder that writes them to a file (``recorder``).
Imports backends and the foundation, never a producer or a front end."""
