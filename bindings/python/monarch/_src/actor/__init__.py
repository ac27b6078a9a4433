"""Actors, meshes and the worker side that hosts them; ``monarch.actor``
re-exports the public names.

Dependencies run one way, from the bottom up:

* ``shape``: mesh shapes, ``Point`` and the geometry shared by meshes;
  ``scratch``: per-thread C out-parameters; ``context``: where code runs.
* ``future``: ``Future``; ``pickle``: values to message parts and back;
  ``value_mesh``: ``ValueMesh`` and the decoding of replies; ``port``:
  ``Port``, ``PortReceiver``, ``Channel``.
* ``endpoint``: the ``@endpoint`` decorator and the call adverbs;
  ``event_loop``: the proc's asyncio loop; ``supervision``: ``MeshFailure``
  and the unhandled-fault hook.
* ``actor_mesh``: ``Actor`` and ``ActorMesh``; ``server``: hosting actors
  (worker procs, ``this_proc()``); ``proc_mesh``: ``ProcMesh``;
  ``host_mesh``: ``HostMesh``; ``bootstrap``: a worker proc's ``main``.
"""
