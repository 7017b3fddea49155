"""``localspec serve``'s HTTP server: the app and routes (``app``), request schemas
(``schemas``), errors in each protocol's shape (``errors``), the model worker and its
queue (``worker``), and one module per response protocol."""
