"""Right of way in the junction families: ring entries give way, ring exits leave from the lane next to the
exit, intersection entries give way to conflicting traffic, and nobody gridlocks inside a junction.

Each test builds the situation by hand on a real family road network (the world's own traffic removed) and
simulates it with the world's vehicles, so it fails if the rule is missing (highway-env alone merges blindly).
"""

import numpy as np

from wamdiff.driving.expert import (TrafficVehicle, IntersectionTrafficVehicle, junction_entry_stop_gap,
                                    ring_entry_stop_gap)
from wamdiff.driving.world import make_world


def _empty_world(family: str, seed: int = 0):
    """The family's road with nobody on it (the ego is taken off the road; nothing is culled)."""
    world = make_world(family, seed, density=0.0, cull_distance=1e9)
    world.road.vehicles = []
    world.ego.external = world.ego.hold_state = True
    return world


def _place(world, lane_index, s, speed, destination, cls=TrafficVehicle):
    v = cls.make_on_lane(world.road, lane_index, longitudinal=s, speed=speed)
    v.target_speed = speed
    v.check_collisions = False
    v.plan_route_to(destination)
    world.road.vehicles.append(v)
    return v


def _min_distance(a, b, world, seconds):
    d = np.inf
    for _ in range(int(seconds * 10)):
        world.step(0.1)
        d = min(d, float(np.linalg.norm(a.position - b.position)))
    return d


def test_ring_entry_gives_way_to_circulating_traffic():
    world = _empty_world("roundabout")
    entry = ("ses", "se", 0)
    entering = _place(world, entry, world.road.network.get_lane(entry).length - 14.0, 6.0, "nxr")
    upstream = ("sx", "se", 1)
    ring = _place(world, upstream, world.road.network.get_lane(upstream).length - 10.0, 8.0, "exr")
    assert ring_entry_stop_gap(entering) is not None
    assert _min_distance(entering, ring, world, 6.0) > 4.0  # 4 m between centres: no contact of 5 m cars side by side


def test_ring_entry_goes_when_the_ring_is_free():
    world = _empty_world("roundabout")
    entry = ("ses", "se", 0)
    entering = _place(world, entry, world.road.network.get_lane(entry).length - 14.0, 6.0, "nxr")
    assert ring_entry_stop_gap(entering) is None
    for _ in range(60):
        world.step(0.1)
    assert entering.lane_index[0] not in ("ses",)  # it entered the ring


def test_inner_lane_car_does_not_cut_across_the_outer_lane_to_exit():
    world = _empty_world("roundabout")
    inner = _place(world, ("se", "ex", 0), 2.0, 8.0, "exr")  # wants the next exit, from the inner lane
    outer = _place(world, ("se", "ex", 1), 2.0, 8.0, "nxr")  # right beside it, going on
    d = _min_distance(inner, outer, world, 6.0)
    assert d > 3.0
    assert not inner.crashed and not outer.crashed


def test_minor_road_gives_way_to_major_road_traffic():
    world = _empty_world("intersection")
    net = world.road.network
    minor_lane, major_lane = ("o0", "ir0", 0), ("o1", "ir1", 0)
    assert net.get_lane(major_lane).priority > net.get_lane(minor_lane).priority
    minor = _place(world, minor_lane, net.get_lane(minor_lane).length - 12.0, 6.0, "o2", IntersectionTrafficVehicle)
    major = _place(world, major_lane, net.get_lane(major_lane).length - 15.0, 8.0, "o3", IntersectionTrafficVehicle)
    assert junction_entry_stop_gap(minor) is not None
    assert junction_entry_stop_gap(major) is None
    assert _min_distance(minor, major, world, 8.0) > 4.0


def test_busy_intersection_never_gridlocks():
    world = make_world("intersection", 7_003_019)  # closed-loop route intersection_019, where it happened
    inside_since: dict[int, float] = {}
    longest = 0.0
    for _ in range(400):
        world.step(0.1)
        for v in world.road.vehicles:
            if v.lane_index[0].startswith("ir"):
                inside_since.setdefault(id(v), world.time)
                longest = max(longest, world.time - inside_since[id(v)])
            else:
                inside_since.pop(id(v), None)
    assert longest < 15.0  # a 20 m box crossed at a few m/s; highway-env's own yielding left cars standing there
