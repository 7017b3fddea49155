"""Speculative decoding: the loop (``loop``), the acceptance rules (``sampling``), the
policy that picks each round's drafter and length (``policy``, ``calibration``),
statistics (``stats``), the offline replay (``replay``) and the drafters (``drafters/``)."""
