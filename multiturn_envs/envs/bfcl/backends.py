"""The stateful API backends of an episode, and safe dispatch of decoded calls to them.

BFCL's harness caches backend instances in a module's ``globals()`` and ``eval``s the call
string. Here every episode owns a :class:`BackendSet`: fresh instances built from a deep copy of
the entry's ``initial_config``, then deep-copied once more so that no part of their state is an
object shared with a module (BFCL's long-context TravelAPI otherwise puts module-level dicts into
the state, and a booking would change them for every later episode). Calls are dispatched with
``getattr`` to a method that is (1) named in the function docs the agent was shown, (2) public,
(3) a plain function defined on the backend's class. Arguments are bound with
``inspect.signature`` (so BFCL's positional ground-truth calls work), results are turned into
strings exactly as BFCL does (the response check compares strings); arguments that do not fit
the method get Python's own ``TypeError`` message, as BFCL's ``eval`` of the call does.

Every list, dict or set a method receives is a fresh copy, defaults included: BFCL's
``TwitterAPI.post_tweet(..., tags=[], mentions=[])`` stores its default lists in the tweet, and
a later ``mention`` extends them, so without the copy one episode's mentions reach every later
tweet posted without any (BFCL's own harness leaks them across entries this way).

Process-wide state that some BFCL methods touch is guarded around every call: ``mpmath.mp.dps``
and the ``decimal`` context (MathAPI sets both), and the module dict that the long-context
``VehicleControlAPI.get_outside_temperature_from_google`` overwrites. A few MathAPI arguments
are bounded (huge precisions, given as numbers or as strings, or integer exponents would hang
the process).
"""

from __future__ import annotations

import contextlib
import copy
import decimal
import importlib
import inspect
import json
import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from multiturn_envs.envs.bfcl.calls import Call

BFCL_BACKEND_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
BUNDLED_BACKEND_PREFIX = "multiturn_envs.envs.bfcl.bundled"


@dataclass(frozen=True)
class BackendSpec:
    """Where a backend class lives and where its function docs are.

    Attributes:
        class_name: the name used in ``involved_classes`` and ``initial_config``.
        module: import path of the module defining the class.
        doc_file: the JSON-lines file of function docs (under ``multi_turn_func_doc/``).
        stateless: built without ``_load_scenario`` (BFCL's ``STATELESS_CLASSES``).
    """

    class_name: str
    module: str
    doc_file: str
    stateless: bool = False


BACKENDS: Mapping[str, BackendSpec] = {
    spec.class_name: spec
    for spec in (
        BackendSpec(
            "GorillaFileSystem",
            f"{BFCL_BACKEND_PREFIX}.gorilla_file_system",
            "gorilla_file_system.json",
        ),
        BackendSpec("MathAPI", f"{BFCL_BACKEND_PREFIX}.math_api", "math_api.json", True),
        BackendSpec("MessageAPI", f"{BFCL_BACKEND_PREFIX}.message_api", "message_api.json"),
        BackendSpec("TwitterAPI", f"{BFCL_BACKEND_PREFIX}.posting_api", "posting_api.json"),
        BackendSpec("TicketAPI", f"{BFCL_BACKEND_PREFIX}.ticket_api", "ticket_api.json"),
        BackendSpec("TradingBot", f"{BFCL_BACKEND_PREFIX}.trading_bot", "trading_bot.json"),
        BackendSpec("TravelAPI", f"{BFCL_BACKEND_PREFIX}.travel_booking", "travel_booking.json"),
        BackendSpec(
            "VehicleControlAPI", f"{BFCL_BACKEND_PREFIX}.vehicle_control", "vehicle_control.json"
        ),
        BackendSpec("LibraryAPI", f"{BUNDLED_BACKEND_PREFIX}.library_api", "library_api.json"),
        BackendSpec(
            "SmartHomeAPI", f"{BUNDLED_BACKEND_PREFIX}.smart_home_api", "smart_home_api.json"
        ),
    )
}
"""Every backend class the env can build (BFCL's eight stateful/stateless ones and ours)."""

# Bounds on MathAPI arguments that would otherwise hang or exhaust the process.
_MAX_PRECISION = 1_000
_MAX_INT_EXPONENT = 10_000
_PRECISION_ARGS = {("MathAPI", "logarithm"): "precision", ("MathAPI", "square_root"): "precision"}


class DispatchError(Exception):
    """A call that cannot be dispatched (unknown or hidden function); the message says why."""


def stringify_result(result: Any) -> str:
    """A result as BFCL reports it: str as is, dict as JSON (else ``str``), else ``str()``."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def backend_class(class_name: str) -> type:
    """Import and return a backend class (``KeyError``/``ImportError`` when unavailable)."""
    spec = BACKENDS[class_name]
    module = importlib.import_module(spec.module)
    cls = getattr(module, spec.class_name)
    if not isinstance(cls, type):
        raise ImportError(f"{spec.module}.{spec.class_name} is not a class")
    return cls


class BackendSet:
    """The backend instances of one episode (or of its ground truth), and dispatch to them.

    Args:
        involved_classes: the entry's ``involved_classes``.
        initial_config: the entry's ``initial_config`` (deep-copied, never mutated).
        long_context: build with BFCL's long-context filler (the long_context category).
    """

    def __init__(
        self,
        involved_classes: list[str],
        initial_config: Mapping[str, Any],
        long_context: bool = False,
    ) -> None:
        self.long_context = bool(long_context)
        instances: dict[str, Any] = {}
        for class_name in involved_classes:
            spec = BACKENDS[class_name]
            instance = backend_class(class_name)()
            if not spec.stateless:
                with _process_guard():
                    instance._load_scenario(
                        copy.deepcopy(dict(initial_config.get(class_name, {}))),
                        long_context=self.long_context,
                    )
            instances[class_name] = instance
        # Sever every reference into module-level objects (see the module docstring).
        self.instances: dict[str, Any] = copy.deepcopy(instances)
        self._owner = {
            name: class_name
            for class_name, instance in self.instances.items()
            for name in _public_methods(type(instance))
        }
        self._signatures: dict[str, inspect.Signature] = {}
        self._mutable_defaults: dict[str, tuple[tuple[str, Any], ...]] = {}

    # ------------------------------------------------------------------ calls
    def owner_of(self, name: str) -> str | None:
        """The class whose public method ``name`` is, or ``None``."""
        return self._owner.get(name)

    def method(self, name: str) -> Any:
        """The bound public method ``name`` (``DispatchError`` when there is none)."""
        class_name = self._owner.get(name)
        if class_name is None or name.startswith("_"):
            raise DispatchError(f"no backend of this entry has a function named {name!r}")
        instance = self.instances[class_name]
        static = inspect.getattr_static(type(instance), name, None)
        if not inspect.isfunction(static):
            raise DispatchError(f"{name!r} is not a callable function")
        return getattr(instance, name)

    def signature(self, name: str) -> inspect.Signature:
        """The signature of the bound public method ``name`` (computed once per set)."""
        signature = self._signatures.get(name)
        if signature is None:
            signature = inspect.signature(self.method(name))
            self._signatures[name] = signature
            self._mutable_defaults[name] = tuple(
                (p.name, p.default)
                for p in signature.parameters.values()
                if isinstance(p.default, list | dict | set)
            )
        return signature

    def bind(self, call: Call) -> dict[str, Any]:
        """The call's arguments bound to the method's parameters, defaults filled in.

        Raises ``TypeError`` when they do not fit the signature.
        """
        bound = self.signature(call.name).bind(*call.args, **call.kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def execute(self, call: Call) -> str:
        """Run one call on this set's instances and return BFCL's result string.

        Raises :class:`DispatchError` for an unknown function; every other failure (arguments
        that do not fit, an exception inside the backend) comes back, as in BFCL, as
        ``"Error during execution: <message>"``.
        """
        method = self.method(call.name)
        class_name = self._owner[call.name]
        try:
            try:
                bound = self.signature(call.name).bind(*call.args, **call.kwargs)
            except TypeError:
                # BFCL eval()s the call, so the message is the interpreter's own
                # ("GorillaFileSystem.cd() missing 1 required positional argument: 'folder'"),
                # raised while binding, before the method's body runs.
                with _process_guard(), _module_guard(class_name, call.name, self.long_context):
                    return stringify_result(method(*call.args, **call.kwargs))
            arguments = bound.arguments
            for name, value in arguments.items():
                if isinstance(value, list | dict | set):
                    arguments[name] = copy.deepcopy(value)
            for name, default in self._mutable_defaults[call.name]:
                if name not in arguments:  # fresh: never the function's shared default
                    arguments[name] = copy.deepcopy(default)
            _check_bounds(class_name, call.name, arguments)
            with _process_guard(), _module_guard(class_name, call.name, self.long_context):
                # Stringify inside the guard: the result may be the guarded module dict.
                return stringify_result(method(*bound.args, **bound.kwargs))
        except Exception as exc:  # a backend's failure is the agent's information
            return f"Error during execution: {exc}"

    # ------------------------------------------------------------------ state
    def public_state(self) -> dict[str, dict[str, Any]]:
        """Every instance's public attributes (what BFCL's state check compares)."""
        return {
            class_name: {k: v for k, v in vars(instance).items() if not k.startswith("_")}
            for class_name, instance in self.instances.items()
        }

    def state_equal(self, other: BackendSet) -> tuple[bool, list[str]]:
        """BFCL's state check: every public attribute of ``other`` (the ground truth) ``==`` ours.

        Returns ``(equal, differing "Class.attribute" names)``.
        """
        differences: list[str] = []
        for class_name, gt_instance in other.instances.items():
            mine = self.instances.get(class_name)
            for attr in vars(gt_instance):
                if attr.startswith("_"):
                    continue
                if mine is None or getattr(mine, attr, _MISSING) != getattr(gt_instance, attr):
                    differences.append(f"{class_name}.{attr}")
        return not differences, differences

    def snapshot(self) -> bytes:
        """Every instance (private attributes and RNGs included), pickled.

        Bytes rather than objects: snapshots compare equal exactly when the states do (the
        backend classes define no ``__eq__`` of their own), and unpickling is a deep copy.
        """
        return pickle.dumps(self.instances, protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, snapshot: bytes) -> None:
        """Restore what :meth:`snapshot` returned."""
        self.instances = pickle.loads(snapshot)

    def snapshot_instance(self, class_name: str) -> bytes:
        """One instance, pickled (a cheaper checkpoint when a reply calls only it)."""
        return pickle.dumps(self.instances[class_name], protocol=pickle.HIGHEST_PROTOCOL)

    def restore_instance(self, class_name: str, snapshot: bytes) -> None:
        """Restore what :meth:`snapshot_instance` returned."""
        self.instances[class_name] = pickle.loads(snapshot)

    def stateless(self, class_name: str) -> bool:
        """Whether the class keeps no state (BFCL's ``STATELESS_CLASSES``: MathAPI)."""
        return BACKENDS[class_name].stateless


_MISSING = object()


def _public_methods(cls: type) -> list[str]:
    return [
        name
        for name, value in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not name.startswith("_")
    ]


def _check_bounds(class_name: str, method: str, arguments: Mapping[str, Any]) -> None:
    if class_name != "MathAPI":
        return
    precision_arg = _PRECISION_ARGS.get((class_name, method))
    if precision_arg is not None:
        precision = _as_number(arguments.get(precision_arg))
        if precision is not None and not abs(precision) <= _MAX_PRECISION:
            raise ValueError(f"{precision_arg} must be at most {_MAX_PRECISION} in this sandbox")
    if method == "power":
        exponent = arguments.get("exponent")
        if isinstance(exponent, int) and abs(exponent) > _MAX_INT_EXPONENT:
            raise ValueError(f"integer exponents must be at most {_MAX_INT_EXPONENT} here")


def _as_number(value: Any) -> float | None:
    """``value`` as the number a precision setter would make of it (mpmath takes ``int()`` of
    a string such as ``"100000000"``), or ``None`` when it is no number at all."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(int(value))
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return None
    return None


@contextlib.contextmanager
def _process_guard() -> Iterator[None]:
    """Restore mpmath's precision and use a private decimal context around a backend call."""
    mp = _mpmath_context()
    saved = mp.dps if mp is not None else None
    try:
        with decimal.localcontext():
            yield
    finally:
        if mp is not None:
            mp.dps = saved


def _mpmath_context() -> Any:
    try:
        import mpmath
    except ImportError:
        return None
    return mpmath.mp


@contextlib.contextmanager
def _module_guard(class_name: str, method: str, long_context: bool) -> Iterator[None]:
    """Undo the one known write of a BFCL method into module-level state."""
    if not (
        long_context
        and class_name == "VehicleControlAPI"
        and method == "get_outside_temperature_from_google"
    ):
        yield
        return
    module = importlib.import_module(f"{BFCL_BACKEND_PREFIX}.long_context")
    shared = module.LONG_WEATHER_EXTENSION
    saved = dict(shared)
    try:
        yield
    finally:
        shared.clear()
        shared.update(saved)
