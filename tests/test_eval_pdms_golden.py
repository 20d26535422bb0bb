"""Golden check: the vectorised NC / TTC / DAC equal a direct, loop-by-loop port of NAVSIM v1.1's scorer
written with plain shapely objects (one polygon per box and time, sequential ignore-lists)."""

import numpy as np
import shapely
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shapely import affinity
from shapely.geometry import LineString, Point, box

from wamdiff.eval.pdms import PDMSEvaluator
from wamdiff.eval.planners import Plan
from wamdiff.eval.synthetic import AgentSpec, straight_road_scene


def _ego_poly(s, veh):
    b = box(-veh.rear_length, -veh.half_width, veh.front_length, veh.half_width)
    return affinity.translate(affinity.rotate(b, s[2], origin=(0, 0), use_radians=True), s[0], s[1])


def _front_edge(s, veh):
    c, si = np.cos(s[2]), np.sin(s[2])
    pts = [(s[0] + c * veh.front_length - si * d, s[1] + si * veh.front_length + c * d) for d in (veh.half_width, -veh.half_width)]
    return LineString(pts)


def _agent_poly(b):
    p = box(-b[3] / 2, -b[4] / 2, b[3] / 2, b[4] / 2)
    return affinity.translate(affinity.rotate(p, b[2], origin=(0, 0), use_radians=True), b[0], b[1])


def _angle(origin, heading, target):
    d = np.asarray(target) - np.asarray(origin)
    return np.arccos(np.clip(np.dot([np.cos(heading), np.sin(heading)], d / max(np.linalg.norm(d), 1e-12)), -1, 1))


def brute_force(states, scene, veh):
    lanes = [shapely.Polygon(p) for p in scene.map.lane_polygons]
    drivable = shapely.union_all([shapely.Polygon(p) for p in scene.map.drivable_polygons] + lanes)
    boxes, valid = scene.agent_boxes, scene.agent_valid
    vel0 = np.hypot(*scene.agent_velocity[:, 0].T)
    stopped = ~scene.agent_is_vehicle | (vel0 <= 0.05)
    T = len(states)
    multi, off = np.zeros(T, bool), np.zeros(T, bool)
    for t in range(T):
        corners = [Point(c) for c in list(_ego_poly(states[t], veh).exterior.coords)[:4]]
        touched = sum(any(ln.contains(c) for c in corners) for ln in lanes)
        single = any(all(ln.contains(c) for c in corners) for ln in lanes)
        multi[t] = touched > 1 and not single
        off[t] = not all(drivable.contains(c) for c in corners)
    dac = 0.0 if off.any() else 1.0
    # NC, as pdm_scorer._calculate_no_at_fault_collision
    nc, ignored = 1.0, set()
    for t in range(T):
        ego = _ego_poly(states[t], veh)
        speed = np.hypot(states[t, 3], states[t, 4])
        for a in range(len(boxes)):
            if not valid[a, t] or a in ignored:
                continue
            ap = _agent_poly(boxes[a, t])
            if not ego.intersects(ap):
                continue
            if speed <= 0.05:
                kind = "stopped_ego"
            elif stopped[a]:
                kind = "stopped_track"
            elif _angle(states[t, :2], states[t, 2], boxes[a, t, :2]) > np.deg2rad(150):
                kind = "rear"
            elif _front_edge(states[t], veh).intersects(ap):
                kind = "front"
            else:
                kind = "lateral"
            if kind in ("front", "stopped_track") or ((multi[t] or off[t]) and kind == "lateral"):
                nc = min(nc, 0.0 if scene.agent_is_vehicle[a] else 0.5)
            else:
                ignored.add(a)
    # TTC, as pdm_scorer._calculate_ttc
    ttc, ignored = 1.0, set()
    for t in range(T):
        speed = np.hypot(states[t, 3], states[t, 4])
        for k in (0, 3, 6, 9):
            ego = affinity.translate(_ego_poly(states[t], veh), *(np.array([np.cos(states[t, 2]), np.sin(states[t, 2])]) * speed * k * 0.1))
            ti = t + k
            for a in range(len(boxes)):
                if not valid[a, ti] or a in ignored or speed < 5e-3:
                    continue
                if not ego.intersects(_agent_poly(boxes[a, ti])):
                    continue
                ang = _angle(states[t, :2], states[t, 2], boxes[a, ti, :2])
                if ang < np.deg2rad(30) or ((multi[t] or off[t]) and not ang > np.deg2rad(150)):
                    ttc = 0.0
                else:
                    ignored.add(a)
    return nc, dac, ttc


agent = st.tuples(st.floats(-20, 60), st.floats(-7, 7), st.floats(-5, 20), st.floats(-2, 2), st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    speed=st.floats(0.0, 15.0),
    agents=st.lists(agent, min_size=1, max_size=4),
    speeds=st.lists(st.floats(0.0, 18.0), min_size=8, max_size=8),
    lateral=st.lists(st.floats(-3.0, 3.0), min_size=8, max_size=8),
)
def test_vectorised_scorer_matches_loop_port(speed, agents, speeds, lateral):
    specs = [AgentSpec(x=x, y=y, vx=vx, vy=vy, is_vehicle=veh) for x, y, vx, vy, veh in agents]
    scene = straight_road_scene(speed=speed, agents=specs, lanes=2, lane_shift=-2.0)
    xy = np.stack([np.cumsum(np.asarray(speeds) * 0.5), np.cumsum(np.asarray(lateral)) * 0.5], 1)
    ev = PDMSEvaluator()
    row = ev.score([scene], [Plan(xy)], "h")[0]
    assert row["valid"], row["reason"]
    nc, dac, ttc = brute_force(row["_states"], scene, ev.context(scene).vehicle)
    assert (row["nc"], row["dac"], row["ttc"]) == (nc, dac, ttc)
