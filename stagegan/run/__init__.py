"""Runs: the run plan (`TrainPlan`), starting, resuming and warm-starting a run, reading run
folders, `plan`, `sample` and `eval`."""
