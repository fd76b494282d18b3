"""pan/components/chain.py: a workflow's ordered components in one process, each fed its inputs in ts order."""

from __future__ import annotations

from typing import Any

import pytest

from pan.components.chain import ChainError, ComponentChain
from pan.components.testing import output_tuples
from pan.config.specs import Workflow
from pan.workflow.parser import parse_workflow


def workflow(*merges: tuple[str, list[str], str]) -> Workflow:
    """A forwarder receiving A, B and C, and a merge worker per (name, inputs, output)."""
    workers: list[dict[str, Any]] = [{"name": "in", "type": "forwarder", "host": "127.0.0.1", "port": 20001,
                                      "params": {"inter_pan_inputs": ["A", "B", "C"], "ingest_port": 20002}}]
    workers += [{"name": name, "type": "merge", "host": "127.0.0.1", "port": 20010 + n, "inputs": inputs,
                 "params": {"output": output, "clock_mode": "watermark"}}
                for n, (name, inputs, output) in enumerate(merges)]
    return parse_workflow({"name": "chain test", "repository": {"host": "127.0.0.1", "port": 20000},
                           "workers": workers})


def rows(stream: str, *ts: int) -> list[dict[str, Any]]:
    return [{"ts": t, "src": stream} for t in ts]


def test_components_run_in_dependency_order_and_every_consumer_gets_every_tuple() -> None:
    # listed downstream first: the chain orders them by their inputs
    chain = ComponentChain(workflow(("all", ["AB", "C"], "ALL"), ("ab", ["A", "B"], "AB"), ("ab2", ["AB"], "AB2")))
    assert list(chain.components()) == ["ab", "all", "ab2"] and chain.sources == ["A", "B", "C"]
    chain.advance({"A": rows("A", 1, 5), "B": rows("B", 2, 5), "C": rows("C", 3)}, limit=5)
    chain.advance({"A": rows("A", 9), "C": rows("C", 6, 10)}, limit=10)
    chain.finish()
    assert chain.fed == 8
    merged = [(t["ts"], t["src"]) for t in output_tuples(chain.components()["all"], "ALL")]
    assert merged == [(1, "A"), (2, "B"), (3, "C"), (5, "A"), (5, "B"), (6, "C"), (9, "A"), (10, "C")]
    again = [(t["ts"], t["src"]) for t in output_tuples(chain.components()["ab2"], "AB2")]
    assert again == [(1, "A"), (2, "B"), (5, "A"), (5, "B"), (9, "A")]


def test_a_tuple_waits_until_every_input_has_passed_it() -> None:
    chain = ComponentChain(workflow(("ab", ["A", "B"], "AB")))
    chain.advance({"A": rows("A", 1, 7)}, limit=7)  # B has passed 7 too (nothing up to the limit)
    assert [t["ts"] for t in output_tuples(chain.components()["ab"], "AB")] == [1, 7]
    chain.advance({"A": rows("A", 12)}, limit=11)  # beyond the limit: held, never released early
    assert [t["ts"] for t in output_tuples(chain.components()["ab"], "AB")] == [1, 7]
    chain.finish()
    assert [t["ts"] for t in output_tuples(chain.components()["ab"], "AB")] == [1, 7, 12]


def test_a_cycle_is_refused() -> None:
    with pytest.raises(ChainError, match="cycle"):
        ComponentChain(workflow(("x", ["A", "Y"], "X"), ("y", ["X"], "Y")))
