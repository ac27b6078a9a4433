"""Endpoints named like actor mesh methods are reached by their name (the
endpoint wins on its mesh, as upstream); names a mesh cannot hand out (its
properties, its private attributes) are refused at spawn with a clear
error, never silently shadowed."""

import pytest
from name_actors import MeshNamed, PrivateNamed, PropertyNamed

from monarch.actor import ActorMesh, this_host


@pytest.fixture(scope="module")
def procs():
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    yield pm
    pm.stop().get(timeout=30)


def test_endpoints_named_like_mesh_methods_are_reached(procs):
    m = procs.spawn("named", MeshNamed)
    assert list(m.size.call().get(timeout=30).values()) == ["size endpoint"] * 2
    assert list(m.stop.call(7).get(timeout=30).values()) == [("stop endpoint", 7)] * 2
    assert list(m.slice.call().get(timeout=30).values()) == ["slice endpoint"] * 2
    assert m.plain.call().get(timeout=30).item(gpus=0) == "plain"
    # A view of the mesh keeps the endpoints; the mesh methods stay reachable.
    view = ActorMesh.slice(m, gpus=1)
    assert ActorMesh.size(view) == 1
    assert view.size.call_one().get(timeout=30) == "size endpoint"
    assert view.endpoint("stop").call_one(1).get(timeout=30) == ("stop endpoint", 1)
    ActorMesh.stop(m).get(timeout=30)


def test_endpoints_a_mesh_cannot_hand_out_are_refused(procs):
    for cls, name in ((PropertyNamed, "sizes"), (PrivateNamed, "_call")):
        with pytest.raises(TypeError, match=f"endpoints named {name}: an actor mesh uses these names"):
            procs.spawn("refused", cls)
