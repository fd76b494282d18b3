"""The replicator problem: no repeater pulls from itself or from its own level.

The topology is read the way an operator would: from each worker's `/streams`.
"""

from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import WorkerGroup, forwarder, get_json, make_workflow, repeater, wait_until

STREAMS = ["S1", "S2", "S3"]


async def topology(workers: list[Worker]) -> dict[str, dict[str, dict]]:
    """worker endpoint -> stream -> source publisher, as the workers report it."""
    edges: dict[str, dict[str, dict]] = {}
    for worker in workers:
        _, info = await get_json(f"http://127.0.0.1:{worker.server.port}/streams")
        edges[f"127.0.0.1:{info['port']}"] = {
            name: {**(inp["source"] or {}), "own_lvl": info["lvl"]} for name, inp in info["inputs"].items()
        }
    return edges


async def all_connected(workers: list[Worker]) -> bool:
    edges = await topology(workers)
    return all(source.get("port") for sources in edges.values() for source in sources.values())


def assert_no_replicator_problem(edges: dict[str, dict[str, dict]]) -> None:
    for endpoint, sources in edges.items():
        for stream, source in sources.items():
            assert f"{source['host']}:{source['port']}" != endpoint, f"{endpoint} pulls {stream} from itself"
            assert source["lvl"] < source["own_lvl"], f"{endpoint} pulls {stream} from level {source['lvl']}"


async def test_one_producer_two_repeaters(repository: RepositoryServer, workers: WorkerGroup) -> None:
    wf = make_workflow(
        repository.port, [forwarder("F", STREAMS), repeater("R1", STREAMS, 1), repeater("R2", STREAMS, 1)]
    )
    started = await workers.start(wf)
    for worker in started[:1]:
        for stream in STREAMS:
            worker.outputs[stream].append({"ts": 1})
    await wait_until(lambda: all_connected(started[1:]))
    edges = await topology(started[1:])
    assert_no_replicator_problem(edges)
    # Same-level repeaters can only use the producer.
    assert {source["port"] for sources in edges.values() for source in sources.values()} == {started[0].server.port}


async def test_three_levels_over_several_rounds(repository: RepositoryServer, workers: WorkerGroup) -> None:
    specs = [forwarder("F", STREAMS)]
    specs += [repeater(f"R{level}.{k}", STREAMS, level) for level in (1, 2, 3) for k in (1, 2)]
    started = await workers.start(make_workflow(repository.port, specs))
    repeaters = started[1:]
    for stream in STREAMS:
        started[0].outputs[stream].append({"ts": 1})
    await wait_until(lambda: all_connected(repeaters))
    assert_no_replicator_problem(await topology(repeaters))
    # Force re-subscriptions: stop one level-1 and one level-2 repeater; the rest must re-route legally.
    for gone in (repeaters[0], repeaters[2]):
        await gone.stop()
        workers.workers.remove(gone)
    remaining = [w for w in repeaters if w in workers.workers]
    for stream in STREAMS:
        started[0].outputs[stream].append({"ts": 2})

    async def all_caught_up() -> bool:
        return all(w.inputs[s].buffer.last == 1 for w in remaining for s in STREAMS)

    await wait_until(all_caught_up)
    edges = await topology(remaining)
    assert_no_replicator_problem(edges)
    gone_ports = {repeaters[0].server.port, repeaters[2].server.port}
    assert not {source["port"] for sources in edges.values() for source in sources.values()} & gone_ports
