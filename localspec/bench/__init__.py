"""``localspec bench``: every drafting strategy against plain decoding on real prompts
(``workloads``: HumanEval, MT-Bench, edits), side by side in one run (``runner``)."""
