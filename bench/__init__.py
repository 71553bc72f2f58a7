"""`make bench`: the engine and service benchmarks of issue 5, as ratios against same-run baselines."""
