"""The default world (highway-env) and its data.

- `world.py`: families (highway, merge, roundabout, intersection), `make_world`, `World` (closed loop),
  `route_progress` / `route_length` / `route_remaining` / `route_completed`.
- `expert.py`: `ExpertVehicle` (comfort-clamped IDM, route-instructed lane changes), `comfort_violations`.
- `capture.py`: `generate_scene` (logged scene or `Drop`), `observe` (live t0 scene), `route_command`.
- `command.py`: `command_from_route` (left / straight / right / unknown from the planned route only).
- `geometry.py`: frames (highway-env -> world -> ego), rear axle, boxes, polylines.
- `roadmap.py`: lane / drivable / intersection layers (`road_geometry`, `inside_drivable`).
- `render.py`: the camera image (`render_camera`), highway-env's own frame (`render_env_frame`).
- `scene.py`: the `Scene` record (contract with evaluation), `.npz` + `.png` storage.
- `prompts.py`, `trajectory.py`, `wamdiff2_json.py`, `qa.py`: training text, answer formats, JSON I/O, questions.
- `dataset.py`, `viewer.py`, `cli.py`: `wamdiff data generate | show | quantization | qa`.
"""
