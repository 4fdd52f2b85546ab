"""Benchmark scripts: each module ``bench/<name>.py`` exposes ``run(quick=False) -> list[Row]`` and
prints its table when run as a script. Times are compared as ratios measured side by side in one run.
"""
