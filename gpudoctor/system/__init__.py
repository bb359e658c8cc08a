"""The foundation's second half, above :mod:`gpudoctor.core`: processes (start, stop, whole
trees, CPU wait), forks, signals, atomic files and safe JSON, the published training summaries
and the bounded pickle reader. Imports the standard library, psutil and ``gpudoctor.core``."""
