"""What an ordered component type says about a worker spec: its outputs, the params and ``ordering`` it takes.

The class side of ``OrderedComponent`` (``pan/components/ordered.py``), and the state it declares for snapshots:
apart from the middleware that runs an instance because the workflow parser and the worker ask the type,
before any instance exists.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pan.components.base import Component
from pan.config.specs import WorkerSpec
from pan.ordering.settings import PARAM_KEYS, REMOVED_KEYS, OrderingSettings, load_profile, validate_ordering_params
from pan.ordering.speculation_settings import validate_ordering_object

ORDERING_KEYS = (*PARAM_KEYS, "delay_profile", "arrival_log", "policy")
#: Detection policies (docs/policies.md): ``best_effort`` ignores lost input; under ``nfp`` (no false
#: positives) a component withholds or marks the outputs that lost input could change.
POLICIES = ("best_effort", "nfp")


class OrderedSpec(Component):
    """The description and checks of an ordered component type; ``OrderedComponent`` runs it."""

    #: Component-specific params keys (the ordering keys are always allowed).
    own_params: ClassVar[tuple[str, ...]] = ()
    #: The attributes that hold the component's state. A speculative ordering unit (the worker key
    #: ``ordering: {"mode": "speculative"}``) deep-copies them before each premature event and puts the
    #: copy back to replay (pan/components/snapshots.py); streams and loggers inside are kept, not copied. None: the
    #: component cannot run speculatively, unless it overrides ``snapshot_state`` and ``restore_state``.
    state_attributes: ClassVar[tuple[str, ...] | None] = None

    # --- description ---------------------------------------------------------------

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return []

    @classmethod
    def late_stream(cls, spec: WorkerSpec) -> str | None:
        """Where late events go under ``late_policy: side`` (None under ``deliver``)."""
        if spec.params.get("late_policy", OrderingSettings().late_policy) != "side":
            return None
        outputs = cls.main_outputs(spec)
        return f"{outputs[0] if outputs else spec.name}_late"

    @classmethod
    def output_names(cls, spec: WorkerSpec) -> list[str]:
        late = cls.late_stream(spec)
        return cls.main_outputs(spec) + ([late] if late else [])

    @classmethod
    def check_params(cls, spec: WorkerSpec) -> list[str]:
        params = spec.params
        ordering = {k: v for k, v in params.items() if k in PARAM_KEYS or k in REMOVED_KEYS}
        problems = validate_ordering_params(ordering, cls.input_names(spec))
        own = {k: v for k, v in params.items() if k not in ORDERING_KEYS and k not in REMOVED_KEYS}
        allowed = ", ".join((*cls.own_params, *ORDERING_KEYS))
        problems += [f"{k}: unknown key (allowed: {allowed})" for k in own if k not in cls.own_params]
        for key in ("delay_profile", "arrival_log"):
            if key in params and not (isinstance(params[key], str) and params[key]):
                problems.append(f"{key}: must be a file path")
        problems += cls.check_policy(spec)
        if isinstance(params.get("delay_profile"), str):
            try:
                load_profile(params["delay_profile"])
            except (OSError, ValueError) as exc:
                problems.append(f"delay_profile: {exc}")
        return problems + cls.check_own_params(spec)

    @classmethod
    def check_own_params(cls, spec: WorkerSpec) -> list[str]:
        return []

    @classmethod
    def check_ordering(cls, spec: WorkerSpec) -> list[str]:
        """Problems with the worker's ``ordering`` object, each naming its key (the parser calls this)."""
        if spec.ordering is None:
            return []
        problems = validate_ordering_object(spec.ordering)
        if not problems and cls.speculative(spec) and not cls.supports_snapshots():
            problems.append(f"ordering.mode: type {cls.type_name!r} declares no state_attributes, so it cannot "
                            "run speculatively")
        return problems

    @classmethod
    def speculative(cls, spec: WorkerSpec) -> bool:
        return isinstance(spec.ordering, dict) and spec.ordering.get("mode") == "speculative"

    @classmethod
    def reads_raw(cls, spec: WorkerSpec) -> bool:
        """A speculative unit reads its inputs raw (unless ``ordering.input_view`` is ``settled``)."""
        return cls.speculative(spec) and (spec.ordering or {}).get("input_view", "raw") == "raw"

    @classmethod
    def supports_snapshots(cls) -> bool:
        return cls.state_attributes is not None or (
            cls.snapshot_state is not OrderedSpec.snapshot_state
            and cls.restore_state is not OrderedSpec.restore_state
        )

    def snapshot_state(self) -> Any:
        """The component's state (the declared ``state_attributes``); the middleware copies it deeply."""
        return {name: getattr(self, name) for name in self.state_attributes or ()}

    def restore_state(self, state: Any) -> None:
        """Put back a copy of what ``snapshot_state`` returned (the middleware made the copy)."""
        for name, value in state.items():
            setattr(self, name, value)

    @classmethod
    def column_fields(cls, spec: WorkerSpec) -> tuple[str, ...] | None:
        """The int fields (``ts`` among them) the component computes on, if it takes its inputs as columns:
        the worker then pulls Arrow pages and ``process`` gets row ids among the tuples (pan/buffers/row_store.py).
        None (the default): every input tuple is a dict."""
        return None

    @classmethod
    def check_policy(cls, spec: WorkerSpec) -> list[str]:
        policy = spec.params.get("policy", POLICIES[0])
        return [] if policy in POLICIES else [f"policy: must be one of {', '.join(POLICIES)}, got {policy!r}"]


__all__ = ["ORDERING_KEYS", "POLICIES", "OrderedSpec"]
