"""A stand-in Prometheus for fleet's tests: the JSON shapes /api/v1/query returns, answered at
the HTTP seam (the opener), and healthy nodes of gpudoctor's exporter series."""

from __future__ import annotations

import io
import json
import urllib.parse

from gpudoctor import fleet

NOW = 1_800_000_000.0


def vec(*series):
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [NOW, str(value)]} for labels, value in series]}}


def gpu(instance, index, **extra):
    labels = {"instance": instance, "job": "gpudoctor", "gpu": str(index)}
    labels.update(extra)
    return labels


class FakeProm:
    """Answers each query by the first rule whose prefix the query starts with."""

    def __init__(self, rules):
        self.rules = rules
        self.seen = []

    def __call__(self, request, timeout):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.full_url).query)["query"][0]
        self.seen.append(query)
        for prefix, answer in self.rules:
            if query.startswith(prefix):
                if isinstance(answer, Exception):
                    raise answer
                return io.BytesIO(json.dumps(answer).encode())
        return io.BytesIO(json.dumps(vec()).encode())


def healthy_node(instance, n=1):
    current = []
    for i in range(n):
        current += [
            (dict(gpu(instance, i), __name__="gpudoctor_gpu_up"), 1),
            (dict(gpu(instance, i), __name__="gpudoctor_gpu_utilization_ratio"), 0.93),
            (dict(gpu(instance, i), __name__="gpudoctor_gpu_memory_used_bytes"), 40 * 2**30),
            (dict(gpu(instance, i), __name__="gpudoctor_gpu_memory_total_bytes"), 80 * 2**30),
            (dict(gpu(instance, i), __name__="gpudoctor_gpu_temperature_celsius"), 61),
            (dict(gpu(instance, i), __name__="gpudoctor_gpu_power_watts"), 512.5),
        ]
    current += [({"__name__": "gpudoctor_nvml_up", "instance": instance, "job": "gpudoctor"}, 1),
                ({"__name__": "gpudoctor_sample_age_seconds", "instance": instance, "job": "gpudoctor"}, 1.2)]
    info = [(gpu(instance, i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{instance}-{i}"), 1) for i in range(n)]
    return current, info


def make(nodes, up=None, extra=(), dcgm=()):
    current, info = [], []
    for instance, n in nodes:
        c, i = healthy_node(instance, n)
        current += c
        info += i
    # one series per label set, as in Prometheus: an extra series replaces the healthy one
    merged = {tuple(sorted(labels.items())): (labels, value) for labels, value in current + list(extra)}
    current = list(merged.values())
    up = up or {instance: 1 for instance, _ in nodes}
    return FakeProm([
        ("up", vec(*[({"instance": k, "job": "gpudoctor"}, v) for k, v in up.items()])),
        ("{__name__=~", vec(*current)),
        ("last_over_time(gpudoctor_gpu_info", vec(*info)),
        ("last_over_time({__name__=~\"DCGM_FI_DEV_GPU_TEMP", vec(*dcgm)),
        ("last_over_time(gpudoctor_sample_timestamp_seconds",
         vec(*[({"instance": k, "job": "gpudoctor"}, NOW - 600) for k in up])),
    ])


def view_of(fake, matchers=()):
    client = fleet.Prometheus("http://prom.example:9090", opener=fake)
    return fleet.collect(client, matchers, now=NOW)
