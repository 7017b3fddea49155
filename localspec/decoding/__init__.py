"""Speculative decoding: the loop (``loop``), the acceptance rules (``sampling``), the
policy that picks each round's drafter and length, its cost model and what it learnt on this
machine (``policy/``), statistics (``stats``) and the drafters (``drafters/``)."""
