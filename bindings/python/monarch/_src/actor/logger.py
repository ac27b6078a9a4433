"""``Actor.logger``: a ``logging`` adapter that adds the running actor and
its rank to each record (``record.actor``, ``record.rank``) and to the
message."""

from __future__ import annotations

import logging
from typing import Any

from .context import context


class ActorLogger(logging.LoggerAdapter):
    """Adds the running actor and its rank to each record."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        inst = context().actor_instance
        actor, rank = inst.actor_id, inst.rank
        extra = dict(kwargs.get("extra") or {})
        extra.setdefault("actor", actor)
        extra.setdefault("rank", rank)
        kwargs["extra"] = extra
        where = ", ".join(f"{k}={v}" for k, v in rank.items())
        return f"[{actor}{' ' + where if where else ''}] {msg}", kwargs


def actor_logger(cls: type) -> ActorLogger:
    """The logger of actors of class ``cls`` (``monarch.actor.<Class>``)."""
    return ActorLogger(logging.getLogger(f"monarch.actor.{cls.__qualname__}"), {})
