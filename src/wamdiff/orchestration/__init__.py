"""The main job, run end to end: the layer above training, evaluation and serving that strings them together.

- `pipeline.py`: `run_pipeline`, `run_demo`, `export_checkpoints`; the config (`Pipeline`), stage files, the data,
  aggregation, training and averaging stages.
- `schedule.py`: which training stages run and in which lanes (the stage graph).
- `eval_stages.py`: the evaluation stages over `eval.run`, one per report row (open loop, speed, closed loop, QA,
  top-5 overlap, the decoding bench).
- `summary.py`: the report: the planners x metrics table and its plots (Markdown, PNG, CSV/JSON).
"""
