"""`/metrics` of workers and repositories as Prometheus reads them (issue 15, build item 5)."""

from __future__ import annotations

import math

import aiohttp
import pytest

from pan.http.addresses import free_port
from pan.ingest.server import send_lines
from pan.repository.server import RepositoryServer
from pan.util.metrics import MetricsText
from tests.conftest import HOST, WorkerGroup, forwarder, make_workflow, sensor_row, wait_until
from tests.support import prometheus

STREAMS = ["SENSOR4", "SENSOR8"]


async def scrape(port: int) -> tuple[str, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://{HOST}:{port}/metrics",
                                                                timeout=aiohttp.ClientTimeout(total=30)) as answer:
        assert answer.status == 200
        return answer.headers["Content-Type"], await answer.text()


def check_conventions(text: str) -> None:
    """Parsed by Prometheus's parser; no stream in a name; counters end in _total; HELP on every family."""
    families = list(prometheus.text_string_to_metric_families(text))
    assert families
    for family in families:
        assert family.documentation, family.name
        for sample in family.samples:
            assert not any(stream in sample.name for stream in STREAMS), sample
            if family.type == "counter":
                assert sample.name.endswith(("_total", "_created")), sample
            if sample.name.endswith("_bucket"):
                bound = sample.labels["le"]
                assert bound == "+Inf" or len(repr(float(bound))) <= 16, sample  # no float noise


async def test_worker_and_repository_metrics_follow_prometheus_conventions(
        repository: RepositoryServer, workers: WorkerGroup) -> None:
    specs = [forwarder("F", STREAMS),
             {"name": "M", "type": "merge", "host": HOST, "port": free_port(), "inputs": STREAMS,
              "params": {"output": "MERGED"}}]
    producer, merger = await workers.start(make_workflow(repository.port, specs))
    await send_lines(HOST, specs[0]["params"]["ingest_port"],
                     [sensor_row(4 if n % 2 else 8, n * 10**9).encode() for n in range(200)] + [b"4,oops"],
                     timeout_s=30)
    await wait_until(lambda: all(i.buffer.last == 99 for i in merger.inputs.values())
                     and merger.outputs["MERGED"].buffer.last >= 0, timeout_s=60)

    content_type, text = await scrape(producer.server.port)
    assert content_type.startswith("text/plain") and "version=0.0.4" in content_type
    check_conventions(text)
    assert prometheus.value(text, "pan_output_appended_total", stream="SENSOR4", worker="F") == 100
    assert prometheus.value(text, "pan_component_per_stream", stream="SENSOR8") == 100  # a map: stream as a label
    _, text = await scrape(merger.server.port)
    check_conventions(text)
    assert prometheus.value(text, "pan_input_received_total", input="SENSOR4", worker="M") == 100
    assert prometheus.value(text, "pan_ordering_delay_seconds_count", worker="M") > 0
    _, text = await scrape(repository.port)
    check_conventions(text)
    assert prometheus.value(text, "pan_repository_streams") == 4  # SENSOR4, SENSOR8, MERGED, MERGED_late


def test_histogram_bounds_in_seconds_without_float_noise() -> None:
    metrics = MetricsText(worker="W")
    metrics.add_histogram("pan_x_seconds", [(10**9, 1), (3 * 10**9, 4), (math.inf, 5)], 7 * 10**9, 5, scale=1e-12,
                          help="a test histogram")
    text = metrics.render()
    assert prometheus.value(text, "pan_x_seconds_bucket", le="0.001") == 1
    assert prometheus.value(text, "pan_x_seconds_bucket", le="0.003") == 4
    assert prometheus.value(text, "pan_x_seconds_sum") == pytest.approx(0.007)
    with pytest.raises(ValueError, match="labels"):
        metrics.add("pan_x_seconds", 1, "gauge", worker_extra="y")
