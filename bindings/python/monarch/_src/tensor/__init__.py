"""Distributed tensors on CPU: a controller (``dtensor``, ``controller``,
``api``) that issues torch ops to a worker actor per proc (``worker``,
``store``, ``collective``). Needs ``torch``; loaded on first use."""
