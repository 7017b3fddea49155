"""``localspec serve``'s HTTP server: the app and its routes (``app``), the state every
protocol's routes take (``state``), the one generation request each protocol translates its
body into and its validator (``request``), errors with the field path (``errors``), the model
worker and its queue (``worker``), and one module per protocol (``openai_chat``,
``anthropic_messages``, ``openai_responses``, ``infill``)."""
