"""The expert driver (IDM + route-instructed lane changes) and the nuPlan comfort check used to drop runs.

`ExpertVehicle` is highway-env's `IDMVehicle` with comfort-clamped parameters:
- longitudinal: IDM toward `desired_speed` (a = 1.2 m/s^2, b = 2.5 m/s^2, T = 1.6 s), capped by a curve-speed
  limit read from the planned route (lateral acceleration <= 2.5 m/s^2 and yaw rate <= 0.6 rad/s at every route
  point within the braking distance), clipped to [-3.5, 1.5] m/s^2 and rate-limited (jerk 1.5 m/s^3 up,
  4 m/s^3 down); a junction yield (intersection priority rules) is a -3 m/s^2 deceleration to a stop, ignored once the ego
  is inside the junction (clearing it is safer than stopping in it);
- lateral: highway-env's lane-following controller with softer gains (lateral tau 1.0 s, heading 0.25 s) and
  the steering rate limited to 0.6 rad/s, bounded so the rate limit cannot make it oscillate (heading offset
  from the lane <= 0.3 rad, yaw-rate command no more than the rate-limited steering can undo before the
  reference heading; see `ExpertVehicle.steering_control`); lane changes happen ONLY
  where the route asks for one (discretionary MOBIL changes are off so the ego stays on its route), and only
  when MOBIL's safety criterion holds (nobody, ego included, must brake harder than 2 m/s^2).
The ego can also be driven from outside (closed loop): see `World` in `world.py`.
"""

from __future__ import annotations

import math

import numpy as np
from highway_env import utils
from highway_env.vehicle.behavior import IDMVehicle
from highway_env.vehicle.kinematics import Vehicle

from wamdiff.comfort_bounds import COMFORT_BOUNDS


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


ENTRY_CHECK_M = 30.0  # m before a ring entry where a vehicle starts checking the circulating traffic
ENTRY_COMMITTED_M = 2.0  # m: closer than this to the ring it drives on (stopping there would block the mouth)
ENTRY_GAP_S = 3.0  # s: a ring vehicle arriving at the merge point sooner than this gets the right of way
MERGE_ZONE_M = 10.0  # m after the merge point still occupied by a vehicle that just passed it
STOP_LINE_GAP_M = 1.5  # m kept to the ring's edge when waiting


def _single_lane_road(vehicle):
    """(road graph, from, to) of the single-lane road `vehicle` drives on, else None (multi-lane or no road)."""
    road = getattr(vehicle, "road", None)
    lane_index = getattr(vehicle, "lane_index", None)
    if road is None or lane_index is None:
        return None
    graph = road.network.graph
    _from, _to, _ = lane_index
    return (graph, _from, _to) if len(graph[_from][_to]) == 1 else None


def ring_entry_stop_gap(vehicle) -> float | None:
    """Distance to the ring's edge when `vehicle` must give way there, else None.

    Roundabout priority (highway-env has none: entering cars merge blindly and circulating cars hit them): a
    vehicle on a single-lane road that feeds a multi-lane ring waits while a ring vehicle would reach the merge
    point within `ENTRY_GAP_S` or is still inside the merge zone.
    """
    here = _single_lane_road(vehicle)
    if here is None:
        return None
    graph, _from, _to = here
    road = vehicle.road
    ring_out = [to for to, lanes in graph.get(_to, {}).items() if len(lanes) > 1]
    ring_in = [a for a, tos in graph.items() if _to in tos and len(tos[_to]) > 1]
    if not ring_out or not ring_in:
        return None
    lane = vehicle.lane
    s, _ = lane.local_coordinates(vehicle.position)
    to_edge = lane.length - s - vehicle.LENGTH / 2
    if to_edge > ENTRY_CHECK_M or to_edge < ENTRY_COMMITTED_M:
        return None
    for other in road.vehicles:
        if other is vehicle or getattr(other, "lane_index", None) is None:
            continue
        o_from, o_to, _ = other.lane_index
        o_lane = other.lane
        o_s, _ = o_lane.local_coordinates(other.position)
        if o_to == _to and o_from in ring_in:  # upstream on the ring: time to the merge point
            if (o_lane.length - o_s) / max(other.speed, 0.5) < ENTRY_GAP_S:
                return to_edge
        elif o_from == _to and o_to in ring_out and o_s < MERGE_ZONE_M:  # just passed it
            return to_edge
    return None


MAJOR_GAP_S = 4.0  # s: a minor-road vehicle lets a conflicting major-road vehicle arriving within this go first
CONFLICT_DISTANCE_M = 2.8  # m: junction paths closer than this somewhere conflict


def _next_road(vehicle, node: str) -> str | None:
    for r in getattr(vehicle, "route", None) or []:
        if r[0] == node:
            return r[1]
    return None


def _is_junction_entry(graph, node: str) -> bool:
    """A node where single-lane turns branch off (an intersection's entry), as opposed to a lane split."""
    outs = graph.get(node, {})
    return len(outs) >= 2 and all(len(lanes) == 1 for lanes in outs.values())


_CONFLICTS: dict[int, dict[tuple[str, str], set[tuple[str, str]]]] = {}


def _junction_conflicts(network) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """For each junction path (entry node, exit node): the paths from OTHER entries that cross or merge with it."""
    key = id(network)
    if key not in _CONFLICTS:
        paths = {}
        for a, tos in network.graph.items():
            if _is_junction_entry(network.graph, a):
                for b, lanes in tos.items():
                    lane = lanes[0]
                    paths[(a, b)] = np.array([lane.position(s, 0.0) for s in np.linspace(0, lane.length, 24)])
        out: dict[tuple[str, str], set[tuple[str, str]]] = {p: set() for p in paths}
        for p, xy in paths.items():
            for q, xy2 in paths.items():
                if p[0] != q[0] and np.min(np.linalg.norm(xy[:, None] - xy2[None], axis=-1)) < CONFLICT_DISTANCE_M:
                    out[p].add(q)
        _CONFLICTS[key] = out
    return _CONFLICTS[key]


def junction_entry_stop_gap(vehicle) -> float | None:
    """Distance to the junction's edge when `vehicle` must give way there, else None.

    highway-env's own priority check (`RegulatedRoad`) predicts conflicts only 3 s ahead and lets a vehicle in,
    so crossing cars met inside the box (3 of the expert's 5 intersection failures). The rule here: a vehicle
    about to enter waits while a vehicle on a conflicting path is inside the junction, while a conflicting
    vehicle of a higher-priority road arrives within `MAJOR_GAP_S`, or while one of equal priority arrives first.
    """
    here = _single_lane_road(vehicle)
    if here is None or not _is_junction_entry(here[0], here[2]):
        return None
    graph, _from, _to = here
    road = vehicle.road
    mine = (_to, _next_road(vehicle, _to))
    conflicts = _junction_conflicts(road.network).get(mine)
    if not conflicts:
        return None
    lane = vehicle.lane
    to_edge = lane.length - lane.local_coordinates(vehicle.position)[0] - vehicle.LENGTH / 2
    if to_edge > ENTRY_CHECK_M or to_edge < ENTRY_COMMITTED_M:
        return None
    my_arrival = to_edge / max(vehicle.speed, 1.0)
    my_priority = getattr(lane, "priority", 0)
    for other in road.vehicles:
        o_index = getattr(other, "lane_index", None)
        if other is vehicle or o_index is None:
            continue
        o_from, o_to, _ = o_index
        if (o_from, o_to) in conflicts:  # already inside on a conflicting path
            return to_edge
        if o_from == _from or not _is_junction_entry(graph, o_to) or (o_to, _next_road(other, o_to)) not in conflicts:
            continue
        o_lane = other.lane
        o_edge = o_lane.length - o_lane.local_coordinates(other.position)[0] - other.LENGTH / 2
        if o_edge > ENTRY_CHECK_M or o_edge < -other.LENGTH:
            continue
        o_arrival = max(o_edge, 0.0) / max(other.speed, 1.0)
        o_priority = getattr(o_lane, "priority", 0)
        if (o_priority > my_priority and o_arrival < MAJOR_GAP_S) or (o_priority == my_priority and o_arrival < my_arrival):
            return to_edge
    return None


class FastIDMMixin:
    """highway-env's IDM and lane-keeping maths with Python scalars instead of 0-d numpy calls (np.clip on a float
    costs ~10 us): same formulas as `IDMVehicle.acceleration` / `ControlledVehicle.steering_control`, ~3x faster."""

    def acceleration(self, ego_vehicle=None, front_vehicle=None, rear_vehicle=None) -> float:
        if not ego_vehicle or not isinstance(ego_vehicle, Vehicle):
            return 0.0
        target = getattr(ego_vehicle, "target_speed", 0.0)
        lane = ego_vehicle.lane
        if lane is not None and lane.speed_limit is not None:
            target = _clip(target, 0.0, lane.speed_limit)
        target = utils.not_zero(target)
        acc = self.COMFORT_ACC_MAX * (1.0 - (max(ego_vehicle.speed, 0.0) / abs(target)) ** self.DELTA)
        if front_vehicle:
            d = ego_vehicle.lane_distance_to(front_vehicle)
            acc -= self.COMFORT_ACC_MAX * (self.desired_gap(ego_vehicle, front_vehicle) / utils.not_zero(d)) ** 2
        if ego_vehicle is self:
            gap = ring_entry_stop_gap(self)
            if gap is None:
                gap = junction_entry_stop_gap(self)
            if gap is not None:  # give way at a roundabout entry: IDM toward a standing car at the ring's edge
                v = max(self.speed, 0.0)
                s_star = STOP_LINE_GAP_M + v * self.TIME_WANTED + v * v / (2 * math.sqrt(-self.COMFORT_ACC_MAX * self.COMFORT_ACC_MIN))
                acc = min(acc, self.COMFORT_ACC_MAX * (1.0 - (s_star / max(gap, 0.1)) ** 2))
        return float(acc)

    def desired_gap(self, ego_vehicle, front_vehicle=None, projected: bool = True) -> float:
        ab = -self.COMFORT_ACC_MAX * self.COMFORT_ACC_MIN
        h = ego_vehicle.heading
        c, s = math.cos(h), math.sin(h)
        ev, fv = ego_vehicle.speed, front_vehicle.speed
        fh = front_vehicle.heading
        dv = (ev * c - fv * math.cos(fh)) * c + (ev * s - fv * math.sin(fh)) * s if projected else ev - fv
        return self.DISTANCE_WANTED + ev * self.TIME_WANTED + ev * dv / (2 * math.sqrt(ab))

    MAX_HEADING_OFFSET = math.pi / 4  # rad: how far off the lane heading the lateral loop may point the car

    def max_yaw_rate(self, heading_error: float) -> float:
        """Bound on the commanded yaw rate (none here; the expert bounds it by its steering-rate limit)."""
        return math.inf

    def steering_control(self, target_lane_index) -> float:
        lane = self.road.network.get_lane(target_lane_index)
        s_lane, r_lane = lane.local_coordinates(self.position)
        future_heading = lane.heading_at(s_lane + self.speed * self.TAU_PURSUIT)
        speed = utils.not_zero(self.speed)
        heading_cmd = math.asin(_clip(-self.KP_LATERAL * r_lane / speed, -1.0, 1.0))
        heading_ref = future_heading + _clip(heading_cmd, -self.MAX_HEADING_OFFSET, self.MAX_HEADING_OFFSET)
        err = ((heading_ref - self.heading) + math.pi) % (2 * math.pi) - math.pi
        rate_max = self.max_yaw_rate(err)
        rate = _clip(self.KP_HEADING * err, -rate_max, rate_max)
        slip = math.asin(_clip(self.LENGTH / 2 / speed * rate, -1.0, 1.0))
        return _clip(math.atan(2 * math.tan(slip)), -self.MAX_STEERING_ANGLE, self.MAX_STEERING_ANGLE)

    def act(self, action=None):
        if self.crashed:
            return
        self.follow_road()
        if self.enable_lane_change:
            self.change_lane_policy()
        steer = self.steering_control(self.target_lane_index)
        front, rear = self.road.neighbour_vehicles(self, self.lane_index)
        acc = self.acceleration(self, front, rear)
        if self.lane_index != self.target_lane_index:
            front, rear = self.road.neighbour_vehicles(self, self.target_lane_index)
            acc = min(acc, self.acceleration(self, front, rear))
        acc = _clip(acc, -self.ACC_MAX, self.ACC_MAX)
        # highway-env lets a hard brake overshoot zero and the car then drives backwards into whoever is behind
        # (yielding traffic at junctions): stop at zero instead (the world ticks at 10 Hz)
        if self.speed >= 0.0:
            acc = max(acc, -self.speed / 0.1)
        Vehicle.act(self, {"steering": steer, "acceleration": acc})


class TrafficVehicle(FastIDMMixin, IDMVehicle):
    """Background traffic. Own class so highway-env's class-attribute tweaks (intersection) never leak.

    Multi-lane rings: highway-env lets a car on the inner ring lane take its exit straight across the outer lane
    (the exit joins where the outer lane runs), so it side-swipes whoever drives there; measured, that caused all
    9 of the expert's 25 collisions on the full roundabout route set. Here a car leaves a ring only from the
    lane next to the exit: it moves over within `EXIT_PREPARE_M` of the exit when MOBIL's safety criterion holds,
    and when it cannot, it misses the exit and goes round once more.
    """

    COMFORT_ACC_MAX = 3.0
    COMFORT_ACC_MIN = -5.0
    DISTANCE_WANTED = 10.0
    TIME_WANTED = 1.5
    EXIT_PREPARE_M = 30.0  # m before the end of the ring segment where the move to the exit lane starts
    LANE_CHANGE_MAX_BRAKING_IMPOSED = 2.0

    def act(self, action=None):
        if not self.crashed:
            self._prepare_exit()
        super().act(action)

    def _prepare_exit(self) -> None:
        """On an inner lane whose next road on the route is a single-lane exit: move over, or stay on the ring."""
        net = self.road.network
        _from, _to, lane_id = self.lane_index
        route = self.route or []
        if self.lane_index != self.target_lane_index or len(net.graph[_from][_to]) < 2:
            return
        nxt = next((r for r in route if r[0] == _to), None)
        if nxt is None or len(net.graph[_to][nxt[1]]) >= len(net.graph[_from][_to]):
            return  # the next road is not a narrower exit
        left = self.lane.length - self.lane.local_coordinates(self.position)[0]
        if left > self.EXIT_PREPARE_M:
            return
        exit_start = net.get_lane((_to, nxt[1], 0)).position(0.0, 0.0)
        beside = min(range(len(net.graph[_from][_to])), key=lambda k: net.get_lane((_from, _to, k)).distance(exit_start))
        if beside == lane_id:
            return  # already on the lane the exit joins
        if self._safe_to_enter((_from, _to, beside)):
            self.target_lane_index = (_from, _to, beside)
        elif left < self.LENGTH:  # too late to move over: stay on the ring and come round again
            ring_next = next(to for to, lanes in net.graph[_to].items() if len(lanes) == len(net.graph[_from][_to]))
            destination = route[-1][1] if route else nxt[1]
            try:
                path = net.shortest_path(ring_next, destination)
            except KeyError:
                path = []
            self.route = [self.lane_index, (_to, ring_next, None)] + [(a, b, None) for a, b in zip(path[:-1], path[1:])]

    def _safe_to_enter(self, lane_index) -> bool:
        preceding, following = self.road.neighbour_vehicles(self, lane_index)
        if following is not None and hasattr(following, "acceleration"):
            if following.acceleration(following, self) < -self.LANE_CHANGE_MAX_BRAKING_IMPOSED:
                return False
            if following.lane_distance_to(self) < self.LENGTH + 2.0:
                return False
        if preceding is not None and self.lane_distance_to(preceding) < self.LENGTH + 2.0:
            return False
        return True


class IntersectionTrafficVehicle(FastIDMMixin, IDMVehicle):
    """Intersection traffic. Gives way by `junction_entry_stop_gap` only: highway-env's `RegulatedRoad` also sets
    `target_speed = 0` on vehicles it predicts to conflict, inside the junction too, which left four of them
    standing in the box waiting for each other (a gridlock that blocked the expert)."""

    COMFORT_ACC_MAX = 3.0
    COMFORT_ACC_MIN = -3.0
    DISTANCE_WANTED = 7.0

    def act(self, action=None):
        if not hasattr(self, "cruise_speed"):
            self.cruise_speed = self.target_speed
        self.is_yielding = False
        self.target_speed = self.cruise_speed
        super().act(action)


class ExpertVehicle(FastIDMMixin, IDMVehicle):
    ACC_MAX = 1.5
    ACC_MIN = -3.5
    COMFORT_ACC_MAX = 1.2
    COMFORT_ACC_MIN = -2.5
    DISTANCE_WANTED = 8.0
    TIME_WANTED = 1.6
    DELTA = 4.0
    JERK_UP = 1.5
    JERK_DOWN = 4.0
    YIELD_DECEL = -3.0  # m/s^2 when the junction's priority rules tell the ego to give way (not once inside)
    MAX_LAT_ACC = 2.5
    MAX_YAW_RATE = 0.6
    CURVE_BRAKE = 1.5  # m/s^2 planned deceleration toward a curve
    STEER_RATE = 0.6  # rad/s
    # softer lane keeping than highway-env's (tau 0.6 s lateral, 0.2 s heading): its lane changes at highway
    # speed reach 5-6 m/s^2 of lateral acceleration
    KP_LATERAL = 1 / 1.0
    KP_HEADING = 1 / 0.25
    # The steering-rate limit sits inside the lane-keeping loop: with highway-env's gains a large lateral error
    # at low speed (a lane change at 6-8 m/s on the merge, a roundabout entry) asks for a steering swing the
    # rate limit delivers only seconds later, so the car overshoots, the next swing is larger still and it
    # weaves off the road (a rate-saturation limit cycle). Two bounds keep the loop inside what the rate limit
    # can deliver: the lateral loop may turn the car at most MAX_HEADING_OFFSET off the lane's heading
    # (highway-env: pi/4; never binds during a highway-speed lane change), and the heading loop commands no
    # more yaw rate than the rate-limited steering can take out again before the reference heading is reached.
    MAX_HEADING_OFFSET = 0.3  # rad
    LANE_CHANGE_MAX_BRAKING_IMPOSED = 2.0

    def __init__(self, road, position, heading=0.0, speed=0.0, **kwargs):
        super().__init__(road, position, heading, speed, **kwargs)
        self.enable_lane_change = False  # discretionary MOBIL off: only route-instructed changes
        self.route_profile = None  # (s, xy_hw, speed_cap) along the route, set by the World
        self.lane_changes: list[tuple[tuple, int, float]] = []  # (road (from,to), target id, lane s where allowed)
        self.external = False  # True: the World sets this vehicle's motion from outside (closed loop)
        self.hold_state = False  # True: do not integrate in step() (pose written externally each tick)
        self.prev_accel = 0.0
        self.prev_steer = 0.0
        self.desired_speed = float(speed)
        self.is_junction_lane = lambda lane_index: False  # set by the World: inside a junction, never stop

    # -- decisions ---------------------------------------------------------------------------------
    def max_yaw_rate(self, heading_error: float) -> float:
        """yaw rate ~ v * steer / LENGTH, so the steering-rate limit bounds the yaw acceleration to
        v * STEER_RATE / LENGTH: a yaw rate above sqrt(2 * that * |err|) could not be stopped by err = 0."""
        yaw_acc = max(abs(self.speed), 0.5) * self.STEER_RATE / self.LENGTH
        return math.sqrt(2.0 * yaw_acc * abs(heading_error))

    def act(self, action=None):
        if self.external:
            if isinstance(action, dict):
                Vehicle.act(self, action)
            return
        if self.crashed:
            return
        self.follow_road()
        self._route_lane_change()
        steer = self.steering_control(self.target_lane_index)
        dt = 0.1
        steer = _clip(steer, self.prev_steer - self.STEER_RATE * dt, self.prev_steer + self.STEER_RATE * dt)
        # RegulatedRoad (intersection) writes target_speed = 0 to make a vehicle yield and later resets it to the
        # lane's limit: keep our own desired speed and turn a yield into a bounded, smooth deceleration instead.
        yielding = False  # junction priority comes from `junction_entry_stop_gap` (see IntersectionTrafficVehicle)
        self.target_speed = self.desired_speed
        front, rear = self.road.neighbour_vehicles(self, self.lane_index)
        acc = self.acceleration(self, front, rear)
        if self.lane_index != self.target_lane_index:
            front, rear = self.road.neighbour_vehicles(self, self.target_lane_index)
            acc = min(acc, self.acceleration(self, front, rear))
        if yielding:
            acc = min(acc, self.YIELD_DECEL if self.speed > 0.5 else -self.speed / dt)
        acc = _clip(acc, self.ACC_MIN, self.ACC_MAX)
        acc = _clip(acc, self.prev_accel - self.JERK_DOWN * dt, self.prev_accel + self.JERK_UP * dt)
        if self.speed <= 0.0 and acc < 0:
            acc = 0.0  # never reverse
        self.prev_accel, self.prev_steer = acc, steer
        Vehicle.act(self, {"steering": steer, "acceleration": acc})

    def step(self, dt: float):
        if self.hold_state:
            self.on_state_update()
            return
        super().step(dt)
        if not self.external and self.speed < 0:
            self.speed = 0.0

    def acceleration(self, ego_vehicle=None, front_vehicle=None, rear_vehicle=None) -> float:
        if ego_vehicle is self and self.route_profile is not None:
            saved = self.target_speed
            self.target_speed = min(saved, self.curve_speed_cap())
            try:
                return super().acceleration(ego_vehicle, front_vehicle, rear_vehicle)
            finally:
                self.target_speed = saved
        return super().acceleration(ego_vehicle, front_vehicle, rear_vehicle)

    def curve_speed_cap(self) -> float:
        """Highest speed from which the ego can still slow down comfortably for every curve ahead on its route."""
        s, xy, cap = self.route_profile
        # nearest route point, searched near the last one (a route may pass close to itself)
        last = getattr(self, "_route_i", None)
        lo = 0 if last is None else max(0, last - 20)
        hi = len(s) if last is None else min(len(s), last + 100)
        i = lo + int(np.argmin(np.sum((xy[lo:hi] - self.position) ** 2, axis=1)))
        self._route_i = i
        ahead = slice(i, min(len(s), i + 120))
        d = np.maximum(s[ahead] - s[i], 0.0)
        return float(np.min(np.sqrt(cap[ahead] ** 2 + 2 * self.CURVE_BRAKE * d)))

    def _route_lane_change(self) -> None:
        """Start the lane change the route asks for, once past its start point and when MOBIL says it is safe."""
        if self.lane_index != self.target_lane_index or not self.lane_changes:
            return
        road_id, target_id, s_from = self.lane_changes[0]
        if self.lane_index[:2] != road_id:
            return
        if self.lane_index[2] == target_id:
            self.lane_changes.pop(0)
            return
        if self.lane.local_coordinates(self.position)[0] < s_from or abs(self.speed) < 1:
            return
        step = 1 if target_id > self.lane_index[2] else -1
        candidate = (road_id[0], road_id[1], self.lane_index[2] + step)
        if self._safe_lane_change(candidate):
            self.target_lane_index = candidate

    def _safe_lane_change(self, lane_index) -> bool:
        new_preceding, new_following = self.road.neighbour_vehicles(self, lane_index)
        if new_following is not None and isinstance(new_following, IDMVehicle):
            if new_following.acceleration(new_following, self) < -self.LANE_CHANGE_MAX_BRAKING_IMPOSED:
                return False
        if new_preceding is not None:
            if super().acceleration(self, new_preceding) < -self.LANE_CHANGE_MAX_BRAKING_IMPOSED:
                return False
            if self.lane_distance_to(new_preceding) < self.LENGTH + 2.0:
                return False
        return True


def speed_cap_from_curvature(kappa: np.ndarray, lane_speed_limit: np.ndarray) -> np.ndarray:
    k = np.maximum(np.abs(kappa), 1e-6)
    cap = np.minimum(np.sqrt(ExpertVehicle.MAX_LAT_ACC / k), ExpertVehicle.MAX_YAW_RATE / k)
    return np.minimum(cap, lane_speed_limit)


# -- comfort ---------------------------------------------------------------------------------------------------
def comfort_violations(poses: np.ndarray, speeds: np.ndarray, dt: float = 0.1) -> dict[str, float]:
    """Which nuPlan comfort bounds a driven trajectory breaks; {} when it is comfortable.

    `poses` (N, 3) world x, y, heading and `speeds` (N,) at `dt` spacing (use the 41 states of 0..4 s).
    Follows NAVSIM's `pdm_comfort_metrics`: the states' accelerations (longitudinal = d speed / dt, lateral =
    speed x yaw rate) smoothed by Savitzky-Golay (poly 2, window N); jerk = derivative (window N) of the
    acceleration smoothed with window 8 (magnitude for `jerk`, longitudinal for `lon_jerk`); yaw rate and yaw
    acceleration from the unwrapped heading with window 5 (poly 2 / poly 3). Returns the worst value of each
    broken metric.
    """
    from scipy.signal import savgol_filter

    n = len(poses)
    odd = lambda w: max(3, min(w, n) - (1 - min(w, n) % 2))  # noqa: E731  savgol wants an odd window <= n
    heading = np.unwrap(poses[:, 2])
    yaw_rate_raw = np.gradient(heading, dt)
    acc_x = np.gradient(speeds, dt)
    acc_y = speeds * yaw_rate_raw
    lon_acc = savgol_filter(acc_x, odd(n), 2)
    lat_acc = savgol_filter(acc_y, odd(n), 2)
    jerk = savgol_filter(savgol_filter(np.hypot(acc_x, acc_y), odd(8), 2), odd(n), 2, deriv=1, delta=dt)
    lon_jerk = savgol_filter(savgol_filter(acc_x, odd(8), 2), odd(n), 2, deriv=1, delta=dt)
    yaw_rate = savgol_filter(heading, odd(5), 2, deriv=1, delta=dt)
    yaw_acc = savgol_filter(heading, odd(5), 3, deriv=2, delta=dt)
    lo, hi = {k: b[0] for k, b in COMFORT_BOUNDS.items()}, {k: b[1] for k, b in COMFORT_BOUNDS.items()}
    checks = {  # the symmetric bounds are checked on the magnitude
        "lon_acc_max": (lon_acc.max(), lon_acc.max() < hi["lon_acc"]),
        "lon_acc_min": (lon_acc.min(), lon_acc.min() > lo["lon_acc"]),
        "lat_acc": (np.abs(lat_acc).max(), np.abs(lat_acc).max() < hi["lat_acc"]),
        "jerk": (np.abs(jerk).max(), np.abs(jerk).max() < hi["jerk"]),
        "lon_jerk": (np.abs(lon_jerk).max(), np.abs(lon_jerk).max() < hi["lon_jerk"]),
        "yaw_acc": (np.abs(yaw_acc).max(), np.abs(yaw_acc).max() < hi["yaw_acc"]),
        "yaw_rate": (np.abs(yaw_rate).max(), np.abs(yaw_rate).max() < hi["yaw_rate"]),
    }
    return {name: float(v) for name, (v, ok) in checks.items() if not ok}


__all__ = ["ExpertVehicle", "TrafficVehicle", "IntersectionTrafficVehicle", "comfort_violations"]
