"""``monarch.config``: the settings users change, as upstream's
``configure(...)`` / ``configured(...)``.

Each setting this runtime has is applied at once (the process's
environment, which the runtime reads when it needs the value and which procs
spawned afterwards inherit; or the runtime's log options). Upstream's other
setting names are accepted and remembered (``get_runtime_config()``) and
have no effect here: they tune parts of upstream's runtime that this one
does not have (docs/upstream.md lists them). An unknown name is a
TypeError, as an unknown keyword argument.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["clear_runtime_config", "configure", "configured", "get_global_config", "get_runtime_config"]


def _seconds(value: Any) -> float:
    """Seconds of a humantime string ("30s", "5m", "1h 30m", "250ms") or a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    total = 0.0
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", str(value).strip().lower())
    if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*([a-z]+)|\s", "", str(value).lower()):
        raise ValueError(f"not a duration: {value!r} (use e.g. '30s', '5m', '1h 30m')")
    for n, unit in parts:
        if unit not in units:
            raise ValueError(f"unknown duration unit {unit!r} in {value!r}")
        total += float(n) * units[unit]
    return total


# The environment's own values of the variables settings change, restored
# by clear_runtime_config().
_original_env: dict[str, str | None] = {}


def _env_setter(var: str, convert):
    def apply(value: Any) -> None:
        if value is None:
            original = _original_env.pop(var, None)
            if original is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = original
            return
        converted = convert(value)
        _original_env.setdefault(var, os.environ.get(var))
        os.environ[var] = converted

    return apply


def _log_forwarding(value: Any) -> None:
    from ._lib import check, lib, runtime

    check(lib.monarch_runtime_logging_option(runtime(), bool(value), 0))


# Settings with an effect here: name -> (default, apply(value)).
_EFFECTIVE = {
    "host_spawn_ready_timeout": (None, _env_setter("MONARCH_SPAWN_TIMEOUT_S", lambda v: str(int(_seconds(v))))),
    "mesh_proc_spawn_max_idle": (None, _env_setter("MONARCH_SPAWN_TIMEOUT_S", lambda v: str(int(_seconds(v))))),
    "message_delivery_timeout": (None, _env_setter("MONARCH_TCP_TIMEOUT_MS", lambda v: str(int(_seconds(v) * 1000)))),
    "supervision_watchdog_timeout": (
        None,
        _env_setter("MONARCH_HEARTBEAT_TIMEOUT_MS", lambda v: str(int(_seconds(v) * 1000))),
    ),
    "enable_log_forwarding": (True, _log_forwarding),
}

# Upstream's other settings: accepted, remembered, no effect here.
_ACCEPTED = frozenset(
    """default_transport enable_file_capture tail_log_lines codec_max_frame_length
    process_exit_timeout message_ack_time_interval message_ack_every_n_messages message_ttl_default
    split_max_buffer_size split_max_buffer_age stop_actor_timeout cleanup_timeout
    remote_allocator_heartbeat_interval default_encoding channel_net_rx_buffer_full_check_interval
    message_latency_sampling_rate enable_dest_actor_reordering_buffer mesh_bootstrap_enable_pdeathsig
    mesh_terminate_concurrency mesh_terminate_timeout shared_asyncio_runtime small_write_threshold
    max_cast_dimension_size remote_alloc_bind_to_inaddr_any remote_alloc_bootstrap_addr
    remote_alloc_allowed_port_range read_log_buffer force_file_log actor_spawn_max_idle
    get_actor_state_max_idle proc_stop_max_idle get_proc_state_max_idle actor_queue_dispatch
    mesh_orphan_timeout prefix_with_rank""".split()
)

_runtime_layer: dict[str, Any] = {}


def configure(**settings: Any) -> None:
    """Set settings for this process (and the procs it spawns afterwards).
    Durations take humantime strings (``"30s"``, ``"5m"``) or seconds."""
    for key in settings:
        if key not in _EFFECTIVE and key not in _ACCEPTED:
            raise TypeError(f"configure() got an unexpected setting {key!r}")
    for key, value in settings.items():
        if key in _EFFECTIVE:
            _EFFECTIVE[key][1](value)
        _runtime_layer[key] = value


def get_runtime_config() -> dict[str, Any]:
    """The settings set with ``configure`` (a copy)."""
    return dict(_runtime_layer)


def get_global_config() -> dict[str, Any]:
    """Every setting this runtime has, with its current value (defaults
    overridden by ``configure``)."""
    merged = {k: default for k, (default, _) in _EFFECTIVE.items()}
    merged.update(_runtime_layer)
    return merged


def clear_runtime_config() -> None:
    """Undo every ``configure``: effective settings back to their defaults."""
    for key in list(_runtime_layer):
        if key in _EFFECTIVE:
            _EFFECTIVE[key][1](_EFFECTIVE[key][0])
    _runtime_layer.clear()


@contextlib.contextmanager
def configured(**overrides: Any) -> Iterator[dict[str, Any]]:
    """Apply ``overrides`` for the duration of the ``with`` block (the
    previous settings come back after it); yields ``get_global_config()``."""
    previous = get_runtime_config()
    try:
        configure(**overrides)
        yield get_global_config()
    finally:
        clear_runtime_config()
        configure(**previous)
